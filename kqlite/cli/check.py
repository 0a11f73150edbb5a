"""``kqlite check PATH``: verify every CRC and index; exit 1 on any corruption."""

import sys

from ..storage.fs import DEFAULT_FS
from ..storage.verify import find_segments, verify_segment
from .progress import Progress


def add_parser(sub):
    p = sub.add_parser("check", help="verify every batch CRC and index (read-only)",
                       description="Verify every batch (framing, CRC-32C, record decoding) "
                                   "and every index entry under PATH: a data dir, a partition "
                                   "dir or one .log file. Exits 1 if anything is corrupt, "
                                   "like SQLite's PRAGMA integrity_check.")
    p.add_argument("path")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems")
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
    try:
        for path in segments:
            summary = verify_segment(fs, path, progress.update)
            records += summary.records
            for problem in summary.problems:
                problems += 1
                print(f"{problem.path}:{problem.position}: {problem.message}", file=out)
    finally:
        progress.close()
    if problems:
        print(f"kqlite check: {problems} problem(s) in {len(segments)} segment(s)", file=out)
        return 1
    if not args.quiet:
        print(f"ok: {len(segments)} segment(s), {records} record(s), {total} bytes", file=out)
    return 0
