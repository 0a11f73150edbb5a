"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

A segment with base offset B is stored as ``%020d.log`` % B (ON-DISK: Kafka's
naming) and holds whole batches whose offsets are all >= B. The ``.log`` file is
the only truth; the indexes are rebuildable caches (see index.py; the transaction
index, created at its first entry, is rebuilt by recovery only: txn_index.py).

Not thread-safe: the owning Log serialises access (its thread lock), with one
exception: a group-commit round fsyncs segments outside that lock
(group_commit.py). It counts itself in ``syncing`` first, and :meth:`Segment.close`
on a segment being synced (retention, a truncation, a reload, the Log's close)
leaves its descriptors open for the round to close when it is done
(:meth:`Segment.end_sync`): a descriptor is never closed under a thread using it,
so its number is never reused under one either.
"""

import os
from collections import namedtuple

from ..errors import CorruptRecordError
from . import lost_pages
from .index import OffsetIndex, TimeIndex
from .scan import SCAN_OK, STATUS_TEXT, BatchPosition, SegmentWalk
from .txn_index import TXNINDEX_SUFFIX, TransactionIndex

__all__ = ["Segment", "RecoveryReport", "segment_name", "parse_segment_name",
           "LOG_SUFFIX", "INDEX_SUFFIX", "TIMEINDEX_SUFFIX", "TXNINDEX_SUFFIX",
           "SEGMENT_SUFFIXES", "LOOKUP_READ", "MAX_RELATIVE_OFFSET"]

# ON-DISK: Kafka's names for a segment's files.
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)

_new = tuple.__new__
LOOKUP_READ = 1 << 14    # a lookup's first read: index entries are about 4 KiB apart
MAX_RELATIVE_OFFSET = 2 ** 31 - 1   # ON-DISK: index entries hold offset - base as int32

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
        self.next_offset: int = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = None
        self.bytes_since_index_entry = 0
        self.tail_valid = True    # False when open() found bytes that are not whole batches
        self.invalid_position = None
        self.invalid_reason = None
        self.changes = 0          # bumped by every write; sync() records what it covered
        self.synced_changes = 0
        self.syncing = 0          # group-commit rounds fsyncing it outside the Log's lock
        self.close_after_sync = False
        # The active segment's indexes are not fsynced with its data: after a crash,
        # recovery rebuilds them from the segment holding the recovery point, which is
        # never older than the active one. They are synced once it stops being active.
        self.defer_index_sync = False
        self.index_was_missing = False   # open() rebuilt a missing .index (recovery redoes it)
        index_bytes = config["segment.index.bytes"]
        self.index = OffsetIndex(fs, self.path(INDEX_SUFFIX), base_offset, index_bytes)
        self.timeindex = TimeIndex(fs, self.path(TIMEINDEX_SUFFIX), base_offset, index_bytes)
        self.txnindex = TransactionIndex(fs, self.path(TXNINDEX_SUFFIX), base_offset)

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
            seg.index_was_missing = index is None
            seg.rebuild_indexes()
            return seg
        seg.index, seg.timeindex = index, timeindex
        start = index.last_position()
        walk = SegmentWalk(log_file, start, seg.size, headers_only=True, trust_end=True)
        seg.note_batches(walk)
        if walk.status != SCAN_OK or not timeindex.sane(seg.next_offset):
            seg.rebuild_indexes()
        else:
            seg.bytes_since_index_entry = seg.size - start
            seg._load_first_timestamp()
            last_ts, last_off = timeindex.last_entry()
            if last_ts > seg.max_timestamp:
                seg.max_timestamp, seg.offset_of_max_timestamp = last_ts, last_off
        return seg

    def _load_first_timestamp(self):
        if self.first_batch_timestamp is None and self.size:
            for b in SegmentWalk(self.log, 0, self.size, headers_only=True, chunk=LOOKUP_READ,
                                 trust_end=True):
                self.first_batch_timestamp = b.max_timestamp
                break

    def note_batches(self, batches):
        """Track end offset and max timestamp for batches already in the file (another
        process's appends, the tail after the last index entry)."""
        for b in batches:
            max_ts = b.max_timestamp
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, b.last_offset
            self.next_offset = b.last_offset + 1

    # -- Append -----------------------------------------------------------------------------

    def append(self, data, base_offset, last_offset, max_timestamp, size, magic):
        """Write ``data`` (one whole batch, or a list of pieces written back to back that
        make one) at the end and index it like Kafka's LogSegment.append."""
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
        self.index_batches((_new(BatchPosition, (start, base_offset, last_offset,
                                                 max_timestamp, size, magic)),))

    def append_one(self, data, offset, timestamp):
        """:meth:`append` of a batch holding one record (offset and max timestamp given),
        with the same index rule, without the general path's tuple per batch."""
        start = self.size
        self.log.pwrite(data, start)
        size = len(data)
        self.size = start + size
        self.changes += 1
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = timestamp
        if timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = timestamp, offset
        if self.bytes_since_index_entry > self.config["index.interval.bytes"]:
            self.index.append(offset, start)
            self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += size
        self.next_offset = offset + 1

    def index_batches(self, batches, write=True):
        """Kafka's sparse-index rule for batches now in the file (absolute positions);
        ``write=False`` keeps new entries in memory only."""
        interval = self.config["index.interval.bytes"]
        for pos, base, last, max_ts, size, magic in batches:
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, last
            if self.bytes_since_index_entry > interval:
                self.index.append(last, pos, write)
                self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                            write)
                self.bytes_since_index_entry = 0
            self.bytes_since_index_entry += size
            self.next_offset = last + 1

    def rebuild_indexes(self, verify_crc=False, max_size=None):
        """Recreate both indexes from the log; returns the walk (its stop and status)."""
        self._forget_batches()
        walk = SegmentWalk(self.log, 0, self.size, verify_crc=verify_crc,
                           headers_only=not verify_crc, max_size=max_size)
        self.index_batches(walk, write=False)
        self._indexes_rebuilt(walk)
        return walk

    def _forget_batches(self):
        self.index.truncate_entries(0)
        self.timeindex.truncate_entries(0)
        self.index.buf.clear()
        self.timeindex.buf.clear()
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.first_batch_timestamp = None
        self.bytes_since_index_entry = 0

    def _indexes_rebuilt(self, walk):
        self.tail_valid = walk.status == SCAN_OK
        self.invalid_position = None if self.tail_valid else walk.stop
        self.invalid_reason = None if self.tail_valid else STATUS_TEXT[walk.status]
        self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, write=False)
        self.index.write_all()
        self.timeindex.write_all()

    def recover(self, max_size=None, write_back_from=None, replay=None):
        """Validate every batch (CRC included), rebuild indexes, cut the file at the first
        invalid byte. Returns a RecoveryReport.

        With ``write_back_from`` (an offset), the valid batches whose last offset is at
        or past it are written again in place as the walk reads them, so that the next
        fsync stores them even if an earlier failed fsync left their pages clean but
        unwritten (lost_pages.py): one read of the file serves both. With ``replay``
        (Kafka's LogSegment.recover with its producer state), the transaction index is
        rebuilt too: ``replay(segment, chunk)`` learns each chunk's valid batches."""
        self._forget_batches()
        if replay is not None:
            self.txnindex.reset()
        walk = SegmentWalk(self.log, 0, self.size, verify_crc=True, max_size=max_size)
        if write_back_from is None and replay is None:
            self.index_batches(walk, write=False)
        else:
            for chunk in walk.chunks():
                batches = chunk.batches
                self.index_batches(batches, write=False)
                if write_back_from is not None:
                    self._write_back(chunk, write_back_from)
                if replay is not None:
                    replay(self, chunk)
        self._indexes_rebuilt(walk)
        stop = walk.stop
        truncated = self.size - stop
        if truncated:
            self.log.truncate(stop)
            self.size = stop
            self.changes += 1
        self.tail_valid = True
        return RecoveryReport(self.path(), stop, truncated,
                              STATUS_TEXT[walk.status] if truncated else "ok")

    def _write_back(self, chunk, from_offset):
        """pwrite the batches of ``chunk`` whose last offset is >= ``from_offset``."""
        batches = chunk.batches
        first = next((b for b in batches if b.last_offset >= from_offset), None)
        if first is None:
            return
        last = batches[-1]
        at = chunk.position
        view = memoryview(chunk.data)[first.position - at:last.position + last.size - at]
        self.log.pwrite(view, first.position)
        self.changes += 1

    # -- Read -------------------------------------------------------------------------------

    def find_batch(self, offset, limit=None):
        """The BatchPosition of the first batch whose last offset >= ``offset``, or None.

        ``limit`` bounds the bytes considered (another process may be mid-append).
        Batch headers are trusted (no CRC check): reads check what they return.
        """
        if offset >= self.next_offset:
            return None
        start = self.index.lookup(offset)[1]
        walk = SegmentWalk(self.log, start, self.size if limit is None else limit,
                           headers_only=True, chunk=LOOKUP_READ, from_offset=offset,
                           trust_end=True)
        chunk = walk.read()
        while chunk is not None:
            if chunk.batches:
                return chunk.batches[0]
            chunk = walk.read()
        if walk.status != SCAN_OK:
            raise CorruptRecordError(STATUS_TEXT[walk.status], path=self.path(),
                                     position=walk.stop)
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
        position = found.position
        removed = self.size - position
        self.log.truncate(position)
        self.size = position
        self.changes += 1
        self.index.truncate_to_position(position)
        self.timeindex.truncate_to(found.base_offset)
        self.txnindex.truncate_to(found.base_offset)
        # Recompute end offset and max timestamp from what remains after the last index entry.
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        last_ts, last_off = self.timeindex.last_entry()
        if last_ts >= 0:
            self.max_timestamp, self.offset_of_max_timestamp = last_ts, last_off
        start = self.index.last_position()
        if self.size == 0:
            self.first_batch_timestamp = None
        self.note_batches(SegmentWalk(self.log, start, self.size, headers_only=True,
                                      trust_end=True))
        self.bytes_since_index_entry = self.size - start
        return removed

    @property
    def unsynced(self):
        return self.changes != self.synced_changes or self.txnindex.dirty or (
            not self.defer_index_sync and (self.index._dirty or self.timeindex._dirty))

    def sync(self, changes=None, whole=False):
        """fdatasync the files (the indexes unless deferred: ``defer_index_sync``);
        ``changes`` is the counter value the caller saw before. The data is fsynced only
        when this handle wrote since its last sync, unless ``whole``: then also for
        bytes others wrote (another process, a writer killed before its fsync)."""
        changes = self.changes if changes is None else changes
        if changes != self.synced_changes or whole:
            try:
                self.log.sync()
            except OSError:
                # Its unwritten pages may now be clean: recovery must write them again.
                lost_pages.note(self.fs, self.dir, self.base_offset)
                raise
            self.synced_changes = max(self.synced_changes, changes)
        # Recovery rebuilds the transaction index of the segments at or above the recovery
        # point only: it becomes durable with its data, the active segment's included.
        self.txnindex.sync()
        if not self.defer_index_sync:
            self.index.sync()
            self.timeindex.sync()

    def on_roll(self):
        """Called when this segment stops being the active one (Kafka's onBecomeInactiveSegment)
        and at a clean close: the time index ends with the largest timestamp, as Kafka's does,
        and the indexes are fsynced with the data from now on."""
        self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.defer_index_sync = False

    def close(self):
        """Close the files; while rounds are syncing them (``syncing``), the last round
        closes them instead (:meth:`end_sync`). Caller holds the Log's lock, as the
        rounds do when they count themselves in and out."""
        if self.syncing:
            self.close_after_sync = True
            return
        self.index.close()
        self.timeindex.close()
        self.txnindex.close()
        self.log.close()

    def begin_sync(self):
        """A round will fsync this segment outside the Log's lock: keep it open."""
        self.syncing += 1

    def end_sync(self):
        """That round is done: close the files now if :meth:`close` was called meanwhile."""
        self.syncing -= 1
        if not self.syncing and self.close_after_sync:
            self.close()

    def delete(self):
        """Remove the segment's files (readers in other processes keep open handles)."""
        self.close()
        for suffix in SEGMENT_SUFFIXES:
            path = self.path(suffix)
            if self.fs.exists(path):
                self.fs.remove(path)

    @property
    def rolling_timestamp(self):
        """The time ``segment.ms`` counts from: the first batch's timestamp (Kafka's rule)."""
        return self.first_batch_timestamp

    def __repr__(self):
        return (f"Segment(base={self.base_offset}, next={self.next_offset}, size={self.size})")

