"""Read-only integrity check of segments and indexes (SQLite's integrity_check).

Nothing here writes, locks or recovers: a log being checked can be in use. For
each ``.log`` file every batch is validated (framing, CRC, full record decode
including decompression) and the indexes are compared with the log. Problems
are returned as :class:`Problem` (file, byte position, text), never raised.
"""

import os
import struct
from collections import namedtuple

from ..errors import CorruptRecordError, KqliteError
from ..format import batch as batch_format
from ..format.constants import MAGIC_V2, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from ..format.legacy import read_legacy_entry
from .scan import SCAN_OK, STATUS_TEXT, scan_file
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, parse_segment_name

__all__ = ["Problem", "SegmentSummary", "verify_segment", "find_segments"]

Problem = namedtuple("Problem", "path position message")
SegmentSummary = namedtuple("SegmentSummary", "path batches records bytes first_offset "
                                              "last_offset problems")


def find_segments(fs, path):
    """``.log`` files under ``path`` (a data dir, a partition dir or one segment), sorted."""
    if path.endswith(LOG_SUFFIX) and not os.path.isdir(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            parsed = parse_segment_name(name)
            if parsed and parsed[1] == LOG_SUFFIX:
                found.append(os.path.join(root, name))
    return found


def _decode_all(data, batch):
    pos, _base, _last, _ts, _size, magic = batch
    if magic == MAGIC_V2:
        return batch_format.decode_records(data, pos)
    return read_legacy_entry(data, pos)


def verify_segment(fs, path, progress=None):
    """Validate one segment and its indexes; ``progress(bytes)`` is called as it goes."""
    base = parse_segment_name(os.path.basename(path))[0]
    f = fs.open(path)
    problems = []
    stats = {"batches": 0, "records": 0, "first": None, "last": None}
    batch_starts = {}
    try:
        size = f.size()

        def check(batches):
            data_start = batches[0][0]
            end = batches[-1][0] + batches[-1][4]
            data = f.pread(end - data_start, data_start)
            for b in batches:
                local = (b[0] - data_start,) + tuple(b[1:])
                try:
                    records = _decode_all(data, local)
                except (CorruptRecordError, KqliteError) as exc:
                    problems.append(Problem(path, b[0], f"batch does not decode: {exc}"))
                    continue
                if stats["last"] is not None and b[1] <= stats["last"]:
                    problems.append(Problem(path, b[0], f"offset {b[1]} does not increase "
                                                        f"(previous {stats['last']})"))
                if b[1] < base:
                    problems.append(Problem(path, b[0], f"offset {b[1]} below the segment "
                                                        f"base {base}"))
                stats["first"] = b[1] if stats["first"] is None else stats["first"]
                stats["last"] = b[2]
                stats["batches"] += 1
                stats["records"] += len(records)
                batch_starts[b[0]] = b[2]
            if progress:
                progress(sum(b[4] for b in batches))

        stop, status = scan_file(f, 0, size, check, verify_crc=True)
        if status != SCAN_OK:
            problems.append(Problem(path, stop, f"{STATUS_TEXT[status]} "
                                                f"({size - stop} bytes not readable)"))
    finally:
        f.close()
    problems.extend(_verify_indexes(fs, path, base, batch_starts, stats["last"]))
    return SegmentSummary(path, stats["batches"], stats["records"], size, stats["first"],
                          stats["last"], problems)


def _read(fs, path):
    f = fs.open(path)
    try:
        return f.pread(f.size(), 0)
    finally:
        f.close()


def _verify_indexes(fs, log_path, base, batch_starts, last_offset):
    stem = log_path[:-len(LOG_SUFFIX)]
    problems = []
    index_path = stem + INDEX_SUFFIX
    if fs.exists(index_path):
        data = _read(fs, index_path)
        if len(data) % OFFSET_INDEX_ENTRY_SIZE:
            problems.append(Problem(index_path, len(data) - len(data) % 8,
                                    "size is not a whole number of 8-byte entries"))
        for slot in range(len(data) // OFFSET_INDEX_ENTRY_SIZE):
            rel, pos = struct.unpack_from(">ii", data, slot * 8)
            if batch_starts.get(pos) != base + rel:
                problems.append(Problem(index_path, slot * 8,
                                        f"entry (offset {base + rel}, position {pos}) does not "
                                        f"point at the batch ending at that offset"))
    timeindex_path = stem + TIMEINDEX_SUFFIX
    if fs.exists(timeindex_path):
        data = _read(fs, timeindex_path)
        if len(data) % TIME_INDEX_ENTRY_SIZE:
            problems.append(Problem(timeindex_path, len(data) - len(data) % 12,
                                    "size is not a whole number of 12-byte entries"))
        prev = None
        for slot in range(len(data) // TIME_INDEX_ENTRY_SIZE):
            ts, rel = struct.unpack_from(">qi", data, slot * 12)
            if prev is not None and ts <= prev:
                problems.append(Problem(timeindex_path, slot * 12,
                                        f"timestamp {ts} does not increase"))
            if last_offset is None or base + rel > last_offset or base + rel < base:
                problems.append(Problem(timeindex_path, slot * 12,
                                        f"offset {base + rel} is not in the segment"))
            prev = ts
    return problems
