"""``kqlite produce DATA TOPIC``: append stdin lines (raw or JSON lines) to a topic."""

import base64
import json
import sys

from ..db import open_database
from ..errors import InvalidRecordError


def add_parser(sub):
    p = sub.add_parser("produce", help="append records read from stdin to a topic",
                       description="Each input line becomes one record. --format json reads "
                                   'objects like {"key": "k", "value": "v", "headers": {"h": "x"},'
                                   ' "partition": 0, "timestamp": 1700000000000}.')
    p.add_argument("data_dir")
    p.add_argument("topic")
    p.add_argument("--format", choices=["raw", "json"], default="raw")
    p.add_argument("--key", help="key for every record (raw format)")
    p.add_argument("--key-separator", help="raw format: split each line into key SEP value")
    p.add_argument("--partition", type=int, help="write to this partition")
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--create", type=int, metavar="PARTITIONS",
                   help="create the topic with this many partitions if it does not exist")
    p.add_argument("--input", help="read this file instead of stdin")
    p.set_defaults(run=run)


def _bytes(value, field, line_no):
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"base64"}:
        return base64.b64decode(value["base64"])
    raise InvalidRecordError(f"line {line_no}: {field} must be a string, null or "
                             f'{{"base64": ...}}')


def _parse(line, n, args):
    if args.format == "json":
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InvalidRecordError(f"line {n}: not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InvalidRecordError(f"line {n}: expected a JSON object")
        headers = [(k, _bytes(v, "header", n)) for k, v in (obj.get("headers") or {}).items()]
        return (_bytes(obj.get("key"), "key", n), _bytes(obj.get("value"), "value", n), headers,
                obj.get("partition", args.partition), obj.get("timestamp"))
    key = args.key
    value = line
    if args.key_separator:
        if args.key_separator not in line:
            raise InvalidRecordError(f"line {n}: no key separator {args.key_separator!r}")
        key, value = line.split(args.key_separator, 1)
    return (None if key is None else key.encode(), value.encode(), [], args.partition, None)


def run(args, out=sys.stdout):
    source = open(args.input, encoding="utf-8") if args.input else sys.stdin
    count = 0
    with open_database(args.data_dir, retention_check_interval_ms=0) as db:
        if args.create:
            db.create_topic(args.topic, args.create, exist_ok=True)
        with db.producer(linger_ms=10, batch_size=1 << 20,
                         compression_type=args.compression) as producer:
            futures = []
            for n, line in enumerate(source, 1):
                line = line.rstrip("\n")
                key, value, headers, partition, ts = _parse(line, n, args)
                futures.append(producer.send(args.topic, value, key=key, partition=partition,
                                             headers=headers, timestamp=ts))
                count += 1
            producer.flush()
            for f in futures:
                f.result()
    if source is not sys.stdin:
        source.close()
    print(f"produced {count} record(s) to {args.topic}", file=sys.stderr)
    return 0
