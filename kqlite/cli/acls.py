"""``kqlite acls add | list | remove``: Kafka's kafka-acls.sh, for a single broker's data dir,
a cluster's ZooKeeper, or any broker through the ACL APIs.

Where the ACLs are (one of):

- ``--data-dir DIR``: the file a single ``kqlite serve`` keeps them in
  (``.kqlite/acls.json``, edited under its lock; a running broker applies the change
  within a second);
- ``--zookeeper HOST:PORT[/CHROOT]``: a cluster's ``/kafka-acl`` znodes, written as Kafka's
  ``AclAuthorizer`` writes them, with the change notifications every broker follows (as
  kafka-acls.sh with ``--authorizer-properties zookeeper.connect=...``);
- ``--bootstrap-server HOST:PORT[,...]``: CreateAcls, DescribeAcls and DeleteAcls sent to
  a broker (kqlite's or Kafka's), which checks the caller's own ACLs first; with
  ``--command-config FILE`` the caller connects over TLS and SASL as that file says
  (admin_client.py), as kafka-acls.sh does.

What, as kafka-acls.sh takes it: resources (``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, ``--delegation-token``, ``--user-principal``; each repeatable),
``--resource-pattern-type`` (``literal`` or ``prefixed`` to add; also ``any`` and
``match`` to list or remove; default ``literal`` to add, ``any`` otherwise), principals
and hosts (``--allow-principal``, ``--deny-principal``, ``--allow-host``,
``--deny-host``: hosts default to ``*``), ``--operation`` (repeatable, default ``All``),
and the shortcuts ``--producer`` (WRITE, DESCRIBE and CREATE on the topics; with
``--idempotent`` IDEMPOTENT_WRITE on the cluster; with ``--transactional-id`` WRITE and
DESCRIBE on it) and ``--consumer`` (READ and DESCRIBE on the topics, READ on the
groups). ``remove`` with principals removes exactly those ACLs; without, every ACL of the
resources (narrowed with ``--principal``). ``list`` lists every ACL of the resources, or
all, optionally of ``--principal``.

Exit status: 0 when everything asked was done, 1 when an ACL was refused or a store was
unreachable, 2 for bad arguments.
"""

import json
import sys

from ..protocol.acl import (CLUSTER_NAME, AclOperation as Op, AclPermissionType as Perm,
                            PatternType, ResourcePattern, ResourceType as R)
from .locations import (BrokerLocation, ZooKeeperLocation, add_location_options,
                        check_location, open_location)

__all__ = ["add_parser", "run"]


def add_parser(sub):
    p = sub.add_parser(
        "acls", help="add, list or remove ACLs (kafka-acls.sh)",
        description="Manage Kafka ACLs: in a data dir, in a cluster's ZooKeeper, or through "
                    "a broker's ACL APIs.")
    p.set_defaults(run=lambda _args: _usage(p))
    commands = p.add_subparsers(dest="acls_command", metavar="COMMAND")
    for name, text in (("add", "add ACLs"), ("list", "list ACLs"),
                       ("remove", "remove ACLs")):
        c = commands.add_parser(name, help=text, description=text + ".")
        _options(c, name)
        c.set_defaults(run=run, acls_command=name)


def _usage(parser):
    parser.print_help(sys.stderr)
    return 2


def _options(p, command):
    add_location_options(p, "the ACL APIs")
    for flag, text in (("--topic", "a topic"), ("--group", "a consumer group"),
                       ("--transactional-id", "a transactional id"),
                       ("--delegation-token", "a delegation token"),
                       ("--user-principal", "a user (delegation tokens)")):
        p.add_argument(flag, action="append", default=[], metavar="NAME",
                       help=f"{text} (repeatable; `*` is every one)")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    choices = ("literal", "prefixed") if command == "add" else \
        ("literal", "prefixed", "any", "match")
    p.add_argument("--resource-pattern-type", choices=choices,
                   default="literal" if command == "add" else "any",
                   help="how the resource names match (default: %(default)s)")
    p.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, "
                        "DescribeTokens or All (repeatable; default All)")
    for flag, text in (("--allow-principal", "a principal allowed (User:NAME)"),
                       ("--deny-principal", "a principal denied"),
                       ("--allow-host", "a host the allow ACLs apply from (default *)"),
                       ("--deny-host", "a host the deny ACLs apply from (default *)")):
        p.add_argument(flag, action="append", default=[], metavar="VALUE",
                       help=text + " (repeatable)")
    if command != "add":
        p.add_argument("--principal", metavar="PRINCIPAL",
                       help="only the ACLs of this principal")
    if command != "list":
        p.add_argument("--producer", action="store_true",
                       help="the ACLs a producer needs on the topics")
        p.add_argument("--consumer", action="store_true",
                       help="the ACLs a consumer needs on the topics and groups")
        p.add_argument("--idempotent", action="store_true",
                       help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--json", action="store_true", help="print JSON, for scripts")


class _Usage(ValueError):
    """Arguments that do not make a request."""


def _resources(args, pattern_type):
    out = [(R.TOPIC, args.topic), (R.GROUP, args.group),
           (R.TRANSACTIONAL_ID, args.transactional_id),
           (R.DELEGATION_TOKEN, args.delegation_token), (R.USER, args.user_principal)]
    patterns = [ResourcePattern(t, n, pattern_type) for t, names in out for n in names]
    if args.cluster:
        patterns.append(ResourcePattern(R.CLUSTER, CLUSTER_NAME, pattern_type))
    return patterns


def _operations(args):
    from ..server.authorization.bindings import AclBindingError, parse_name
    try:
        return [parse_name(Op, o) for o in args.operation] or [Op.ALL]
    except AclBindingError as exc:
        raise _Usage(str(exc)) from None


def _entries(args, operations_of):
    """``[(pattern, AclEntry)]`` of the principals given, for ``operations_of(pattern)``."""
    from ..server.authorization.bindings import AclEntry
    out = []
    for permission, principals, hosts in ((Perm.ALLOW, args.allow_principal, args.allow_host),
                                          (Perm.DENY, args.deny_principal, args.deny_host)):
        for principal in principals:
            _check_principal(principal)
            for host in hosts or ["*"]:
                for pattern, operations in operations_of:
                    out.extend((pattern, AclEntry(principal, host, op, permission))
                               for op in operations)
    return out


def _check_principal(text):
    from ..server.authorization.bindings import AclBindingError, parse_principal
    try:
        parse_principal(text)
    except AclBindingError as exc:
        raise _Usage(str(exc)) from None


def _wanted(args, pattern_type):
    """``[(pattern, operations)]`` the command names: the shortcuts' or --operation's."""
    patterns = _resources(args, pattern_type)
    producer, consumer = getattr(args, "producer", False), getattr(args, "consumer", False)
    if not (producer or consumer):
        if not patterns:
            raise _Usage("name at least one resource (--topic, --group, --cluster, ...)")
        return [(p, _operations(args)) for p in patterns]
    out = []
    for p in patterns:
        if p.resource_type == R.TOPIC:
            out.append((p, ([Op.WRITE, Op.DESCRIBE, Op.CREATE] if producer else [])
                        + ([Op.READ, Op.DESCRIBE] if consumer else [])))
        elif p.resource_type == R.GROUP and consumer:
            out.append((p, [Op.READ]))
        elif p.resource_type == R.TRANSACTIONAL_ID and producer:
            out.append((p, [Op.WRITE, Op.DESCRIBE]))
    if producer and getattr(args, "idempotent", False):
        out.append((ResourcePattern(R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                    [Op.IDEMPOTENT_WRITE]))
    if not out:
        raise _Usage("--producer needs --topic, --consumer --topic and --group")
    return out


def _bindings_to_add(args):
    from ..server.authorization.bindings import AclBinding
    if not (args.allow_principal or args.deny_principal):
        raise _Usage("add needs --allow-principal or --deny-principal")
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    return [AclBinding(p, e) for p, e in _entries(args, _wanted(args, pattern_type))]


def _filters(args):
    from ..server.authorization.bindings import AclBindingFilter
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    if args.allow_principal or args.deny_principal:
        return [AclBindingFilter(p.resource_type, p.name, pattern_type, e.principal, e.host,
                                 e.operation, e.permission)
                for p, e in _entries(args, _wanted(args, pattern_type))]
    principal = getattr(args, "principal", None)
    if principal is not None:
        _check_principal(principal)
    patterns = _resources(args, pattern_type)
    if not patterns:
        if args.acls_command == "remove":
            raise _Usage("remove needs at least one resource")
        return [AclBindingFilter(principal=principal)]
    return [AclBindingFilter(p.resource_type, p.name, pattern_type, principal)
            for p in patterns]


def run(args):
    try:
        if args.acls_command == "add":
            work = _bindings_to_add(args)
        else:
            work = _filters(args)
        problem = check_location(args)
        if problem:
            raise _Usage(problem)
    except _Usage as exc:
        print(f"kqlite acls {args.acls_command}: {exc}", file=sys.stderr)
        return 2
    store, status = open_location(args, f"acls {args.acls_command}", _store)
    if store is None:
        return status
    try:
        if args.acls_command == "add":
            return _report_added(args, work, store.add(work))
        if args.acls_command == "remove":
            return _report_removed(args, store.remove(work))
        return _report_listed(args, store.list(work))
    except Exception as exc:          # noqa: BLE001 -- a store that failed: status 1
        print(f"kqlite acls {args.acls_command}: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()


# -- Where the ACLs are ---------------------------------------------------------------------

def _store(args):
    if args.data_dir:
        return _DataDirAcls(args.data_dir)
    if args.zookeeper:
        return _ZooKeeperAcls(args)
    return _BrokerAcls(args)


def _matching(acls, filters):
    from ..server.authorization.bindings import AclBinding
    return sorted({AclBinding(p, e) for p, entries in acls.items() for e in entries
                   if any(f.matches(AclBinding(p, e)) for f in filters)})


class _DataDirAcls:
    def __init__(self, data_dir):
        import os
        from ..server.authorization.acl_store import acl_file
        if not os.path.isdir(data_dir):
            raise FileNotFoundError(f"no data dir at {data_dir}")
        self.file = acl_file(data_dir)

    def list(self, filters):
        return _matching(self.file.read()[1], filters)

    def add(self, bindings):
        from ..server.authorization.bindings import binding_problem
        results = [binding_problem(b) for b in bindings]
        valid = [b for b, r in zip(bindings, results) if r is None]

        def change(acls):
            after = dict(acls)
            for b in valid:
                after[b.pattern] = after.get(b.pattern, frozenset()) | {b.entry}
            return after
        if valid:
            self.file.update(change)
        return results

    def remove(self, filters):
        removed = []

        def change(acls):
            removed[:] = _matching(acls, filters)
            after = {p: set(entries) for p, entries in acls.items()}
            for b in removed:
                after[b.pattern].discard(b.entry)
            return {p: frozenset(e) for p, e in after.items() if e}
        self.file.update(change)
        return removed

    def close(self):
        pass


class _ZooKeeperAcls(ZooKeeperLocation):

    def list(self, filters):
        from ..cluster.zookeeper.acls import read_all_acls
        return _matching(read_all_acls(self.zk), filters)

    def add(self, bindings):
        from ..cluster.zookeeper.acls import ensure_acl_paths, update_acls
        from ..server.authorization.bindings import binding_problem
        ensure_acl_paths(self.zk)
        results = [binding_problem(b) for b in bindings]
        by_pattern = {}
        for b, r in zip(bindings, results):
            if r is None:
                by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            update_acls(self.zk, pattern, lambda acls, new=frozenset(entries): acls | new)
        return results

    def remove(self, filters):
        from ..cluster.zookeeper.acls import read_all_acls, update_acls
        removed = _matching(read_all_acls(self.zk), filters)
        for pattern in {b.pattern for b in removed}:
            update_acls(self.zk, pattern, lambda acls: frozenset(
                e for e in acls if not any(f.matches_entry(e) and f.matches_pattern(pattern)
                                           for f in filters)))
        return removed


class _BrokerAcls(BrokerLocation):
    VERSIONS = (1, 3)
    CLIENT_ID = "kqlite-acls"

    def list(self, filters):
        from ..protocol import ApiKey, ErrorCode
        from ..server.authorization.bindings import AclBinding, AclEntry
        out = set()
        for f in filters:
            answer = self.call(ApiKey.DESCRIBE_ACLS, _filter_fields(f))
            if answer["error_code"]:
                raise RuntimeError(f"the broker refused: {ErrorCode(answer['error_code']).name}"
                                   f" ({answer['error_message']})")
            out.update(AclBinding(ResourcePattern(R(r["resource_type"]), r["resource_name"],
                                                  PatternType(r["pattern_type"])),
                                  AclEntry(a["principal"], a["host"], Op(a["operation"]),
                                           Perm(a["permission_type"])))
                       for r in answer["resources"] for a in r["acls"])
        return sorted(out)

    def add(self, bindings):
        from ..protocol import ApiKey, ErrorCode
        answer = self.call(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
             "resource_pattern_type": b.pattern.pattern_type, "principal": b.entry.principal,
             "host": b.entry.host, "operation": b.entry.operation,
             "permission_type": b.entry.permission} for b in bindings]})
        return [None if r["error_code"] == 0 else
                (ErrorCode(r["error_code"]).name, r["error_message"]) for r in answer["results"]]

    def remove(self, filters):
        from ..protocol import ApiKey, ErrorCode
        from ..server.authorization.bindings import AclBinding, AclEntry
        answer = self.call(ApiKey.DELETE_ACLS, {"filters": [_filter_fields(f)
                                                             for f in filters]})
        removed = []
        for result in answer["filter_results"]:
            if result["error_code"]:
                raise RuntimeError(f"the broker refused: {ErrorCode(result['error_code']).name}"
                                   f" ({result['error_message']})")
            removed.extend(AclBinding(ResourcePattern(R(a["resource_type"]), a["resource_name"],
                                                      PatternType(a["pattern_type"])),
                                      AclEntry(a["principal"], a["host"], Op(a["operation"]),
                                               Perm(a["permission_type"])))
                           for a in result["matching_acls"])
        return sorted(removed)


def _filter_fields(f):
    return {"resource_type_filter": f.resource_type, "resource_name_filter": f.name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal,
            "host_filter": f.host, "operation": f.operation, "permission_type": f.permission}


# -- Output ---------------------------------------------------------------------------------

def _binding_doc(b):
    from ..server.authorization.bindings import kafka_name
    return {"resource_type": kafka_name(b.pattern.resource_type), "name": b.pattern.name,
            "pattern_type": b.pattern.pattern_type.name, "principal": b.entry.principal,
            "host": b.entry.host, "operation": kafka_name(b.entry.operation),
            "permission": kafka_name(b.entry.permission)}


def _text(bindings):
    from ..server.authorization.bindings import kafka_name
    lines, last = [], None
    for b in bindings:
        if b.pattern != last:
            last = b.pattern
            lines.append(f"{kafka_name(b.pattern.resource_type)} {b.pattern.name!r} "
                         f"({b.pattern.pattern_type.name}):")
        lines.append(f"  {kafka_name(b.entry.permission)} {b.entry.principal} "
                     f"{kafka_name(b.entry.operation)} from {b.entry.host}")
    return "\n".join(lines)


def _report_listed(args, bindings):
    if args.json:
        print(json.dumps([_binding_doc(b) for b in bindings], indent=1))
    elif bindings:
        print(_text(bindings))
    return 0


def _report_added(args, bindings, results):
    failed = [(b, r) for b, r in zip(bindings, results) if r is not None]
    added = [b for b, r in zip(bindings, results) if r is None]
    if args.json:
        print(json.dumps({"added": [_binding_doc(b) for b in added],
                          "refused": [dict(_binding_doc(b), error=r[0], message=r[1])
                                      for b, r in failed]}, indent=1))
    else:
        if added:
            print("added:\n" + _text(sorted(added)))
        for b, (error, message) in failed:
            print(f"refused ({error}{': ' + message if message else ''}):\n{_text([b])}",
                  file=sys.stderr)
    return 1 if failed else 0


def _report_removed(args, removed):
    if args.json:
        print(json.dumps({"removed": [_binding_doc(b) for b in removed]}, indent=1))
    elif removed:
        print("removed:\n" + _text(removed))
    else:
        print("no ACL matched")
    return 0
