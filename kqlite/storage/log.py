"""Log: one partition directory of segments, safe for many threads and processes.

Theory of operation
-------------------
Every change (append, roll, retention, truncation) happens while holding a
thread lock and the exclusive flock on ``.kqlite-state`` (see locking.py). The
first thing done under the lock is :meth:`Log._refresh`, which reads the shared
State record and catches up with whatever other processes wrote; the last
thing is rewriting that record. Offsets therefore stay dense and unique across
processes. Readers take only the thread lock and refresh the same way, so they
see other processes' records without reopening.

Opening runs crash recovery when this is the only opener and the previous user
did not close cleanly: every batch after the recovery point (the offset up to
which data was fsynced) is validated, CRC included, and the log is cut at the
first invalid byte, exactly as Kafka's LogLoader does. Bytes dropped are logged
and kept in :attr:`Log.recovery_reports`. Corruption below the recovery point is
never repaired silently: reading it raises CorruptRecordError.

Durability follows Kafka's flush policy (``flush.messages``, ``flush.ms``) plus
``fsync="always"``: ``append`` returns only after an fdatasync covering the
records, and concurrent appenders share fsyncs (group commit). A failed fsync
puts the log in the failed state: no retry, every later write raises
LogFailedError until the log is reopened (see docs/durability.md).
"""

import functools
import logging
import os
import threading
import time
from bisect import bisect_right
from itertools import accumulate

from .. import _native
from ..errors import (
    CorruptRecordError, InvalidRecordError, KqliteError, LogClosedError, LogFailedError,
    OffsetOutOfRangeError, RecordTooLargeError, StorageError,
)
from ..format import batch as batch_format
from ..format.constants import (
    BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
)
from ..format.legacy import read_legacy_entry
from ..format.record import Record
from . import cleaner, flusher, swap
from .checkpoint import read_offsets, write_checkpoint
from .config import LogConfig
from .data_dir import (
    LOG_START_FILE, RECOVERY_POINT_FILE, REPLICATION_OFFSET_FILE, DataDir, is_data_dir,
    parse_topic_partition, write_meta_properties,
)
from .fs import DEFAULT_FS
from .leader_epoch import LeaderEpochCache
from .locking import FileLock
from .scan import SCAN_OK, SCAN_TRUNCATED, STATUS_TEXT, scan_file
from .segment import LOG_SUFFIX, RecoveryReport, Segment, parse_segment_name, segment_name
from .state import FLAG_CLEAN, State, read_state, write_state

__all__ = ["Log"]

log = logging.getLogger("kqlite.storage")

_STATE_FILE = ".kqlite-state"
_USERS_FILE = ".kqlite-users"
_LOG_START_OWN = ".kqlite-log-start"  # Kafka's checkpoint format, one entry
_LEFTOVER_SUFFIXES = (swap.DELETED_SUFFIX, ".tmp")
_MAX_RELATIVE = 2 ** 31 - 1
# The shared generation counts rolls and deletions in its low 32 bits and truncations in
# the high bits: a process that sees the high bits change must re-read every segment.
_TRUNCATION_EPOCH = 1 << 32
_BATCH_TARGET = 1 << 20       # bytes per batch when one append() is split
_READ_CHUNK = 1 << 18
_REWRITE_CHUNK = 1 << 20
_SPLIT_WRITE = 1 << 16        # batches with more record bytes are written as two pieces
_BYTES_TYPES = frozenset((bytes, bytearray))


_NO_LIMIT = 1 << 63


def _base_offset(seg):
    return seg.base_offset


def _rising(batches, offset, entry, bounds, path, position):
    """The batches from the first one that ends at or after ``offset``, once checked: each
    batch's offsets lie above the previous batch's and within ``bounds`` (the segment's
    [base offset, limit)), and the first batch reaching the index entry's offset
    ``entry`` ends exactly there (the entry was written for it). A flipped baseOffset
    bit, which the CRC does not cover, fails one of these."""
    prev, limit = bounds[0] - 1, bounds[1]
    keep = None
    for i, b in enumerate(batches):
        base, last = b[1], b[2]
        if not prev < base <= last < limit or (entry is not None and last > entry and
                                                 prev < entry):
            raise CorruptRecordError(
                f"batch offsets [{base}, {last}] do not follow offset {prev} within "
                f"[{bounds[0]}, {limit}) (a damaged baseOffset?)", path=path,
                position=position + b[0])
        prev = last
        if keep is None and last >= offset:
            keep = i
    return batches[keep:] if keep is not None else []


def _fails_on_io_error(method):
    """An OSError from anywhere but the paths that undo their own writes (the .log
    write of an append) leaves memory and disk possibly out of step, so the log fails,
    as Kafka takes a log dir offline on an IOException: the call raises LogFailedError
    and every later write does too, until a reopen recovers from what is on disk."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except KqliteError:
            raise
        except OSError as exc:
            raise self._fail(exc, method.__name__) from exc
    return guarded


def _split_by_size(records, target):
    """Log._groups for a list of bytes values, with C-level passes: cut before the
    record that takes a group past ``target`` bytes, counting 12 + len per record."""
    n = len(records)
    lens = list(map(len, records))
    if 12 * n + sum(lens) <= target:
        yield records
        return
    # size(records[:i]) == sums[i] + 12 * i, increasing in i.
    sums = list(accumulate(lens, initial=0))
    ends = range(n + 1)
    start = 0
    while True:
        # The first i > start with size(records[start:i + 1]) > target begins a new group.
        limit = sums[start] + 12 * start + target
        cut = max(bisect_right(ends, limit, key=lambda i: sums[i] + 12 * i) - 1, start + 1)
        if cut >= n:
            yield records[start:]
            return
        yield records[start:cut]
        start = cut


class _Enough(Exception):
    pass



def _rewrite(seg, start):
    """Write the bytes of ``seg`` from ``start`` back in place before recovery's fsync.

    After a failed fsync Linux marks the lost pages clean: they stay readable until
    evicted, so recovery validates them, and an fsync then writes nothing. Rewriting what
    recovery keeps past the recovery point makes it dirty again, so the fsync really
    stores it (PostgreSQL's lesson from "fsyncgate")."""
    pos = start
    while pos < seg.size:
        data = seg.log.pread(min(_REWRITE_CHUNK, seg.size - pos), pos)
        if not data:
            break
        seg.log.pwrite(data, pos)
        pos += len(data)
    if pos > start:
        seg.changes += 1


class Log:
    """A Kafka-format partition log in a directory. Use :meth:`Log.open`."""

    # -- Open and close a log ----------------------------------------------------------------

    @classmethod
    def open(cls, path, config=None, *, fs=None, create=True, **options):
        """Open (creating if needed) the log in directory ``path``.

        ``config`` is a dict of Kafka topic settings (``{"segment.bytes": ...}``);
        keyword options use Python spelling (``segment_bytes=...``, ``fsync="always"``).
        ``fs`` replaces the file-system seam (tests only). Raises StorageError when the
        files cannot be read or written, FileNotFoundError with ``create=False`` and
        no log at ``path``.
        """
        config = LogConfig(config, **options)
        fs = fs or DEFAULT_FS
        if not create and not fs.exists(path):
            raise FileNotFoundError(f"no log at {os.path.abspath(os.fspath(path))}")
        try:
            return cls(path, config, fs, create)
        except KqliteError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot open the log at {os.fspath(path)}: {exc}") from exc

    def __init__(self, path, config, fs, create=True):
        self.path = os.path.abspath(os.fspath(path))
        self.config = config
        self.fs = fs
        self.topic, self.partition = parse_topic_partition(os.path.basename(self.path))
        self.recovery_reports = []
        self._closed = True
        self._failed = None
        self._cleaner_offset = None   # first dirty offset, when there is no data dir
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        parent = os.path.dirname(self.path)
        if not fs.exists(self.path):
            parent_is_new = not fs.exists(parent)
            fs.makedirs(self.path)
            if parent_is_new:
                write_meta_properties(fs, parent)
                fs.fsync_dir(os.path.dirname(parent))  # the new data dir's own entry
            fs.fsync_dir(parent)
        self._data_dir = DataDir(fs, parent) if is_data_dir(fs, parent) else None
        self._state_file = fs.open(os.path.join(self.path, _STATE_FILE), create=True)
        self._write_lock = FileLock(self._state_file)
        self._users = FileLock(fs.open(os.path.join(self.path, _USERS_FILE), create=True))
        try:
            self._open()
        except BaseException:
            self._release_files()
            raise
        self._closed = False
        if self.config["flush.ms"] < 2 ** 62:
            flusher.register(self)

    def _open(self):
        alone = self._users.try_lock(exclusive=True)
        if not alone:
            self._users.lock(exclusive=False)
        if self._data_dir is not None:
            self._data_dir.enter()
        self._write_lock.lock(timeout=self._lock_timeout(), what=f"log {self.path}")
        try:
            state = read_state(self._state_file)
            self._load(state, recover=alone and (state is None or not state.flags & FLAG_CLEAN))
            self._write_state(flags=0, sync=True)  # "not clean" must be durable before appends
        finally:
            self._write_lock.unlock()
        if alone:
            self._users.unlock()
            self._users.lock(exclusive=False)

    @_fails_on_io_error
    def close(self):
        """Flush, checkpoint and release the log. Safe to call twice. The files are
        released even when flushing or checkpointing fails (which then raises)."""
        if self._closed:
            return
        flusher.unregister(self)
        flush_error = None
        if self._failed is None:
            try:
                self.flush()  # outside self._lock: _sync_to takes _sync_lock before _lock
            except KqliteError as exc:
                # Release everything anyway, as io.FileIO.close does, then report it: a
                # log left open would keep its locks and skip the recovery it now needs.
                flush_error = exc
        with self._lock:
            if self._closed:
                return
            try:
                if self._failed is None:
                    self._write_checkpoints()
                    self._users.unlock()
                    last = self._users.try_lock(exclusive=True)
                    with self._locked_write():
                        if last:
                            self._segments[-1].on_roll()
                            self._segments[-1].sync()
                        self._write_state(flags=FLAG_CLEAN if last else 0, sync=last)
            except OSError as exc:
                if self._failed is None:      # before _release_files: no clean marker
                    self._failed = exc
                raise
            finally:
                self._closed = True
                for seg in self._segments:
                    seg.close()
                self._release_files()
        if flush_error is not None:
            raise flush_error

    def _release_files(self):
        self._users.unlock()
        self._users.file.close()
        self._write_lock.unlock()
        self._state_file.close()
        if self._data_dir is not None:
            # A failed log needs recovery: it must not mark the data dir cleanly shut down.
            self._data_dir.leave(clean=self._failed is None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else f"[{self.start_offset}, {self.end_offset})"
        return f"<kqlite.Log {self.path} {state}>"

    # -- Loading and recovery ----------------------------------------------------------------

    def _lock_timeout(self):
        return self.config["lock.timeout.ms"] / 1000.0

    def _list_segments(self):
        bases = []
        for name in self.fs.listdir(self.path):
            parsed = parse_segment_name(name)
            if parsed is None:
                continue
            base, suffix = parsed
            if suffix == LOG_SUFFIX:
                bases.append(base)
        return sorted(bases)

    def _remove_leftovers(self):
        # Half-finished deletions, compactions and temp files from a crash; the .log files
        # are the truth. An interrupted compaction swap is completed (see swap.py).
        swap.remove_stale_cleaned(self.fs, self.path)
        swap.recover_swaps(self.fs, self.path)
        for name in self.fs.listdir(self.path):
            if name.endswith(_LEFTOVER_SUFFIXES):
                self.fs.remove(os.path.join(self.path, name))

    def _load(self, state, recover):
        self._remove_leftovers()
        checkpoints = self._read_checkpoints()
        self._segments = [Segment.open(self.fs, self.path, base, self.config)
                          for base in self._list_segments()]
        self.epochs = LeaderEpochCache(self.fs, self.path)
        recovery_point = max(checkpoints.get(RECOVERY_POINT_FILE, 0),
                             state.recovery_point if state else 0)
        if recover:
            self._recover(recovery_point)
        elif state is not None:
            self._discard_unacknowledged(state)
        self._corrupt = None
        if self._segments and not self._segments[-1].tail_valid:
            # Invalid bytes below the acknowledged end are corruption, not a torn write:
            # never cut them silently. Reads raise there; appends would reuse offsets.
            seg = self._segments[-1]
            if state is not None and state.active_base == seg.base_offset:
                seg.next_offset = max(seg.next_offset, state.next_offset)
            self._corrupt = CorruptRecordError(
                "invalid batch below the acknowledged end of the log; run `kqlite check`",
                path=seg.path(), position=seg.invalid_position)
            log.error("%s", self._corrupt)
        if not self._segments:
            start = max(checkpoints.get(LOG_START_FILE, 0), state.log_start_offset if state else 0)
            self._segments = [Segment.create(self.fs, self.path, start, self.config)]
        # The shared state is written by every change; the checkpoint only now and then
        # (and not when a truncation lowers the start), so it is the fallback.
        start = state.log_start_offset if state else checkpoints.get(LOG_START_FILE, 0)
        self.log_start_offset = max(self._segments[0].base_offset, start)
        self.log_start_offset = min(self.log_start_offset, self.next_offset)
        # After recovery everything left was validated and fsynced.
        self.recovery_point = self.next_offset if recover else min(recovery_point,
                                                                    self.next_offset)
        self._generation = (state.generation + 1) if state else 1
        self.high_watermark = min(checkpoints.get(REPLICATION_OFFSET_FILE, self.next_offset),
                                  self.next_offset)
        self.hw_follows_leo = True
        self._synced_offset = self.recovery_point
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._last_checkpoint = self._last_flush
        self._dir_dirty = True  # the entries of files created or removed above are not durable
        self.epochs.truncate_from_end(self.next_offset)

    def _recover(self, recovery_point):
        """Validate every batch from the segment holding ``recovery_point`` onwards."""
        max_size = self.config["max.message.bytes"] + LOG_OVERHEAD + BATCH_OVERHEAD
        max_size = max(max_size, 1 << 30)  # batches written under a larger limit stay valid
        first = 0
        for i, seg in enumerate(self._segments):
            if seg.base_offset <= recovery_point:
                first = i
        todo = len(self._segments) - first
        dense = "compact" not in self.config["cleanup.policy"]
        started = time.monotonic()
        for i in range(first, len(self._segments)):
            seg = self._segments[i]
            log.info("%s: recovering segment %d/%d (%d bytes, %.1f s so far)", self.path,
                     i - first + 1, todo, seg.size, time.monotonic() - started)
            report = seg.recover(max_size)
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            # Without compaction a segment starts where the previous one ends; a hole
            # means a power cut took records the next segment's records follow.
            hole = nxt is not None and dense and nxt.base_offset != seg.next_offset
            if not report.truncated_bytes and not hole:
                continue
            if report.truncated_bytes:
                self.recovery_reports.append(report)
                log.warning("recovery of %s: kept %d bytes, truncated %d bytes (%s)",
                            report.path, report.valid_bytes, report.truncated_bytes,
                            report.reason)
                why = "follows an invalid batch"
            else:
                why = f"follows offsets {seg.next_offset}-{nxt.base_offset - 1}, which were lost"
            for dropped in self._segments[i + 1:]:
                self.recovery_reports.append(RecoveryReport(dropped.path(), 0, dropped.size, why))
                log.warning("recovery: deleting %s (%d bytes): it %s", dropped.path(),
                            dropped.size, why)
                dropped.delete()
            del self._segments[i + 1:]
            break
        for seg in self._segments[first:]:
            start = seg.index.lookup(recovery_point)[1] if seg.base_offset <= recovery_point else 0
            _rewrite(seg, start)
            seg.sync()
        self._drop_empty_tail_segments()
        self.fs.fsync_dir(self.path)  # deleted segments must not come back after a power cut

    def _drop_empty_tail_segments(self):
        # An empty segment can only be the last one; a crash right after a roll leaves it.
        while len(self._segments) > 1 and self._segments[-1].size == 0 \
                and self._segments[-1].base_offset > self._segments[-2].next_offset:
            self._segments.pop().delete()

    def _discard_unacknowledged(self, state):
        """Another process holds the log open: cut bytes a dead writer left past the state."""
        while len(self._segments) > 1 and self._segments[-1].base_offset > state.active_base:
            # Rolled by a writer that died before the shared state named the segment.
            orphan = self._segments.pop()
            log.warning("%s: deleting segment %d rolled by a writer that died before "
                        "acknowledging it", self.path, orphan.base_offset)
            self.recovery_reports.append(RecoveryReport(
                orphan.path(), 0, orphan.size, "segment rolled by a writer that died"))
            orphan.delete()
        active = self._segments[-1] if self._segments else None
        if active is not None and active.base_offset == state.active_base \
                and active.size > state.active_size:
            cut = active.size - state.active_size
            log.warning("%s: truncated %d bytes that were never acknowledged",
                        active.path(), cut)
            self.recovery_reports.append(RecoveryReport(
                active.path(), state.active_size, cut, "past the acknowledged end"))
            active.log.truncate(state.active_size)
            active.size = state.active_size
            active.rebuild_indexes()

    def _read_checkpoints(self):
        if self._data_dir is None:
            # A log outside a data dir keeps only its start offset, in its own directory.
            try:
                offsets = read_offsets(self.fs, os.path.join(self.path, _LOG_START_OWN))
            except CorruptRecordError as exc:
                log.warning("ignoring %s", exc)
                return {}
            except FileNotFoundError:
                return {}
            start = offsets.get((self.topic, self.partition))
            return {} if start is None else {LOG_START_FILE: start}
        found = {}
        for name in (RECOVERY_POINT_FILE, LOG_START_FILE, REPLICATION_OFFSET_FILE):
            try:
                offsets = self._data_dir.read(name)
            except CorruptRecordError as exc:
                log.warning("ignoring %s", exc)
                continue
            if (self.topic, self.partition) in offsets:
                found[name] = offsets[(self.topic, self.partition)]
        return found

    def _persist_log_start(self):
        """Make a moved log start durable apart from .kqlite-state, which every append
        rewrites in place: a torn write of it must not bring deleted records back."""
        tp = (self.topic, self.partition)
        if self._data_dir is not None:
            self._data_dir.update(LOG_START_FILE, {tp: self.log_start_offset})
        else:
            write_checkpoint(self.fs, os.path.join(self.path, _LOG_START_OWN),
                             [(tp[0], tp[1], self.log_start_offset)])

    def _write_checkpoints(self):
        if self._data_dir is None:
            return
        tp = (self.topic, self.partition)
        self._data_dir.update(RECOVERY_POINT_FILE, {tp: self.recovery_point})
        self._data_dir.update(LOG_START_FILE, {tp: self.log_start_offset})
        self._data_dir.update(REPLICATION_OFFSET_FILE, {tp: self.high_watermark})
        self._last_checkpoint = time.monotonic()

    # -- Shared state between processes -------------------------------------------------------

    def _write_state(self, flags=0, sync=False):
        active = self._segments[-1]
        write_state(self._state_file, State(
            flags, self._generation, self.next_offset, active.base_offset, active.size,
            self.log_start_offset, self.recovery_point), sync)

    def _refresh(self):
        """Catch up with changes other processes made (caller holds self._lock)."""
        state = read_state(self._state_file)
        if state is None:
            return
        active = self._segments[-1]
        if state.generation != self._generation:
            self._reload_segments(state)
        elif state.active_size != active.size:
            self._catch_up(active, state.active_size)
        self.log_start_offset = state.log_start_offset  # every change writes it; it can go down
        self.recovery_point = max(self.recovery_point, state.recovery_point)
        if self.hw_follows_leo:
            self.high_watermark = self.next_offset

    def _catch_up(self, seg, size):
        seg.index.reload_tail()
        seg.timeindex.reload_tail()
        start = seg.size
        seg.size = size
        scan_file(seg.log, start, size, seg._note_batches, verify_crc=False)
        last_pos = seg.index.lookup(2 ** 62)[1] if seg.index.count else 0
        seg.bytes_since_index_entry = size - last_pos

    def _cut_dead_writer_tail(self):
        """Bytes past the shared state were written by a writer that died before
        acknowledging them; cut them so they cannot resurface (we hold the write lock)."""
        active = self._segments[-1]
        if self._closed:
            return
        if active.log.size() > active.size:
            active.log.truncate(active.size)
            active.changes += 1
        # A writer that died right after rolling left a segment the state never named;
        # a roll always starts the new segment at the active segment's end offset.
        if active.next_offset > active.base_offset and \
                self.fs.exists(os.path.join(self.path, segment_name(active.next_offset))):
            log.warning("%s: deleting segment %d rolled by a writer that died before "
                        "acknowledging it", self.path, active.next_offset)
            for suffix in (LOG_SUFFIX, ".index", ".timeindex"):
                orphan = os.path.join(self.path, segment_name(active.next_offset, suffix))
                if self.fs.exists(orphan):
                    self.fs.remove(orphan)

    def _reload_segments(self, state):
        if self._write_lock.held is None:
            # A reader lists the files under the write lock too, so that it never sees a
            # compaction swap or a retention deletion half done.
            self._write_lock.lock(timeout=self._lock_timeout(), what=f"log {self.path}")
            try:
                self._reload_segments(read_state(self._state_file) or state)
            finally:
                self._write_lock.unlock()
            return
        repaired = swap.recover_swaps(self.fs, self.path)  # a compactor died mid-swap
        if state.generation // _TRUNCATION_EPOCH != self._generation // _TRUNCATION_EPOCH:
            # A truncation since we last looked: our views of the segments (sizes, end
            # offsets, indexes, max timestamps) may describe bytes that were replaced.
            for seg in self._segments:
                seg.close()
            self._segments = []
        known = {seg.base_offset: seg for seg in self._segments}
        # Only the segments the shared state knows: a newer one is being rolled right now
        # (or was rolled by a writer that died before naming it).
        bases = [base for base in self._list_segments() if base <= state.active_base]
        segments = []
        for base in bases:
            seg = known.pop(base, None)
            if seg is not None and not self.fs.same_file(seg.log, seg.path()):
                seg.close()  # replaced by compaction (or deleted and created again)
                seg = None
            if seg is None:
                try:
                    seg = Segment.open(self.fs, self.path, base, self.config)
                except FileNotFoundError:
                    continue  # deleted by another process since the listing
            segments.append(seg)
        for gone in known.values():
            gone.close()
        for seg in segments[:-1]:
            # A segment we knew as active may have grown before another process rolled it.
            size = seg.log.size()
            if size > seg.size:
                self._catch_up(seg, size)
            elif size < seg.size:
                seg.size = size
                seg.rebuild_indexes()
            else:
                # The roller may have appended a final time index entry when it rolled.
                seg.index.reload_tail()
                seg.timeindex.reload_tail()
        self._segments = segments
        active = segments[-1]
        if active.size != state.active_size:
            if active.size < state.active_size:
                self._catch_up(active, state.active_size)
            else:
                active.size = state.active_size
                active.rebuild_indexes()
        self.epochs.reload()
        self._generation = state.generation
        if repaired:
            self._generation += 1
            self._write_state()

    class _Locked:
        __slots__ = ("log", "refresh")

        def __init__(self, log, refresh):
            self.log, self.refresh = log, refresh

        def __enter__(self):
            lg = self.log
            lg._lock.acquire()
            try:
                if lg._closed:
                    raise LogClosedError(f"log {lg.path} is closed")
                lg._write_lock.lock(timeout=lg._lock_timeout(), what=f"log {lg.path}")
            except BaseException:
                lg._lock.release()
                raise
            if self.refresh:
                try:
                    lg._refresh()
                    lg._cut_dead_writer_tail()
                except BaseException:
                    self.__exit__(None, None, None)
                    raise

        def __exit__(self, *exc):
            self.log._write_lock.unlock()
            self.log._lock.release()

    def _locked_write(self, refresh=True):
        return Log._Locked(self, refresh)

    def _check_writable(self):
        if self._corrupt is not None:
            raise self._corrupt
        self._check_usable()

    def _fail(self, exc, action):
        """Put the log in the failed state (keeping the first cause) and return the
        LogFailedError to raise."""
        if self._failed is None:
            self._failed = exc
        return LogFailedError(f"{action} on log {self.path} failed: {exc}; the log refuses "
                              f"writes until reopened")

    def _check_usable(self):
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")
        if self._failed is not None:
            raise LogFailedError(f"log {self.path} failed earlier ({self._failed}); "
                                 f"reopen it to recover")

    # -- Offsets ------------------------------------------------------------------------------

    @property
    def next_offset(self):
        return self._segments[-1].next_offset

    def _refreshed(self):
        if not self._closed:
            with self._lock:
                self._refresh()
        return self

    @property
    def end_offset(self):
        """The log end offset (LEO): the offset the next record will get."""
        return self._refreshed().next_offset

    @property
    def start_offset(self):
        """The log start offset: the first offset still readable."""
        return self._refreshed().log_start_offset

    @property
    def size(self):
        """Bytes in all segments."""
        return sum(seg.size for seg in self._segments)

    @property
    def segments(self):
        """Base offsets of the segments, oldest first."""
        return [seg.base_offset for seg in self._segments]

    def set_high_watermark(self, offset):
        """Replication: pin the high watermark (it then stops following the log end)."""
        with self._lock:
            self.hw_follows_leo = False
            self.high_watermark = max(self.log_start_offset, min(offset, self.next_offset))

    # -- Append -------------------------------------------------------------------------------

    @_fails_on_io_error
    def append(self, records, *, timestamp=None, codec=None, leader_epoch=None):
        """Append records (bytes values, None tombstones or Record objects) as batches.

        Returns the offset of the first record. Long lists are split into batches of
        about 1 MiB, each at most ``max.message.bytes``. With ``fsync="always"`` it
        returns after the records are on disk.
        """
        if records is None or isinstance(records, (bytes, bytearray, memoryview, Record)):
            records = [records]
        elif not isinstance(records, list):
            records = list(records)
        if not records:
            raise InvalidRecordError("append() needs at least one record")
        if "compact" in self.config["cleanup.policy"]:
            cleaner.require_keys(records)
        codec = self._codec(codec)
        timestamp_type = 1 if self.config["message.timestamp.type"] == "LogAppendTime" else 0
        if timestamp_type:
            timestamp = batch_format.now_ms()
        epoch = NO_PARTITION_LEADER_EPOCH if leader_epoch is None else leader_epoch
        limit = self.config["max.message.bytes"]
        # A list of bytes values only (the common case) takes C-level passes throughout.
        plain = _BYTES_TYPES.issuperset(map(type, records))
        build = batch_format.build_values_batch_parts if plain else \
            batch_format.build_batch_parts
        built = []
        for group in self._groups(records, plain):
            # Header and records stay two pieces: the records are not copied again.
            head, body, count, max_ts = build(
                group, timestamp=timestamp, codec=codec, timestamp_type=timestamp_type,
                partition_leader_epoch=epoch)
            size = len(head) + len(body)
            if size > limit:
                raise RecordTooLargeError(size, limit)
            built.append((head, body, 0, count - 1, max_ts, size))
        return self._append_batches(built, leader_epoch)

    @_fails_on_io_error
    def append_batches(self, data, *, leader_epoch=None, assign_offsets=True):
        """Append bytes holding whole v2 batches (from a client or another log).

        The bytes are validated (framing and CRC) but not decoded; base offsets are
        rewritten to the next offsets unless ``assign_offsets`` is False (replication).
        Returns the first offset.
        """
        data = bytearray(data)
        found, stop, status = _native.scan_batches(
            data, 0, len(data), True, None, self.config["max.message.bytes"] + LOG_OVERHEAD)
        if status != SCAN_OK or stop != len(data) or not found:
            raise CorruptRecordError(STATUS_TEXT.get(status, "no batches"), position=stop)
        pieces = []
        view = memoryview(data)     # pieces are writable views of our private copy
        # Compacted logs need keys (a follower copies its leader's bytes as they are).
        need_keys = assign_offsets and "compact" in self.config["cleanup.policy"]
        for pos, base, last, max_ts, size, magic in found:
            if magic != MAGIC_V2:
                raise InvalidRecordError("only v2 record batches (magic 2) can be appended")
            if need_keys:
                cleaner.require_batch_keys(data, pos)
            if leader_epoch is not None:
                batch_format.set_leader_epoch(data, pos, leader_epoch)
            pieces.append((view[pos:pos + size], None, base, last, max_ts, size))
        return self._append_batches(pieces, leader_epoch, assign_offsets)

    def _codec(self, codec):
        if codec is None:
            configured = self.config["compression.type"]
            codec = "none" if configured in ("producer", "uncompressed") else configured
        return codec

    def _groups(self, records, plain=False):
        """Split records into batches of about _BATCH_TARGET bytes (``plain``: the
        records are all bytes or bytearray)."""
        target = min(_BATCH_TARGET, self.config["max.message.bytes"])
        if plain:
            yield from _split_by_size(records, target)
            return
        start, size = 0, 0
        for i, rec in enumerate(records):
            if isinstance(rec, Record):
                n = 24 + len(rec[3] or b"") + len(rec[2] or b"") + \
                    sum(len(k) + len(v or b"") + 4 for k, v in rec[4])
            else:
                n = 12 + (len(rec) if rec is not None and hasattr(rec, "__len__") else 0)
            if size + n > target and i > start:
                yield records[start:i]
                start, size = i, 0
            size += n
        yield records[start:]

    def _append_batches(self, pieces, leader_epoch, assign_offsets=True):
        with self._locked_write():
            self._check_writable()
            first = self.next_offset
            for piece in pieces:
                self._append_one(piece, leader_epoch, assign_offsets)
            last = self.next_offset
            if self.hw_follows_leo:
                self.high_watermark = last
            self._write_state()
            self._unflushed += last - first
            need_sync = self.config["fsync"] == "always" \
                or self._unflushed >= self.config["flush.messages"]
        if need_sync:
            self._sync_to(last)
        return first

    def _append_one(self, piece, leader_epoch, assign_offsets):
        """Write one validated v2 batch: ``piece`` is (head, body, base, last, max_ts,
        size); ``head`` is writable and starts the batch, ``body`` (or None) follows it."""
        head, body, base, last, max_ts, size = piece
        if body is None:
            data = head
        elif len(body) < _SPLIT_WRITE:
            head += body            # small: one write
            data = head
        else:
            data = [head, body]
        delta = last - base
        if assign_offsets:
            base = self.next_offset
            batch_format.set_base_offset(head, 0, base)
        elif base < self.next_offset:
            raise InvalidRecordError(f"batch base offset {base} is below the log end "
                                     f"offset {self.next_offset}")
        self._maybe_roll(size, max_ts, base + delta)
        seg = self._segments[-1]
        if leader_epoch is not None and leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(leader_epoch, base)
            self._generation += 1
        old_size = seg.size
        try:
            seg.append(data, [(0, base, base + delta, max_ts, size, MAGIC_V2)])
        except OSError as exc:
            self._undo_append(seg, old_size, exc)

    def _undo_append(self, seg, old_size, exc):
        """A write failed: cut the partial bytes so the log stays valid, then report."""
        try:
            seg.log.truncate(old_size)
            seg.size = old_size
            seg.index.truncate_to_position(old_size)
        except OSError as second:
            self._failed = second
            raise LogFailedError(f"write to {seg.path()} failed ({exc}) and could not be "
                                 f"undone ({second}); reopen the log to recover") from exc
        raise StorageError(f"append to {seg.path()} failed: {exc}") from exc

    def _maybe_roll(self, incoming_size, incoming_max_ts, incoming_last_offset):
        seg = self._segments[-1]
        if seg.size == 0:
            return
        cfg = self.config
        reason = None
        if seg.size + incoming_size > cfg["segment.bytes"]:
            reason = "segment.bytes"
        elif seg.rolling_timestamp is not None and \
                incoming_max_ts - seg.rolling_timestamp > cfg["segment.ms"]:
            reason = "segment.ms"
        elif seg.index.is_full() or seg.timeindex.is_full():
            reason = "segment.index.bytes"
        elif incoming_last_offset - seg.base_offset > _MAX_RELATIVE:
            reason = "offset overflow"
        if reason:
            self._roll(reason)

    def _roll(self, reason="requested"):
        old = self._segments[-1]
        old.on_roll()
        new = Segment.create(self.fs, self.path, old.next_offset, self.config)
        self._segments.append(new)
        self._generation += 1
        self._dir_dirty = True
        log.debug("%s: rolled new segment %d (%s)", self.path, new.base_offset, reason)

    @_fails_on_io_error
    def roll(self):
        """Start a new segment now (no-op if the active one is empty)."""
        with self._locked_write():
            self._check_writable()
            if self._segments[-1].size:
                self._roll()
                self._write_state()

    # -- Flush --------------------------------------------------------------------------------

    @_fails_on_io_error
    def flush(self):
        """fsync everything appended so far (and the directory after a roll)."""
        self._check_usable()
        with self._lock:
            target = self.next_offset
        self._sync_to(target, force=True)

    def _sync_to(self, offset, force=False):
        with self._sync_lock:
            if self._synced_offset >= offset and not force:
                return  # another thread's fsync already covered us (group commit)
            with self._lock:
                self._check_usable()
                target = self.next_offset
                pending = [(seg, seg.changes) for seg in self._segments if seg.unsynced]
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for seg, changes in pending:
                    seg.sync(changes)
                if dir_dirty:
                    self.fs.fsync_dir(self.path)
            except OSError as exc:
                raise self._fail(exc, "fsync") from exc
            self._synced_offset = max(self._synced_offset, target)
            with self._lock:
                self._unflushed = max(0, self.next_offset - target)
                self._last_flush = time.monotonic()
                if target > self.recovery_point:
                    self.recovery_point = target
                    with self._locked_write():
                        self._write_state()
                interval = self.config["recovery.point.checkpoint.interval.ms"] / 1000.0
                if time.monotonic() - self._last_checkpoint >= interval:
                    self._write_checkpoints()

    def _flush_if_due(self, now):
        """Called by the background flusher for ``flush.ms``."""
        if self._closed or self._failed is not None or not self._unflushed:
            return
        if (now - self._last_flush) * 1000.0 >= self.config["flush.ms"]:
            self.flush()

    # -- Read ---------------------------------------------------------------------------------

    def read(self, offset=None, max_records=None, *, max_offset=None):
        """Iterate Records from ``offset`` (default: the log start) up to the high watermark.

        Raises OffsetOutOfRangeError if ``offset`` is below the log start or above the
        log end; reading at the log end yields nothing.
        """
        with self._lock:
            if self._closed:
                raise LogClosedError(f"log {self.path} is closed")
            self._refresh()
            if offset is None:
                offset = self.log_start_offset
            if offset < self.log_start_offset or offset > self.next_offset:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, self.next_offset)
            stop = self.high_watermark if max_offset is None else min(max_offset,
                                                                      self.high_watermark)
        return self._iter_records(offset, stop, max_records)

    def _iter_records(self, offset, stop, max_records):
        left = -1 if max_records is None else max_records
        resume = None
        while offset < stop and left:
            chunk = self._read_chunk(offset, stop, resume=resume)
            if chunk is None:
                return
            path, position, data, found = chunk
            for pos, base, last, max_ts, size, magic in found:
                records = self._decode(data, pos, magic, path, position)
                if records and offset <= base and last < stop and offset <= records[0][0] \
                        and records[-1][0] < stop and (left < 0 or len(records) <= left):
                    # The whole batch is wanted (offsets increase inside a batch): no
                    # per-record checks.
                    yield from records
                    if left > 0:
                        left -= len(records)
                else:
                    for rec in records:
                        if rec[0] < offset:
                            continue
                        if rec[0] >= stop or not left:
                            return
                        yield rec
                        left -= 1
                offset = max(offset, last + 1)
            resume = (path, position + pos + size)

    def _decode(self, data, pos, magic, path, position):
        try:
            if magic == MAGIC_V2:
                # _read_chunk's scan already checked the CRC of every batch it returned.
                return batch_format.decode_records(data, pos, verify=False)
            return read_legacy_entry(data, pos)
        except CorruptRecordError as exc:
            at = position + (exc.position if exc.position is not None else pos)
            raise CorruptRecordError(exc.reason, path=path, position=at) from None

    def _read_chunk(self, offset, stop, max_bytes=_READ_CHUNK, verify=True, resume=None):
        """Whole batches starting with the one holding ``offset``: (path, position of
        ``bytes`` in the file, bytes, batches with positions in ``bytes``).

        With ``verify`` the bytes start at the index entry in front of ``offset``, so the
        batches find_batch stepped over by their unchecked headers are CRC-checked too,
        and offsets must rise within the segment (see _rising): baseOffset is outside the
        CRC. ``resume`` (path, file position) says where the previous chunk's checked
        batches ended, just below ``offset``: a batch found there needs no look back.
        Without ``verify`` (raw fetches, whose clients check CRCs) the bytes start at the
        batch holding ``offset``."""
        with self._lock:
            if offset < self.log_start_offset:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, self.next_offset)
            seg = self._segment_for(offset)
            if seg is None:
                return None
            found = seg.find_batch(offset)
            if found is None:
                return None
            position = found[0]
            path = seg.path()
            if verify:
                limit = self._segment_limit(seg)
                if resume == (path, position):
                    entry, bounds = None, (offset, limit)
                else:
                    entry, position = seg.index.lookup(offset)
                    position = min(position, found[0])
                    bounds = (seg.base_offset, limit)
            data = seg.read(position, found[0] - position + max(max_bytes, found[4]))
        batches, end, status = _native.scan_batches(data, 0, len(data), verify)
        if verify:
            skip = found[0] - position
            if status > SCAN_TRUNCATED and end < skip:
                # A batch in front of ``offset`` is damaged. Its header placed it below
                # ``offset``; that holds if the batch found after it starts at or
                # before ``offset``, which then cannot be in the damaged one.
                if found[1] > offset:
                    raise CorruptRecordError(
                        f"{STATUS_TEXT[status]} in the batch in front of offset {offset}, "
                        f"which may hold it", path=path, position=position + end)
                batches, end, status = _native.scan_batches(data, skip, len(data), True)
                entry = None
            if batches:
                # An index entry at position 0 is lookup()'s "no entry".
                batches = _rising(batches, offset, entry if position else None, bounds,
                                  path, position)
        if not batches:
            if status == SCAN_OK or status == SCAN_TRUNCATED:
                return None
            raise CorruptRecordError(STATUS_TEXT[status], path=path, position=position + end)
        return path, position, data, batches

    def _segment_limit(self, seg):
        """One past the highest offset ``seg`` may hold: the next segment's base offset
        (no limit for the active segment, which other processes may be extending)."""
        segs = self._segments
        i = bisect_right(segs, seg.base_offset, key=_base_offset)
        return segs[i].base_offset if i < len(segs) else _NO_LIMIT

    def _segment_for(self, offset):
        segs = self._segments
        lo, hi = 0, len(segs) - 1
        if offset >= segs[-1].next_offset and segs[-1].next_offset == offset:
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if segs[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        seg = segs[lo]
        # Step over segments holding nothing at or after offset (compaction leaves holes
        # and Kafka's cleaner may leave empty segments), but not over one that ends in
        # invalid bytes: its end is unknown, the offsets after it may be in them.
        while seg is not None and max(offset, seg.base_offset) >= seg.next_offset:
            if not seg.tail_valid and lo < len(segs) - 1:
                raise CorruptRecordError(
                    f"closed segment ends in invalid bytes ({seg.invalid_reason}) before "
                    f"offset {offset}; run `kqlite check`", path=seg.path(),
                    position=seg.invalid_position)
            lo += 1
            seg = segs[lo] if lo < len(segs) else None
        return seg

    def read_batches(self, offset, max_bytes=1 << 20):
        """Raw bytes of whole batches starting at the one that holds ``offset`` (no decoding).

        At least one batch is returned even if it exceeds ``max_bytes`` (as Kafka's fetch).
        """
        with self._lock:
            self._refresh()
            if offset < self.log_start_offset or offset > self.next_offset:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, self.next_offset)
            data = self._read_batches_exact(offset, max_bytes)
            if data is not None:
                return data
        chunk = self._read_chunk(offset, self.high_watermark, max_bytes, verify=False)
        if chunk is None:
            return b""
        path, position, data, batches = chunk
        keep = [b for b in batches if b[2] < self.high_watermark]
        total = 0
        for i, b in enumerate(keep):
            if i and total + b[4] > max_bytes:
                break
            total += b[4]
        return data[:total]

    def _read_batches_exact(self, offset, max_bytes):
        """read_batches' common case (caller holds self._lock): learn from the batch
        headers which batches to return, then read exactly those bytes with one pread.
        None when that cannot be settled from a few headers; the general path answers."""
        seg = self._segment_for(offset)
        if seg is None:
            return None
        found = seg.find_batch(offset)
        if found is None or found[5] != MAGIC_V2 or found[2] >= self.high_watermark:
            return None
        total = seg.batch_extent(found[0], found[4], max_bytes, self.high_watermark)
        if total is None:
            return None
        data = seg.read(found[0], total)
        return data if len(data) == total else None

    def fetch_region(self, offset, max_bytes, max_offset=None):
        """Where the whole batches from the one holding ``offset`` lie on disk, for
        sendfile: ``(fd, position, length)`` within one segment, at most ``max_bytes``
        (but at least one batch) and only batches below ``max_offset`` (default: the high
        watermark). ``None`` when there is nothing to read at ``offset``. The descriptor is
        a duplicate the caller must close: retention may close the segment meanwhile."""
        with self._lock:
            self._refresh()
            if offset < self.log_start_offset or offset > self.next_offset:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, self.next_offset)
            limit = self.high_watermark if max_offset is None else min(max_offset,
                                                                       self.high_watermark)
            if offset >= limit:
                return None
            seg = self._segment_for(offset)
            if seg is None:
                return None
            found = seg.find_batch(offset)
            if found is None:
                return None
            start = found[0]
            picked = []

            def take(batches):
                for b in batches:
                    if b[1] >= limit or (picked and sum(picked) + b[4] > max_bytes):
                        raise _Enough
                    picked.append(b[4])
            try:
                scan_file(seg.log, start, seg.size, take, verify_crc=False, chunk=1 << 16)
            except _Enough:
                pass
            if not picked:
                return None
            return os.dup(seg.log.fileno()), start, sum(picked)

    def offset_for_time(self, timestamp):
        """The earliest offset whose timestamp is >= ``timestamp`` (ms), or None."""
        with self._lock:
            self._refresh()
            for seg in self._segments:
                if seg.max_timestamp >= timestamp:
                    break
            else:
                return None
            # An entry (T, O) with T < timestamp proves every record up to O is older.
            _, from_offset = seg.timeindex.lookup(timestamp - 1)
            start = max(from_offset, self.log_start_offset, seg.base_offset)
            stop = self.high_watermark
        for rec in self._iter_records(start, stop, None):
            if rec[1] >= timestamp:
                return rec[0]
        return None

    # -- Retention and truncation -------------------------------------------------------------

    @_fails_on_io_error
    def delete_records(self, before):
        """Advance the log start offset to ``before`` (Kafka's DeleteRecords) and drop
        segments wholly below it. Returns the new log start offset."""
        with self._locked_write():
            self._check_writable()
            if before > self.high_watermark:
                raise OffsetOutOfRangeError(before, self.log_start_offset, self.high_watermark)
            if before > self.log_start_offset:
                self.log_start_offset = before
                self.epochs.truncate_from_start(before)
                self._write_state(sync=True)
                self._persist_log_start()
            self._delete_segments(self._expired_by_start())
            return self.log_start_offset

    @_fails_on_io_error
    def enforce_retention(self, now_ms=None):
        """Delete whole old segments by the log start offset and, with cleanup.policy
        delete, by retention.bytes and retention.ms (Kafka's order); the active segment
        is never deleted. Returns the deleted base offsets."""
        now_ms = batch_format.now_ms() if now_ms is None else now_ms
        with self._locked_write():
            self._check_writable()
            deleted = self._delete_segments(self._expired_by_start())
            if "delete" in self.config["cleanup.policy"]:
                deleted += self._delete_segments(self._expired_by_size())
                deleted += self._delete_segments(self._expired_by_time(now_ms))
            return deleted

    @_fails_on_io_error
    def compact(self, now_ms=None, *, force=False):
        """Compact the log (``cleanup.policy`` compact or compact,delete): keep only the
        latest record of each key in the non-active segments; tombstones go
        ``delete.retention.ms`` after the compaction that first kept them. Runs only when
        the dirty share reaches ``min.cleanable.dirty.ratio`` (``force=True`` skips that
        test) and leaves records younger than ``min.compaction.lag.ms``. Offsets never
        change. Appends continue meanwhile; only the final swap takes the write lock.
        Returns a CompactionReport; a no-op on a log without ``compact``. See cleaner.py.
        """
        return cleaner.compact(self, now_ms, force)

    def _expired_by_start(self):
        return [s for s in self._segments[:-1] if s.next_offset <= self.log_start_offset]

    def _expired_by_time(self, now_ms):
        retention = self.config["retention.ms"]
        if retention < 0:
            return []
        doomed = []
        for seg in self._segments[:-1]:
            if seg.max_timestamp < 0 or now_ms - seg.max_timestamp <= retention:
                break
            doomed.append(seg)
        return doomed

    def _expired_by_size(self):
        limit = self.config["retention.bytes"]
        if limit < 0:
            return []
        excess = self.size - limit
        doomed = []
        for seg in self._segments[:-1]:
            if excess < seg.size:
                break
            doomed.append(seg)
            excess -= seg.size
        return doomed

    def _delete_segments(self, doomed):
        if not doomed:
            return []
        gone = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in gone]
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.epochs.truncate_from_start(new_start)
        self._generation += 1
        # The new start must be durable before the files go (Kafka's order).
        self._write_state(sync=True)
        self._persist_log_start()
        for seg in doomed:
            seg.delete()
        self.fs.fsync_dir(self.path)
        log.info("%s: deleted %d segment(s), log start offset now %d", self.path,
                 len(doomed), self.log_start_offset)
        return [s.base_offset for s in doomed]

    @_fails_on_io_error
    def truncate_to(self, offset):
        """Remove every record at or after ``offset`` (replication's truncation).

        Whole batches are removed, so the log end may land below ``offset`` when it falls
        inside a batch. Returns the new log end offset.
        """
        with self._locked_write():
            self._check_writable()
            if offset >= self.next_offset:
                return self.next_offset
            if offset < self.log_start_offset:
                raise OffsetOutOfRangeError(offset, self.log_start_offset, self.next_offset)
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
            self._segments[-1].truncate_to(offset)
            self._dir_dirty = True
            self._generation = (self._generation // _TRUNCATION_EPOCH + 1) * _TRUNCATION_EPOCH
            self.epochs.truncate_from_end(self.next_offset)
            # Cutting a whole batch can go below the start: the log is then empty there.
            self.log_start_offset = min(self.log_start_offset, self.next_offset)
            self.high_watermark = min(self.high_watermark, self.next_offset)
            self.recovery_point = min(self.recovery_point, self.next_offset)
            self._synced_offset = min(self._synced_offset, self.next_offset)
            self._write_state()
        self.flush()
        return self.next_offset
