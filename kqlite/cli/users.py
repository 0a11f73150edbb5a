"""``kqlite users DIR add|list|delete`` and ``kqlite users --zookeeper HOST:PORT[/CHROOT]
add|list|delete``: the SCRAM credentials a broker's SASL listeners check.

A single broker keeps them in its data dir (``.kqlite/scram-credentials.json``, mode 0600);
a running broker reads a change at the next login. A cluster keeps them in ZooKeeper, as
Kafka does (``/config/users/<user>``, beside the user's quotas, which are kept): a change
is written with its ``/config/changes`` notification, and every broker applies it within
moments, as ``kafka-configs --zookeeper --alter --entity-type users`` does.

``add`` computes the credential here, as ``kafka-configs --alter --add-config
'SCRAM-SHA-256=[iterations=N,password=P]'`` does: a new salt, Hi over the password, the
stored and server keys; the password itself is never stored. Without ``--mechanism``
both SCRAM mechanisms are set. The password is read from ``--password``, or from
standard input when that is ``-`` (a line, without its newline), so it need not appear in
the process list.
"""

import argparse
import sys

from ..server.authentication import credential_changes, credential_file, scram
from .kazoo_logging import quiet_kazoo

__all__ = ["add_parser", "run"]

DEFAULT_TIMEOUT = 10.0


_ACTIONS = ("add", "list", "delete")


def add_parser(sub):
    p = sub.add_parser(
        "users", help="add, list or delete SCRAM users of a broker's data dir or of a "
                      "cluster's ZooKeeper",
        usage="kqlite users (DIR | --zookeeper HOST:PORT[/CHROOT]) {add,list,delete} ...",
        description="DIR: a single broker's data dir; --zookeeper: a cluster's users "
                    "(/config/users, as kafka-configs --zookeeper writes them). ACTION: "
                    "add USER --password P [--mechanism M] [--iterations N] | list | "
                    "delete USER [--mechanism M]; `kqlite users DIR ACTION --help` "
                    "tells more.")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="a cluster's zookeeper.connect, instead of DIR")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"give up reaching ZooKeeper after this long (default "
                        f"{DEFAULT_TIMEOUT:g})")
    # The data dir, when given, comes before the action: the rest is parsed by
    # _actions(), since an optional positional before sub-commands would take the action.
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="[DIR] ACTION ...")
    p.set_defaults(run=run)


def _actions():
    p = argparse.ArgumentParser(prog="kqlite users (DIR | --zookeeper HOST:PORT[/CHROOT])")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("add", help="add a user, or change its password")
    a.add_argument("user")
    a.add_argument("--password", required=True, help="the password, or - to read a line "
                                                     "from standard input")
    a.add_argument("--mechanism", action="append", choices=sorted(scram.MECHANISMS),
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: both)")
    a.add_argument("--iterations", type=int, default=scram.DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, {scram.MIN_ITERATIONS}-{scram.MAX_ITERATIONS} "
                        f"(default {scram.DEFAULT_ITERATIONS})")
    actions.add_parser("list", help="users and their mechanisms and iterations")
    d = actions.add_parser("delete", help="delete a user's credentials")
    d.add_argument("user")
    d.add_argument("--mechanism", action="append", choices=sorted(scram.MECHANISMS),
                   help="delete only this mechanism's (repeatable; default: every one)")
    return p


def _parse_command(args):
    """Fill ``args.data_dir`` and the action's arguments from ``args.command``."""
    command = list(args.command)
    args.data_dir = None
    if command and command[0] not in _ACTIONS and not command[0].startswith("-"):
        args.data_dir = command.pop(0)
    for key, value in vars(_actions().parse_args(command)).items():
        setattr(args, key, value)


def _password(text, stdin):
    if text != "-":
        return text
    return stdin.readline().rstrip("\n")


class _DataDir:
    """The data dir's credentials file."""

    def __init__(self, data_dir):
        self.data_dir = data_dir

    def users(self):
        return credential_file.read_credentials(self.data_dir)[1]

    def alter(self, planned):
        (result,) = credential_file.change_credentials(
            self.data_dir, lambda users: credential_changes.apply(users, planned))
        return result

    def close(self):
        pass


class _ZooKeeper:
    """A cluster's credentials in ZooKeeper."""

    def __init__(self, hosts, timeout):
        from ..cluster.zookeeper.snapshot import connect
        self.client = connect(hosts, timeout)

    def users(self):
        from ..cluster.zookeeper.credentials import read_all_credentials
        return read_all_credentials(self.client)

    def alter(self, planned):
        from ..cluster.zookeeper.credentials import alter_credentials
        (result,) = alter_credentials(self.client, planned)
        return result

    def close(self):
        self.client.stop()
        self.client.close()


def _where(args):
    if (args.data_dir is None) == (args.zookeeper is None):
        raise SystemExit("kqlite users: give a data dir or --zookeeper, not both or neither")
    if args.zookeeper is not None:
        quiet_kazoo(args)
        return _ZooKeeper(args.zookeeper, args.timeout)
    return _DataDir(args.data_dir)


def run(args, out=None, stdin=None):
    out, stdin = out or sys.stdout, stdin or sys.stdin
    _parse_command(args)
    try:
        where = _where(args)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    except Exception as exc:     # noqa: BLE001 -- ZooKeeper out of reach: said plainly
        print(f"kqlite users: {exc}", file=sys.stderr)
        return 1
    try:
        return _run(args, where, out, stdin)
    finally:
        where.close()


def _run(args, where, out, stdin):
    if args.action == "list":
        users = where.users()
        for user in sorted(users):
            shown = ", ".join(f"{m} (iterations {scram.ScramCredential.from_text(t).iterations})"
                              for m, t in sorted(users[user].items()))
            print(f"{user}: {shown}", file=out)
        return 0
    mechanisms = args.mechanism or sorted(scram.MECHANISMS)
    if args.action == "add":
        if not scram.MIN_ITERATIONS <= args.iterations <= scram.MAX_ITERATIONS:
            print(f"kqlite users: --iterations must be {scram.MIN_ITERATIONS}-"
                  f"{scram.MAX_ITERATIONS}", file=sys.stderr)
            return 2
        password = _password(args.password, stdin)
        if not args.user or not password:
            print("kqlite users: the user name and the password must not be empty",
                  file=sys.stderr)
            return 2
        upsertions = []
        for name in mechanisms:
            mechanism = scram.MECHANISMS[name]
            salt = scram.random_salt()
            upsertions.append({"name": args.user, "mechanism": mechanism.type_code,
                               "iterations": args.iterations, "salt": salt,
                               "salted_password": scram.salted_password(
                                   mechanism, password, salt, args.iterations)})
        body = {"deletions": [], "upsertions": upsertions}
    else:
        present = where.users().get(args.user, {})
        chosen = [m for m in mechanisms if m in present] if args.mechanism is None else mechanisms
        if not chosen:
            print(f"kqlite users: {args.user!r} has no SCRAM credential", file=sys.stderr)
            return 1
        body = {"deletions": [{"name": args.user, "mechanism": scram.MECHANISMS[m].type_code}
                              for m in chosen], "upsertions": []}
    result = where.alter(credential_changes.plan(body))
    if result["error_code"]:
        print(f"kqlite users: {args.user}: {result['error_message']}", file=sys.stderr)
        return 1
    verb = "set" if args.action == "add" else "deleted"
    print(f"{args.user}: {', '.join(mechanisms if args.action == 'add' else chosen)} {verb}",
          file=out)
    return 0
