"""``kqlite dump FILE``: print segments, batches, records and index entries
(the shape of Kafka's kafka-dump-log): a control batch's line ends with its marker
(``endTxnMarker: COMMIT coordinatorEpoch: 5``), as its record's line does with
``--deep``; a ``.txnindex`` prints its AbortedTxn entries as kafka-dump-log does."""

import os
import struct
import sys

from ..errors import CorruptRecordError
from ..format import batch as batch_format
from ..errors import KqliteError
from ..format.constants import CODEC_NAMES, MAGIC_V2
from ..format.control_records import read_marker
from ..format.legacy import read_legacy_entry
from ..storage.fs import DEFAULT_FS
from ..storage.scan import SCAN_OK, STATUS_TEXT, SegmentWalk
from ..storage.segment import parse_segment_name
from ..storage.txn_index import ENTRY as TXN_ENTRY


def add_parser(sub):
    p = sub.add_parser("dump", help="print the batches, records or index entries of files",
                       description="Print segment batches (and records with --deep), or the "
                                   "entries of .index/.timeindex/.txnindex files, like "
                                   "kafka-dump-log.")
    p.add_argument("files", nargs="+")
    p.add_argument("--deep", action="store_true", help="print every record of every batch")
    p.add_argument("--print-data", action="store_true", help="with --deep: keys and values")
    p.set_defaults(run=run)


def _show(data):
    if data is None:
        return "null"
    return data.decode("utf-8", "backslashreplace")


def _marker_text(data, local, h):
    """`` endTxnMarker: COMMIT coordinatorEpoch: 5`` for a control batch holding a
    transaction marker, else an empty string."""
    if not h.is_control or not h.records_count:
        return ""
    try:
        marker = read_marker(data, local, h)
    except KqliteError as exc:
        return f" controlRecord: unreadable ({exc})"
    return f" endTxnMarker: {marker.name} coordinatorEpoch: {marker.coordinator_epoch}"


def _dump_log(path, args, out):
    f = DEFAULT_FS.open(path)
    bad = []

    def show(batches):
        start = batches[0][0]
        data = f.pread(batches[-1][0] + batches[-1][4] - start, start)
        for pos, base, last, max_ts, size, magic in batches:
            local = pos - start
            if magic == MAGIC_V2:
                h = batch_format.parse_header(data, local)
                try:
                    batch_format.verify_crc(data, local, h)
                    valid = True
                except CorruptRecordError:
                    valid = False
                print(f"baseOffset: {base} lastOffset: {last} count: {h.records_count} "
                      f"baseSequence: {h.base_sequence} producerId: {h.producer_id} "
                      f"producerEpoch: {h.producer_epoch} "
                      f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                      f"isTransactional: {str(h.is_transactional).lower()} "
                      f"isControl: {str(h.is_control).lower()} position: {pos} "
                      f"{'LogAppendTime' if h.timestamp_type else 'CreateTime'}: {max_ts} "
                      f"size: {size} magic: {magic} compresscodec: {CODEC_NAMES[h.compression]} "
                      f"crc: {h.crc} isvalid: {str(valid).lower()}"
                      f"{_marker_text(data, local, h) if valid else ''}", file=out)
                if not valid:
                    bad.append(pos)
                    continue
                records = batch_format.decode_records(data, local, h) if args.deep else []
                marker = _marker_text(data, local, h)
            else:
                print(f"offset: {base} position: {pos} CreateTime: {max_ts} size: {size} "
                      f"magic: {magic}", file=out)
                records = read_legacy_entry(data, local) if args.deep else []
                marker = ""
            for r in records:
                line = (f"| offset: {r.offset} CreateTime: {r.timestamp} "
                        f"keySize: {-1 if r.key is None else len(r.key)} "
                        f"valueSize: {-1 if r.value is None else len(r.value)} "
                        f"headerKeys: [{','.join(k for k, _ in r.headers)}]")
                if marker:
                    line += marker
                elif args.print_data:
                    line += f" key: {_show(r.key)} payload: {_show(r.value)}"
                print(line, file=out)

    try:
        print(f"Dumping {path}", file=out)
        walk = SegmentWalk(f, 0, f.size())
        for chunk in walk.chunks():
            if chunk.batches:
                show(chunk.batches)
    finally:
        f.close()
    if walk.status != SCAN_OK:
        print(f"Found {STATUS_TEXT[walk.status]} at position {walk.stop}", file=out)
        return 1
    return 1 if bad else 0


def _dump_index(path, out, entry, names):
    data = open(path, "rb").read()
    base = parse_segment_name(os.path.basename(path))[0]
    print(f"Dumping {path}", file=out)
    for slot in range(len(data) // entry.size):
        a, b = entry.unpack_from(data, slot * entry.size)
        if names[0] == "offset":
            print(f"offset: {base + a} position: {b}", file=out)
        else:
            print(f"timestamp: {a} offset: {base + b}", file=out)
    return 0 if len(data) % entry.size == 0 else 1


def _dump_txn_index(path, out):
    """A ``.txnindex``'s entries, in kafka-dump-log's words."""
    data = open(path, "rb").read()
    print(f"Dumping {path}", file=out)
    for at in range(0, len(data) - len(data) % TXN_ENTRY.size, TXN_ENTRY.size):
        version = data[at]
        _v, producer_id, first, last, lso = TXN_ENTRY.unpack_from(data, at)
        print(f"version: {version} producerId: {producer_id} firstOffset: {first} "
              f"lastOffset: {last} lastStableOffset: {lso}", file=out)
    if len(data) % TXN_ENTRY.size:
        print(f"Found {len(data) % TXN_ENTRY.size} bytes of a partial entry at position "
              f"{len(data) - len(data) % TXN_ENTRY.size}", file=out)
        return 1
    return 0


def run(args, out=sys.stdout):
    status = 0
    for path in args.files:
        if not os.path.exists(path):
            print(f"kqlite dump: {path}: no such file", file=sys.stderr)
            status = 2
        elif path.endswith(".log"):
            status = max(status, _dump_log(path, args, out))
        elif path.endswith(".timeindex"):
            status = max(status, _dump_index(path, out, struct.Struct(">qi"),
                                             ("timestamp", "offset")))
        elif path.endswith(".index"):
            status = max(status, _dump_index(path, out, struct.Struct(">ii"),
                                             ("offset", "position")))
        elif path.endswith(".txnindex"):
            status = max(status, _dump_txn_index(path, out))
        else:
            print(f"kqlite dump: {path}: not a .log, .index, .timeindex or .txnindex file",
                  file=sys.stderr)
            status = 2
    return status
