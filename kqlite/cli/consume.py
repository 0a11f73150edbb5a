"""``kqlite consume DATA TOPIC``: print records from an offset, a time or a group."""

import base64
import json
import sys
import time

from ..db import open_database


def add_parser(sub):
    p = sub.add_parser("consume", help="print records of a topic",
                       description="Print records (raw values or JSON lines). Without --group "
                                   "reads every partition from --offset/--from-time/--from-"
                                   "beginning (default: the end, like Kafka) and exits at the "
                                   "end unless --follow; with --group resumes at and commits "
                                   "the group's offsets.")
    p.add_argument("data_dir")
    p.add_argument("topic")
    p.add_argument("--group", help="consume as a member of this consumer group")
    p.add_argument("--partition", type=int, help="only this partition")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, help="start offset (with --partition)")
    start.add_argument("--from-time", type=int, metavar="MS",
                       help="start at the first record at or after this time (ms)")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--format", choices=["raw", "json"], default="raw")
    p.add_argument("--follow", action="store_true", help="keep waiting for new records")
    p.add_argument("--timeout-ms", type=int, default=1000,
                   help="with a group and no --follow: stop after this long without records")
    p.set_defaults(run=run)


def _text(data):
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _print(rec, fmt, out):
    if fmt == "json":
        out.write(json.dumps({"topic": rec.topic, "partition": rec.partition,
                              "offset": rec.offset, "timestamp": rec.timestamp,
                              "key": _text(rec.key), "value": _text(rec.value),
                              "headers": {k: _text(v) for k, v in rec.headers}}) + "\n")
    else:
        out.write((rec.value or b"").decode("utf-8", "backslashreplace") + "\n")


def run(args, out=sys.stdout):
    with open_database(args.data_dir, retention_check_interval_ms=0) as db:
        count = db.partitions_for(args.topic)
        tps = [(args.topic, args.partition)] if args.partition is not None else \
            [(args.topic, p) for p in range(count)]
        reset = "earliest" if args.from_beginning or args.offset is not None \
            or args.from_time is not None else "latest"
        if args.group:
            consumer = db.consumer(args.topic, group=args.group, auto_offset_reset=reset)
        else:
            consumer = db.consumer(assign=tps, auto_offset_reset=reset)
            if args.offset is not None:
                for tp in tps:
                    consumer.seek(tp, args.offset)
            if args.from_time is not None:
                for tp, found in consumer.offsets_for_times(
                        {tp: args.from_time for tp in tps}).items():
                    if found:
                        consumer.seek(tp, found.offset)
                    else:
                        consumer.seek_to_end(tp)
        ends = {}
        for tp in tps:
            with db.leased_log(*tp) as lg:
                ends[tp] = lg.end_offset
        printed = 0
        idle_since = time.monotonic()
        try:
            while args.max_messages is None or printed < args.max_messages:
                limit = None if args.max_messages is None else args.max_messages - printed
                records = consumer.poll(timeout_ms=100, max_records=limit)
                for rec in records:
                    _print(rec, args.format, out)
                printed += len(records)
                out.flush()
                if records:
                    idle_since = time.monotonic()
                if args.follow:
                    continue
                if args.group:
                    if not records and time.monotonic() - idle_since >= args.timeout_ms / 1000:
                        break
                elif all(consumer.position(tp) >= end for tp, end in ends.items()):
                    break
        finally:
            consumer.close()
    return 0
