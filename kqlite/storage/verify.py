"""Read-only integrity check of segments and indexes (SQLite's integrity_check).

Nothing here writes, locks or recovers: a log being checked can be in use. For
each ``.log`` file every batch is validated (framing, CRC, full record decode
including decompression) and the indexes are compared with the log. Problems
are returned as :class:`Problem` (file, byte position, text), never raised.

Transactions (:class:`TransactionReplay`): the segments of one partition, given in
order to :func:`verify_segment`, are replayed through a producer state in memory, as
segment recovery replays them (loader.py), and each segment's ``.txnindex`` is
compared with the entries that replay computes: the file must hold exactly those.
Two kinds of entry the replay cannot compute are accepted when the segment holds
their ABORT marker: the entry of a transaction that began before the first segment
checked (retention deleted its start), and the entry compaction copied for a marker
whose transaction's batches it removed; once the replay has met a compacted part of
the log (offsets that skip), an entry's last stable offset may differ too, since
the batches it depended on may be gone. Transactions still open at the end of the
partition are reported, with how long they have been open (a *hanging* transaction
holds every read_committed reader back).
"""

import os
from collections import namedtuple

from ..errors import KqliteError
from ..format import batch as batch_format
from ..format.constants import MAGIC_V2, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE
from ..format.control_records import read_marker
from ..format.header import parse_header
from ..format.legacy import read_legacy_entry
from .index import OFFSET_ENTRY, TIME_ENTRY
from .producer_state import ProducerStateManager
from .scan import SCAN_OK, STATUS_TEXT, SegmentWalk
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, \
    parse_segment_name
from .txn_index import ENTRY as TXN_ENTRY
from .txn_index import AbortedTxn, decode_entries

__all__ = ["Problem", "SegmentSummary", "OpenTransaction", "TransactionReplay",
           "verify_segment", "find_segments"]

Problem = namedtuple("Problem", "path position message")
SegmentSummary = namedtuple("SegmentSummary", "path batches records bytes first_offset "
                                              "last_offset problems")
OpenTransaction = namedtuple("OpenTransaction", "path producer_id first_offset timestamp")
OpenTransaction.__doc__ = """A transaction open at the end of a partition: the partition
directory, its producer, its first offset and the timestamp of its first batch."""


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


def verify_segment(fs, path, progress=None, replay=None):
    """Validate one segment and its indexes; ``progress(bytes)`` is called as it goes.
    ``replay`` (a TransactionReplay of the segment's partition, fed the partition's
    segments in order) checks its ``.txnindex`` too."""
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
                if replay is not None and b.magic == MAGIC_V2:
                    replay.batch(chunk.data, b.position - chunk.position)
            if progress and chunk.batches:
                progress(sum(b.size for b in chunk.batches))
        if walk.status != SCAN_OK:
            problems.append(Problem(path, walk.stop, f"{STATUS_TEXT[walk.status]} "
                                                     f"({size - walk.stop} bytes not readable)"))
    finally:
        f.close()
    problems.extend(_verify_indexes(fs, path, base, batch_starts, last))
    if replay is not None:
        problems.extend(replay.end_segment(fs, path, base))
    return SegmentSummary(path, batches, records, size, first, last, problems)


class TransactionReplay:
    """The producer state a partition's batches build, batch by batch, and the
    ``.txnindex`` entries it computes per segment; see the module docstring."""

    def __init__(self, directory):
        self.directory = directory
        self.state = ProducerStateManager(directory)    # in memory: it touches no file
        self.start = None           # the first offset replayed
        self.end = None             # the offset after the last batch replayed
        self.compacted = False      # offsets skipped somewhere before
        self.expected = []          # this segment's computed entries
        self.markers = {}           # this segment's ABORT markers: offset -> producer id
        self.first_batch_time = {}  # producer id -> timestamp of its open txn's first batch

    def batch(self, data, pos):
        header = parse_header(data, pos)
        if self.start is None:
            self.start = header.base_offset
        elif header.base_offset != self.end:
            self.compacted = True
        self.end = header.last_offset + 1
        marker = None
        if header.is_control and header.producer_id >= 0 and header.records_count:
            try:
                marker = read_marker(data, pos, header)
            except KqliteError:
                return
            if marker.is_abort:
                self.markers[header.base_offset] = header.producer_id
        ps = self.state
        completed = ps.update(header, marker=marker)
        if header.is_transactional and not header.is_control and \
                header.producer_id not in self.first_batch_time:
            self.first_batch_time[header.producer_id] = header.max_timestamp
        if header.is_control:
            self.first_batch_time.pop(header.producer_id, None)
        if completed is not None:
            if completed.is_aborted:
                self.expected.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                completed.last_offset,
                                                ps.last_stable_offset(completed)))
            ps.complete_txn(completed)

    def end_segment(self, fs, log_path, base):
        """Compare the segment's ``.txnindex`` with what the replay computed; Problems."""
        expected, markers = self.expected, self.markers
        self.expected, self.markers = [], {}
        path = log_path[:-len(LOG_SUFFIX)] + TXNINDEX_SUFFIX
        found = []
        if fs.exists(path):
            data = _read(fs, path)
            if len(data) % TXN_ENTRY.size:
                return [Problem(path, len(data) - len(data) % TXN_ENTRY.size,
                                "size is not a whole number of 34-byte entries")]
            try:
                found = decode_entries(data, path)
            except KqliteError as exc:
                return [Problem(path, 0, str(exc))]
        problems = []
        wanted = {e.last_offset: e for e in expected}
        previous = None
        for slot, entry in enumerate(found):
            where = slot * TXN_ENTRY.size
            if previous is not None and entry.last_offset <= previous:
                problems.append(Problem(path, where, f"last offset {entry.last_offset} does "
                                                     f"not increase (previous {previous})"))
            previous = entry.last_offset
            want = wanted.pop(entry.last_offset, None)
            if want is None:
                if markers.get(entry.last_offset) != entry.producer_id:
                    problems.append(Problem(path, where, f"entry {_show(entry)} names no "
                                                         f"ABORT marker of its producer"))
                elif entry.first_offset >= self.start and not self.compacted:
                    problems.append(Problem(path, where, f"entry {_show(entry)}: that marker "
                                                         f"ended no open transaction"))
            elif want != entry and not (self.compacted and want[:3] == entry[:3]):
                problems.append(Problem(path, where, f"entry {_show(entry)} should be "
                                                     f"{_show(want)}"))
        for missing in wanted.values():
            problems.append(Problem(path, len(found) * TXN_ENTRY.size,
                                    f"missing entry {_show(missing)}"))
        return problems

    def open_transactions(self):
        """The transactions open after the last batch replayed (OpenTransaction)."""
        return [OpenTransaction(self.directory, pid, first, self.first_batch_time.get(pid, -1))
                for pid, first in self.state.ongoing_transactions()]


def _show(entry):
    return (f"(producer {entry.producer_id}, first offset {entry.first_offset}, last offset "
            f"{entry.last_offset}, last stable offset {entry.last_stable_offset})")


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
