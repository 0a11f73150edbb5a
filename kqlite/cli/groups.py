"""``kqlite groups DATA list|describe GROUP``: committed offsets and lag."""

import os
import sys

from ..db import open_database
from ..db.groups import GroupMembership, group_dir, groups_root


def add_parser(sub):
    p = sub.add_parser("groups", help="list consumer groups or describe one with its lag")
    p.add_argument("data_dir")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="groups with committed offsets or live members")
    d = actions.add_parser("describe", help="per-partition committed offset, end and lag")
    d.add_argument("group")
    p.set_defaults(run=run)


def _live_members(db, group):
    if not os.path.isdir(os.path.join(group_dir(db.path, group), "members")):
        return {}
    return GroupMembership(db.path, group, "kqlite-cli-observer", [], fs=db.fs).members()


def run(args, out=sys.stdout):
    with open_database(args.data_dir, retention_check_interval_ms=0) as db:
        if args.action == "list":
            names = set(db.offsets.groups())
            base = groups_root(db.path)
            if os.path.isdir(base):
                names.update(os.listdir(base))
            for name in sorted(names):
                print(name, file=out)
            return 0
        committed = db.offsets.committed(args.group)
        members = _live_members(db, args.group)
        if not committed and not members:
            print(f"kqlite groups: no group {args.group!r}", file=sys.stderr)
            return 1
        print(f"GROUP {args.group}: {len(members)} live member(s)", file=out)
        print(f"{'TOPIC':<24} {'PARTITION':>9} {'COMMITTED':>12} {'END':>12} {'LAG':>10}",
              file=out)
        total = 0
        for (topic, partition), offset in sorted(committed.items()):
            try:
                with db.leased_log(topic, partition) as lg:
                    end = lg.end_offset
            except KeyError:      # UnknownTopicError: the topic or partition is gone
                continue
            lag = max(0, end - offset)
            total += lag
            print(f"{topic:<24} {partition:>9} {offset:>12} {end:>12} {lag:>10}", file=out)
        print(f"total lag: {total}", file=out)
    return 0
