"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

A segment with base offset B is stored as ``%020d.log`` % B (ON-DISK: Kafka's
naming) and holds whole batches whose offsets are all >= B. The ``.log`` file is
the only truth; the indexes are rebuildable caches (see index.py).

Not thread-safe: the owning Log serialises access.
"""

import os
from collections import namedtuple

import struct

from .. import _native
from ..errors import CorruptRecordError
from ..format.constants import (
    BATCH_OVERHEAD, LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD, MAGIC_V2, MAX_TIMESTAMP_OFFSET,
)
from .index import OffsetIndex, TimeIndex
from .scan import SCAN_OK, SCAN_TRUNCATED, STATUS_TEXT, scan_file

__all__ = ["Segment", "RecoveryReport", "segment_name", "parse_segment_name",
           "LOG_SUFFIX", "INDEX_SUFFIX", "TIMEINDEX_SUFFIX"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"

_FIND_READ = 1 << 14     # bytes find_batch reads at a time: index entries are 4 KiB apart
_FIND_HOPS = 4           # reads before find_batch falls back to the full scan
_EXTENT_HOPS = 8         # batch headers batch_extent reads before giving up
_MIN_ENTRY = 26          # the smallest log entry (a magic 0 message with no key or value)
_HEAD = struct.Struct(">qiib")    # baseOffset, batchLength, partitionLeaderEpoch, magic
_DELTA = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

RecoveryReport = namedtuple("RecoveryReport", "path valid_bytes truncated_bytes reason")
RecoveryReport.__doc__ = """What recovering one segment did: bytes kept, bytes cut and why."""


def segment_name(base_offset, suffix=LOG_SUFFIX):
    return "%020d%s" % (base_offset, suffix)


def parse_segment_name(name):
    """(base_offset, suffix) for names like 00000000000000000042.log, else None."""
    stem, dot, suffix = name.partition(".")
    if len(stem) != 20 or not stem.isdigit() or not dot:
        return None
    return int(stem), "." + suffix


class Segment:
    """Append-only batches plus sparse indexes; ``next_offset`` is one past the last offset."""

    def __init__(self, fs, directory, base_offset, config, log_file, size):
        self.fs = fs
        self.dir = directory
        self.base_offset = base_offset
        self.config = config
        self.log = log_file
        self.size = size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = None
        self.bytes_since_index_entry = 0
        self.tail_valid = True    # False when open() found bytes that are not whole batches
        self.invalid_position = None
        self.invalid_reason = None
        self.changes = 0          # bumped by every write; sync() records what it covered
        self.synced_changes = 0
        index_bytes = config["segment.index.bytes"]
        self.index = OffsetIndex(fs, self.path(INDEX_SUFFIX), base_offset, index_bytes)
        self.timeindex = TimeIndex(fs, self.path(TIMEINDEX_SUFFIX), base_offset, index_bytes)

    def path(self, suffix=LOG_SUFFIX):
        return os.path.join(self.dir, segment_name(self.base_offset, suffix))

    # -- Open and create --------------------------------------------------------------------

    @classmethod
    def create(cls, fs, directory, base_offset, config):
        path = os.path.join(directory, segment_name(base_offset))
        log_file = fs.open(path, create=True)
        log_file.truncate(0)
        seg = cls(fs, directory, base_offset, config, log_file, 0)
        seg.index.write_all()       # Kafka always has both index files, even empty
        seg.timeindex.write_all()
        return seg

    @classmethod
    def open(cls, fs, directory, base_offset, config):
        """Open an existing segment and learn its end by reading from its last index entry.

        Indexes that are missing or fail the sanity check are rebuilt from the log.
        """
        path = os.path.join(directory, segment_name(base_offset))
        log_file = fs.open(path)
        seg = cls(fs, directory, base_offset, config, log_file, log_file.size())
        index_bytes = config["segment.index.bytes"]
        index = OffsetIndex.load(fs, seg.index.path, base_offset, index_bytes)
        timeindex = TimeIndex.load(fs, seg.timeindex.path, base_offset, index_bytes)
        if index is None or timeindex is None or not index.sane(seg.size):
            seg.rebuild_indexes()
            return seg
        seg.index, seg.timeindex = index, timeindex
        start = index.lookup(2 ** 62)[1] if index.count else 0
        stop, status = scan_file(log_file, start, seg.size, seg._note_batches, verify_crc=False)
        if status != SCAN_OK or not timeindex.sane(seg.next_offset):
            seg.rebuild_indexes()
        else:
            seg.bytes_since_index_entry = seg.size - start
            seg._load_first_timestamp()
            last_ts, last_off = timeindex.lookup(2 ** 63 - 1)
            if last_ts > seg.max_timestamp:
                seg.max_timestamp, seg.offset_of_max_timestamp = last_ts, last_off
        return seg

    def _load_first_timestamp(self):
        if self.first_batch_timestamp is None and self.size:
            found = []
            scan_file(self.log, 0, min(self.size, 1 << 16), found.extend, verify_crc=False)
            if found:
                self.first_batch_timestamp = found[0][3]

    def _note_batches(self, batches):
        """Track end offset and max timestamp for batches already in the file."""
        for pos, base, last, max_ts, size, magic in batches:
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, last
            self.next_offset = last + 1

    # -- Append -----------------------------------------------------------------------------

    def append(self, data, batches):
        """Write ``data`` (whole batches, or a list of pieces written back to back) at the
        end; ``batches`` as from scan_batches, positions relative to ``data``. Updates the
        indexes like Kafka's LogSegment.append."""
        start = self.size
        if type(data) is list:
            end = start
            for piece in data:
                self.log.pwrite(piece, end)
                end += len(piece)
            self.size = end
        else:
            self.log.pwrite(data, start)
            self.size = start + len(data)
        self.changes += 1
        self._index_batches(batches, start)

    def _index_batches(self, batches, shift=0, write=True):
        """Kafka's sparse-index rule; ``write=False`` keeps new entries in memory only."""
        interval = self.config["index.interval.bytes"]
        for pos, base, last, max_ts, size, magic in batches:
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, last
            if self.bytes_since_index_entry > interval:
                self.index.append(last, pos + shift, write)
                self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                            write)
                self.bytes_since_index_entry = 0
            self.bytes_since_index_entry += size
            self.next_offset = last + 1

    def _index_batches_in_memory(self, batches):
        self._index_batches(batches, write=False)

    def rebuild_indexes(self, verify_crc=False, max_size=None):
        """Recreate both indexes from the log; returns (stop, status) of the scan."""
        self.index.truncate_entries(0)
        self.timeindex.truncate_entries(0)
        self.index.buf.clear()
        self.timeindex.buf.clear()
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.first_batch_timestamp = None
        self.bytes_since_index_entry = 0
        stop, status = scan_file(self.log, 0, self.size,
                                 lambda found: self._index_batches(found, write=False),
                                 verify_crc, max_size)
        self.tail_valid = status == SCAN_OK
        self.invalid_position = None if self.tail_valid else stop
        self.invalid_reason = None if self.tail_valid else STATUS_TEXT[status]
        self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, write=False)
        self.index.write_all()
        self.timeindex.write_all()
        return stop, status

    def recover(self, max_size=None):
        """Validate every batch (CRC included), rebuild indexes, cut the file at the first
        invalid byte. Returns a RecoveryReport."""
        stop, status = self.rebuild_indexes(verify_crc=True, max_size=max_size)
        truncated = self.size - stop
        if truncated:
            self.log.truncate(stop)
            self.size = stop
            self.changes += 1
        self.tail_valid = True
        return RecoveryReport(self.path(), stop, truncated,
                              STATUS_TEXT[status] if truncated else "ok")

    # -- Read -------------------------------------------------------------------------------

    def find_batch(self, offset, limit=None):
        """(position, batch) of the first batch whose last offset >= ``offset``, or None.

        ``limit`` bounds the bytes considered (another process may be mid-append).
        """
        if offset >= self.next_offset:
            return None
        _, start = self.index.lookup(offset)
        end = self.size if limit is None else limit
        quick = self._find_batch_quick(offset, start, end)
        if quick is not None:
            return quick
        found = []

        def look(batches):
            for b in batches:
                if b[2] >= offset:
                    found.append(b)
                    raise _Found
        try:
            stop, status = scan_file(self.log, start, end, look, verify_crc=False,
                                     chunk=1 << 16)
        except _Found:
            return found[0]
        if status != SCAN_OK:
            raise CorruptRecordError(STATUS_TEXT[status], path=self.path(), position=stop)
        return None

    def _find_batch_quick(self, offset, start, end):
        """find_batch's common case from a few small reads, or None to take the full scan.

        A v2 batch larger than one read is judged by its header alone: with CRCs
        unchecked, a scan of all its bytes would report exactly the header's facts once
        the batch is known to end before ``end``; a batch that ends before ``offset`` is
        stepped over the same way (the index entry in front of ``offset`` usually points
        at the batch before the one holding it)."""
        pos = start
        for _ in range(_FIND_HOPS):
            if pos >= end:
                return None
            data = self.log.pread(min(_FIND_READ, end - pos), pos)
            # Every entry takes at least _MIN_ENTRY bytes: the cap never cuts the scan short,
            # it only keeps the scratch array small.
            batches, stop, status = _native.scan_batches(data, 0, len(data), False,
                                                         len(data) // _MIN_ENTRY + 1)
            for found in batches:
                if found[2] >= offset:
                    return (found[0] + pos,) + found[1:]
            if status == SCAN_OK and stop == len(data):
                pos += stop
                continue
            if status != SCAN_TRUNCATED or len(data) - stop < BATCH_OVERHEAD:
                return None
            base, length, _, magic = _HEAD.unpack_from(data, stop)
            size = length + LOG_OVERHEAD
            last = base + _DELTA.unpack_from(data, stop + LAST_OFFSET_DELTA_OFFSET)[0]
            if magic != MAGIC_V2 or length < BATCH_OVERHEAD - LOG_OVERHEAD \
                    or pos + stop + size > end or not _INT64_MIN <= last <= _INT64_MAX:
                return None
            if last >= offset:
                max_ts = _INT64.unpack_from(data, stop + MAX_TIMESTAMP_OFFSET)[0]
                return (pos + stop, base, last, max_ts, size, magic)
            pos += stop + size
        return None

    def batch_extent(self, position, first_size, max_bytes, below_offset):
        """Bytes from the v2 batch at ``position`` (of ``first_size`` bytes) through the
        following whole v2 batches while the total stays within ``max_bytes`` and their
        last offsets stay below ``below_offset``, judged from their headers alone; None
        after _EXTENT_HOPS headers or at anything unusual (the caller then scans)."""
        total = first_size
        pos = position + first_size
        for _ in range(_EXTENT_HOPS):
            if pos >= self.size or total >= max_bytes:
                return total
            head = self.log.pread(BATCH_OVERHEAD, pos)
            if len(head) < BATCH_OVERHEAD:
                return None
            base, length, _, magic = _HEAD.unpack_from(head)
            size = length + LOG_OVERHEAD
            last = base + _DELTA.unpack_from(head, LAST_OFFSET_DELTA_OFFSET)[0]
            if magic != MAGIC_V2 or length < BATCH_OVERHEAD - LOG_OVERHEAD \
                    or pos + size > self.size or not _INT64_MIN <= last <= _INT64_MAX:
                return None
            if last >= below_offset or total + size > max_bytes:
                return total
            total += size
            pos += size
        return None

    def read(self, position, size):
        return self.log.pread(size, position)

    # -- Truncate, sync, close --------------------------------------------------------------

    def truncate_to(self, offset):
        """Remove every batch whose last offset is >= ``offset`` (Kafka cuts whole batches).

        Returns the number of bytes removed.
        """
        found = self.find_batch(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self.log.truncate(position)
        self.size = position
        self.changes += 1
        self.index.truncate_to_position(position)
        self.timeindex.truncate_to(found[1])
        # Recompute end offset and max timestamp from what remains after the last index entry.
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        last_ts, last_off = self.timeindex.lookup(2 ** 63 - 1)
        if last_ts >= 0:
            self.max_timestamp, self.offset_of_max_timestamp = last_ts, last_off
        start = self.index.lookup(2 ** 62)[1] if self.index.count else 0
        if self.size == 0:
            self.first_batch_timestamp = None
        scan_file(self.log, start, self.size, self._note_batches, verify_crc=False)
        self.bytes_since_index_entry = self.size - start
        return removed

    @property
    def unsynced(self):
        return self.changes != self.synced_changes

    def sync(self, changes=None):
        """fdatasync the files; ``changes`` is the counter value the caller saw before."""
        changes = self.changes if changes is None else changes
        if changes != self.synced_changes:
            self.log.sync()
            self.synced_changes = max(self.synced_changes, changes)
        self.index.sync()
        self.timeindex.sync()

    def on_roll(self):
        """Called when this segment stops being the active one (Kafka's onBecomeInactiveSegment)
        and at a clean close: the time index ends with the largest timestamp, as Kafka's does."""
        self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def close(self):
        self.index.close()
        self.timeindex.close()
        self.log.close()

    def delete(self):
        """Remove the segment's files (readers in other processes keep open handles)."""
        self.close()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
            path = self.path(suffix)
            if self.fs.exists(path):
                self.fs.remove(path)

    @property
    def rolling_timestamp(self):
        """The time ``segment.ms`` counts from: the first batch's timestamp (Kafka's rule)."""
        return self.first_batch_timestamp

    def __repr__(self):
        return (f"Segment(base={self.base_offset}, next={self.next_offset}, size={self.size})")


class _Found(Exception):
    pass


assert LOG_OVERHEAD == 12
