"""Read-only integrity check of segments and indexes (SQLite's integrity_check).

Nothing here writes, locks or recovers: a log being checked can be in use. For
each ``.log`` file every batch is validated (framing, CRC, full record decode
including decompression) and the indexes are compared with the log. Problems
are returned as :class:`Problem` (file, byte position, text), never raised.
"""

import os
from collections import namedtuple

from ..errors import KqliteError
from ..format import batch as batch_format
from ..format.constants import MAGIC_V2, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from ..format.legacy import read_legacy_entry
from .index import OFFSET_ENTRY, TIME_ENTRY
from .scan import SCAN_OK, STATUS_TEXT, SegmentWalk
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


def _decode_all(data, at, magic):
    if magic == MAGIC_V2:
        return batch_format.decode_records(data, at)
    return read_legacy_entry(data, at)


def verify_segment(fs, path, progress=None):
    """Validate one segment and its indexes; ``progress(bytes)`` is called as it goes."""
    base = parse_segment_name(os.path.basename(path))[0]
    f = fs.open(path)
    problems = []
    batches = records = 0
    first = last = None
    batch_starts = {}
    try:
        size = f.size()
        walk = SegmentWalk(f, 0, size, verify_crc=True)
        for chunk in walk.chunks():
            for b in chunk.batches:
                try:
                    decoded = _decode_all(chunk.data, b.position - chunk.position, b.magic)
                except KqliteError as exc:
                    problems.append(Problem(path, b.position, f"batch does not decode: {exc}"))
                    continue
                if last is not None and b.base_offset <= last:
                    problems.append(Problem(path, b.position, f"offset {b.base_offset} does "
                                                              f"not increase (previous {last})"))
                if b.base_offset < base:
                    problems.append(Problem(path, b.position, f"offset {b.base_offset} below "
                                                              f"the segment base {base}"))
                first = b.base_offset if first is None else first
                last = b.last_offset
                batches += 1
                records += len(decoded)
                batch_starts[b.position] = b.last_offset
            if progress and chunk.batches:
                progress(sum(b.size for b in chunk.batches))
        if walk.status != SCAN_OK:
            problems.append(Problem(path, walk.stop, f"{STATUS_TEXT[walk.status]} "
                                                     f"({size - walk.stop} bytes not readable)"))
    finally:
        f.close()
    problems.extend(_verify_indexes(fs, path, base, batch_starts, last))
    return SegmentSummary(path, batches, records, size, first, last, problems)


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
            problems.append(Problem(index_path, len(data) - len(data) % OFFSET_INDEX_ENTRY_SIZE,
                                    "size is not a whole number of 8-byte entries"))
        for slot in range(len(data) // OFFSET_INDEX_ENTRY_SIZE):
            rel, pos = OFFSET_ENTRY.unpack_from(data, slot * OFFSET_INDEX_ENTRY_SIZE)
            if batch_starts.get(pos) != base + rel:
                problems.append(Problem(index_path, slot * OFFSET_INDEX_ENTRY_SIZE,
                                        f"entry (offset {base + rel}, position {pos}) does not "
                                        f"point at the batch ending at that offset"))
    timeindex_path = stem + TIMEINDEX_SUFFIX
    if fs.exists(timeindex_path):
        data = _read(fs, timeindex_path)
        if len(data) % TIME_INDEX_ENTRY_SIZE:
            problems.append(Problem(timeindex_path, len(data) - len(data) % TIME_INDEX_ENTRY_SIZE,
                                    "size is not a whole number of 12-byte entries"))
        prev = None
        for slot in range(len(data) // TIME_INDEX_ENTRY_SIZE):
            ts, rel = TIME_ENTRY.unpack_from(data, slot * TIME_INDEX_ENTRY_SIZE)
            if prev is not None and ts <= prev:
                problems.append(Problem(timeindex_path, slot * TIME_INDEX_ENTRY_SIZE,
                                        f"timestamp {ts} does not increase"))
            if last_offset is None or base + rel > last_offset or base + rel < base:
                problems.append(Problem(timeindex_path, slot * TIME_INDEX_ENTRY_SIZE,
                                        f"offset {base + rel} is not in the segment"))
            prev = ts
    return problems
