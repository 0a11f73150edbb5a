"""``kqlite topics DATA list|create|describe|delete``."""

import sys

from ..db import open_database


def add_parser(sub):
    p = sub.add_parser("topics", help="create, list, describe or delete topics")
    p.add_argument("data_dir")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="list topics").add_argument(
        "--internal", action="store_true", help="include __consumer_offsets")
    c = actions.add_parser("create", help="create a topic")
    c.add_argument("topic")
    c.add_argument("--partitions", type=int, default=1)
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="per-topic config, e.g. --config retention.ms=3600000")
    d = actions.add_parser("describe", help="partitions, offsets, sizes and config")
    d.add_argument("topic", nargs="?")
    x = actions.add_parser("delete", help="delete a topic and its data")
    x.add_argument("topic")
    p.set_defaults(run=run)


def _config(pairs):
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--config expects KEY=VALUE, not {pair!r}")
        config[key] = value
    return config


def run(args, out=sys.stdout):
    with open_database(args.data_dir, retention_check_interval_ms=0) as db:
        if args.action == "list":
            for name in db.list_topics(internal=args.internal):
                print(name, file=out)
        elif args.action == "create":
            db.create_topic(args.topic, args.partitions, _config(args.config))
            print(f"created topic {args.topic} with {args.partitions} partition(s)", file=out)
        elif args.action == "delete":
            db.delete_topic(args.topic)
            print(f"deleted topic {args.topic}", file=out)
        else:
            for name in [args.topic] if args.topic else db.list_topics():
                d = db.describe_topic(name)
                overrides = db.topic_metadata(name)["config"]
                conf = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
                print(f"Topic: {name}\tTopicId: {d.topic_id}\tPartitionCount: "
                      f"{len(d.partitions)}\tConfigs: {conf}", file=out)
                for p in d.partitions:
                    print(f"\tPartition: {p.partition}\tStartOffset: {p.start_offset}\t"
                          f"EndOffset: {p.end_offset}\tSize: {p.size}\tSegments: {p.segments}",
                          file=out)
    return 0
