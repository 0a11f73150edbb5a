"""``kqlite check PATH``: verify every CRC, index and transaction index; exit 1 on any
corruption; report hanging transactions."""

import os
import sys
import time

from ..storage.fs import DEFAULT_FS
from ..storage.verify import TransactionReplay, find_segments, verify_segment
from .progress import Progress

# Kafka's transaction.max.timeout.ms default: no coordinator lets a transaction live
# longer, so one open longer than that is left by a coordinator that forgot it.
HANGING_AFTER_MS = 900_000


def add_parser(sub):
    p = sub.add_parser("check", help="verify every batch CRC and index (read-only)",
                       description="Verify every batch (framing, CRC-32C, record decoding), "
                                   "every index entry and every .txnindex entry under PATH: "
                                   "a data dir, a partition dir or one .log file. Exits 1 if "
                                   "anything is corrupt, like SQLite's PRAGMA "
                                   "integrity_check. Transactions still open at the end of a "
                                   "partition are listed; those open longer than "
                                   "--hanging-after-ms are hanging: they hold back every "
                                   "read_committed reader until aborted.")
    p.add_argument("path")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    p.add_argument("--hanging-after-ms", type=int, default=HANGING_AFTER_MS,
                   help="an open transaction older than this is hanging (default: Kafka's "
                        "transaction.max.timeout.ms, 900000)")
    p.set_defaults(run=run)


def run(args, out=sys.stdout):
    fs = DEFAULT_FS
    segments = find_segments(fs, args.path)
    if not segments:
        print(f"kqlite check: no segments under {args.path}", file=sys.stderr)
        return 2
    total = sum(fs.file_size(p) for p in segments)
    progress = Progress(total, "checking", quiet=args.quiet)
    problems = records = 0
    replays = {}
    try:
        for path in segments:
            directory = os.path.dirname(path)
            replay = replays.get(directory)
            if replay is None:
                replay = replays[directory] = TransactionReplay(directory)
            summary = verify_segment(fs, path, progress.update, replay)
            records += summary.records
            for problem in summary.problems:
                problems += 1
                print(f"{problem.path}:{problem.position}: {problem.message}", file=out)
    finally:
        progress.close()
    now = int(time.time() * 1000)
    open_txns = [t for replay in replays.values() for t in replay.open_transactions()]
    hanging = 0
    for txn in open_txns:
        age = now - txn.timestamp if txn.timestamp >= 0 else None
        late = age is None or age > args.hanging_after_ms
        hanging += late
        if late or not args.quiet:
            since = "at an unknown time" if age is None else f"{age // 1000} s ago"
            print(f"{txn.path}: {'hanging' if late else 'open'} transaction of producer "
                  f"{txn.producer_id} from offset {txn.first_offset}, begun {since}",
                  file=out)
    if problems:
        print(f"kqlite check: {problems} problem(s) in {len(segments)} segment(s)", file=out)
        return 1
    if not args.quiet:
        print(f"ok: {len(segments)} segment(s), {records} record(s), {total} bytes, "
              f"{len(open_txns)} open transaction(s), {hanging} hanging", file=out)
    return 0
