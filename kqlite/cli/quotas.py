"""``kqlite quotas alter | describe``: client quotas as kafka-configs.sh sets them
(``--entity-type users|clients``), for a single broker's data dir, a cluster's ZooKeeper,
or any broker through AlterClientQuotas and DescribeClientQuotas (which no Python or JS
client library offers).

Where the quotas are (one of): ``--data-dir DIR`` (``.kqlite/client-quotas.json``, which a
running broker follows within a second), ``--zookeeper HOST:PORT[/CHROOT]``
(``/config/users``, ``/config/clients`` and the ``/config/changes`` notification, beside a
user's SCRAM credentials), ``--bootstrap-server HOST:PORT[,...]`` (the APIs, which need
ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster; ``--command-config FILE`` for TLS and
SASL, as kafka-configs.sh takes it).

The entity: ``--user NAME`` or ``--user-default``, ``--client-id NAME`` or
``--client-id-default``, either or both. ``alter`` takes ``--add KEY=VALUE`` and
``--delete KEY`` (repeatable; keys ``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``, ``controller_mutation_rate``); the values are checked by Kafka's
rules. ``describe`` lists the entities that match (none given: every one), as
DescribeClientQuotas' exact and default matches, ``--strict`` leaving out entities with
other parts. Exit status: 0 done, 1 refused or unreachable, 2 bad arguments.
"""

import json
import sys

from .locations import (BrokerLocation, ZooKeeperLocation, add_location_options,
                        check_location, open_location)

__all__ = ["add_parser", "run"]



def add_parser(sub):
    p = sub.add_parser(
        "quotas", help="alter or describe client quotas (kafka-configs.sh for quotas)",
        description="Manage client quotas: in a data dir, in a cluster's ZooKeeper, or "
                    "through a broker's client quota APIs.")
    p.set_defaults(run=lambda _args: _usage(p))
    commands = p.add_subparsers(dest="quotas_command", metavar="COMMAND")
    for name, text in (("alter", "set or delete quotas of one entity"),
                       ("describe", "list the quotas of matching entities")):
        c = commands.add_parser(name, help=text, description=text + ".")
        _options(c, name)
        c.set_defaults(run=run, quotas_command=name)


def _usage(parser):
    parser.print_help(sys.stderr)
    return 2


def _options(p, command):
    add_location_options(p, "the client quota APIs")
    user = p.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="a user (a principal's name)")
    user.add_argument("--user-default", action="store_true", help="every user's default")
    client = p.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="NAME", help="a client id")
    client.add_argument("--client-id-default", action="store_true",
                        help="every client id's default")
    if command == "alter":
        p.add_argument("--add", action="append", default=[], metavar="KEY=VALUE",
                       help="set a quota (repeatable)")
        p.add_argument("--delete", action="append", default=[], metavar="KEY",
                       help="remove a quota (repeatable)")
    else:
        p.add_argument("--strict", action="store_true",
                       help="only entities made of exactly the parts named")
    p.add_argument("--json", action="store_true", help="print JSON, for scripts")


class _Usage(ValueError):
    pass


def _entity(args):
    from ..server.quotas.entities import DEFAULT, QuotaEntity
    user = DEFAULT if args.user_default else args.user
    client = DEFAULT if args.client_id_default else args.client_id
    return QuotaEntity(user, client)


def _ops(args):
    from ..server.quotas.admin_rules import QuotaRequestError, alter_ops
    ops = []
    for item in args.add:
        key, eq, value = item.partition("=")
        try:
            ops.append((key.strip(), float(value), False))
        except ValueError:
            raise _Usage(f"--add takes KEY=VALUE with a number, not {item!r}") from None
        if not eq:
            raise _Usage(f"--add takes KEY=VALUE, not {item!r}")
    ops += [(key, 0.0, True) for key in args.delete]
    if not ops:
        raise _Usage("alter needs --add or --delete")
    try:
        return alter_ops(ops)
    except QuotaRequestError as exc:
        raise _Usage(exc.message) from None


def run(args):
    entity = _entity(args)
    try:
        if args.quotas_command == "alter":
            if entity.user is None and entity.client_id is None:
                raise _Usage("name the entity: --user, --client-id or their defaults")
            ops = _ops(args)
        problem = check_location(args)
        if problem:
            raise _Usage(problem)
    except _Usage as exc:
        print(f"kqlite quotas {args.quotas_command}: {exc}", file=sys.stderr)
        return 2
    store, status = open_location(args, f"quotas {args.quotas_command}", _store)
    if store is None:
        return status
    try:
        if args.quotas_command == "alter":
            quotas = store.alter(entity, ops)
            _print(args, [(entity, quotas)])
            return 0
        _print(args, store.describe(entity, args.strict))
        return 0
    except Exception as exc:          # noqa: BLE001 -- refused or failed: status 1
        print(f"kqlite quotas {args.quotas_command}: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()


def _store(args):
    if args.data_dir:
        return _DataDirQuotas(args.data_dir)
    if args.zookeeper:
        return _ZooKeeperQuotas(args)
    return _BrokerQuotas(args)


def _components(entity, strict):
    """The DescribeClientQuotas filter of ``entity``'s named parts."""
    from ..server.quotas.admin_rules import MATCH_DEFAULT, MATCH_EXACT, describe_filter
    from ..server.quotas.entities import CLIENT_ID, DEFAULT, USER
    components = [(kind, MATCH_DEFAULT if part is DEFAULT else MATCH_EXACT,
                   None if part is DEFAULT else part)
                  for kind, part in ((USER, entity.user), (CLIENT_ID, entity.client_id))
                  if part is not None]
    return components, describe_filter(components, strict)


class _DataDirQuotas:
    def __init__(self, data_dir):
        import os
        from ..server.quotas.store import quota_file
        if not os.path.isdir(data_dir):
            raise FileNotFoundError(f"no data dir at {data_dir}")
        self.file = quota_file(data_dir)

    def alter(self, entity, ops):
        from ..server.quotas.store import apply_ops

        def change(configs):
            after = dict(configs)
            quotas = apply_ops(configs.get(entity, {}), ops)
            if quotas:
                after[entity] = quotas
            else:
                after.pop(entity, None)
            return after
        _stamp, configs = self.file.update(change)
        return configs.get(entity, {})

    def describe(self, entity, strict):
        from ..server.quotas.admin_rules import describe
        _components_, quota_filter = _components(entity, strict)
        return describe(list(self.file.read()[1].items()), quota_filter)

    def close(self):
        pass


class _ZooKeeperQuotas(ZooKeeperLocation):

    def alter(self, entity, ops):
        from ..cluster.zookeeper.client_quotas import alter_quotas
        return alter_quotas(self.zk, entity, ops)

    def describe(self, entity, strict):
        from ..cluster.zookeeper.client_quotas import read_all_quotas
        from ..server.quotas.admin_rules import describe
        _components_, quota_filter = _components(entity, strict)
        return describe(list(read_all_quotas(self.zk).items()), quota_filter)


class _BrokerQuotas(BrokerLocation):
    VERSIONS = (0, 1)
    CLIENT_ID = "kqlite-quotas"

    def alter(self, entity, ops):
        from ..protocol import ApiKey, ErrorCode
        answer = self.call(ApiKey.ALTER_CLIENT_QUOTAS, {"entries": [
            {"entity": _entity_fields(entity),
             "ops": [{"key": k, "value": v or 0.0, "remove": v is None}
                     for k, v in ops.items()]}], "validate_only": False})
        (entry,) = answer["entries"]
        if entry["error_code"]:
            raise RuntimeError(f"the broker refused: {ErrorCode(entry['error_code']).name}"
                               f" ({entry['error_message']})")
        (_entity_, quotas), = self.describe(entity, True) or [(entity, {})]
        return quotas

    def describe(self, entity, strict):
        from ..protocol import ApiKey, ErrorCode
        from ..server.quotas.entities import CLIENT_ID, DEFAULT, USER, QuotaEntity
        components, _filter = _components(entity, strict)
        answer = self.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, {
            "components": [{"entity_type": t, "match_type": m, "match": n}
                           for t, m, n in components], "strict": strict})
        if answer["error_code"]:
            raise RuntimeError(f"the broker refused: {ErrorCode(answer['error_code']).name}"
                               f" ({answer['error_message']})")
        out = []
        for e in answer["entries"] or []:
            parts = {c["entity_type"]: DEFAULT if c["entity_name"] is None else c["entity_name"]
                     for c in e["entity"]}
            out.append((QuotaEntity(parts.get(USER), parts.get(CLIENT_ID)),
                        {v["key"]: v["value"] for v in e["values"]}))
        return out


def _entity_fields(entity):
    from ..server.quotas.entities import CLIENT_ID, DEFAULT, USER
    return [{"entity_type": kind, "entity_name": None if part is DEFAULT else part}
            for kind, part in ((USER, entity.user), (CLIENT_ID, entity.client_id))
            if part is not None]


def _print(args, found):
    from ..server.quotas.entities import DEFAULT
    if args.json:
        print(json.dumps([{"user": None if e.user is DEFAULT else e.user,
                           "user_default": e.user is DEFAULT,
                           "client_id": None if e.client_id is DEFAULT else e.client_id,
                           "client_id_default": e.client_id is DEFAULT,
                           "quotas": quotas} for e, quotas in found], indent=1))
        return
    for entity, quotas in found:
        values = ", ".join(f"{k}={v:g}" for k, v in sorted(quotas.items())) or "no quotas"
        print(f"{entity.describe()}: {values}")
