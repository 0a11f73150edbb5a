"""``kqlite users DIR add|list|delete``: the SCRAM credentials a broker's SASL listeners check.

A single broker keeps them in its data dir (``.kqlite/scram-credentials.json``, mode 0600);
a running broker reads a change at the next login. ``add`` computes the credential here,
as ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=N,password=P]'`` does:
a new salt, Hi over the password, the stored and server keys; the password itself is never
stored. Without ``--mechanism`` both SCRAM mechanisms are set. The password is read from
``--password``, or from standard input when that is ``-`` (a line, without its newline),
so it need not appear in the process list.
"""

import sys

from ..server.authentication import credential_changes, credential_file, scram

__all__ = ["add_parser", "run"]


def add_parser(sub):
    p = sub.add_parser("users", help="add, list or delete SCRAM users of a broker's data dir")
    p.add_argument("data_dir")
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
    p.set_defaults(run=run)


def _password(text, stdin):
    if text != "-":
        return text
    return stdin.readline().rstrip("\n")


def run(args, out=sys.stdout, stdin=sys.stdin):
    if args.action == "list":
        _, users, _ = credential_file.read_credentials(args.data_dir)
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
        _, users, _ = credential_file.read_credentials(args.data_dir)
        present = users.get(args.user, {})
        chosen = [m for m in mechanisms if m in present] if args.mechanism is None else mechanisms
        if not chosen:
            print(f"kqlite users: {args.user!r} has no SCRAM credential", file=sys.stderr)
            return 1
        body = {"deletions": [{"name": args.user, "mechanism": scram.MECHANISMS[m].type_code}
                              for m in chosen], "upsertions": []}
    planned = credential_changes.plan(body)
    (result,) = credential_file.change_credentials(
        args.data_dir, lambda users: credential_changes.apply(users, planned))
    if result["error_code"]:
        print(f"kqlite users: {args.user}: {result['error_message']}", file=sys.stderr)
        return 1
    verb = "set" if args.action == "add" else "deleted"
    print(f"{args.user}: {', '.join(mechanisms if args.action == 'add' else chosen)} {verb}",
          file=out)
    return 0
