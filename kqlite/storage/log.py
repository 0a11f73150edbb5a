"""Log: one partition directory of segments, safe for many threads and processes.

Theory of operation
-------------------
A Log is Kafka's UnifiedLog: this facade keeps the partition's offsets and its
locks, and its work is split by responsibility the way Kafka splits UnifiedLog,
LocalLog, LogSegments and LogLoader, one module each (docs/architecture.md lists
them: segments, loader, sharing, appending, reads, retention, offset_checkpoints,
cleanable).

Those modules are the Log's implementation and share its private fields (set in
``Log.__init__`` and ``Log._load``); nothing outside this package uses them.

Every change (append, roll, retention, truncation, a compaction swap) holds the
write lock: the thread lock and the exclusive flock on ``.kqlite-state``. It
starts by catching up with what other processes wrote and ends by rewriting the
shared state record (sharing.py), so offsets stay dense and unique across
processes. Readers take only the thread lock and catch up the same way.

Offsets (Kafka's names): the *log start offset* (first readable), the *log end
offset* (LEO, :attr:`end_offset`: the next offset to be written), the *high
watermark* (what consumers may see), the *last stable offset* (what read_committed
consumers may see: the high watermark, as long as no transaction holds it back) and
the *recovery point* (fsynced up to there). Unless a replication layer pins it
(:meth:`set_high_watermark`), the high watermark follows the log end. Reads take an
:class:`~kqlite.storage.Isolation`, whose limit isolation.py decides: consumers read
below the high watermark, read_committed ones below the last stable offset, a leader
serves followers up to the log end (Kafka's FetchIsolation).

Transactions (Kafka's, KIP-98): a producer's transactional batches open its
transaction on the partition, and a marker ends it, appended for the transaction
coordinator (:meth:`append_marker`, the 78-byte control batch of
format/control_records.py). The producer state (producer_state.py) judges them
(KIP-890's :meth:`begin_verification` guard for the first batch, epochs, coordinator
epochs, INVALID_TXN_STATE) and keeps the open ones; the *last stable offset*
(:attr:`last_stable_offset`) stops before the oldest undecided one; an ABORT writes
an entry to the segment's ``.txnindex`` (txn_index.py), from which COMMITTED reads
learn what to leave out (reads.py). :meth:`active_producers` and
:meth:`ongoing_transactions` describe them.

Opening runs crash recovery when this is the only opener and the previous user
did not close cleanly (loader.py). Corruption below the recovery point is never
repaired silently: reading it raises CorruptRecordError.

Durability follows Kafka's flush policy (``flush.messages``, ``flush.ms``) plus
``fsync="always"``: ``append`` returns only after an fdatasync covering the
records, and concurrent appenders share fsyncs (group commit). A failed fsync
puts the log in the failed state: no retry, every later write raises
LogFailedError until the log is reopened (see docs/durability.md).

Every use of the Log's files, by any thread, happens under its thread lock after
``_check_open`` (LogClosedError once closed), and ``close`` releases them under the
same lock: so a descriptor is never closed under a reader. The one use outside the
lock, a group-commit round's fsyncs, keeps the segments it syncs open until it is
done (segment.py), whoever drops them meanwhile.

Lock order: docs/architecture.md states it, for this package and the layers above;
every path here follows it.
"""

import functools
import os
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Concatenate, Iterable, Iterator, Literal,
                    Mapping, NamedTuple, Optional, ParamSpec, TypeVar, Union, cast, overload)

from ..errors import (KqliteError, LogClosedError, LogFailedError, ReplicatedPartitionError,
                      StorageError)
from ..format.batch import now_ms
from ..format.control_records import build_control_batch
from . import appending, clean_mark, cleaner, cluster_dir, flusher, leader_epoch, reads
from . import record_lookup, retention
from . import group_commit
from .cleanable import CleanableLog
from .config import LogConfig, LogOptions
from .data_dir import (
    REPLICATION_OFFSET_FILE, DataDir, is_data_dir, parse_topic_partition, write_meta_properties,
)
from ..format.header import BatchHeader
from ..format.record import Record
from ..format.validate import AppendOrigin
from .fs import DEFAULT_FS
from .isolation import Isolation, OffsetSnapshot, last_stable_offset
from .leader_epoch import LeaderEpochCache
from .loader import load
from .offset_checkpoints import PartitionCheckpoints
from .producer_state import NO_VERIFICATION
from .segments import LogSegments
from .reads import Fetched, RecordIterator, RecordList
from .txn_index import AbortedTxn
from .sharing import Locked, SharedFiles, refresh, write_shared_state
from .state import FLAG_CLEAN, NO_UNSTABLE, UNKNOWN_UNSTABLE

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .appending import AppendInfo
    from .cleaner import CompactionReport
    from .fs import OsFileSystem as FileSystem

__all__ = ["Log", "ProducerSummary", "NO_VERIFICATION", "AppendValue", "Codec"]

# What Log.append takes, one or an iterable of them: a value (bytes), None (a
# tombstone) or a Record (key, headers, timestamp).
AppendValue = Union[bytes, bytearray, memoryview, Record, None]
# A compression codec: Kafka's name (case does not matter at run time) or id; None for
# the topic's compression.type.
Codec = Union[Literal["none", "uncompressed", "gzip", "snappy", "lz4", "zstd"], int, None]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _fails_on_io_error(
        method: "Callable[Concatenate[Log, _P], _T]") -> "Callable[Concatenate[Log, _P], _T]":
    """An OSError from anywhere but the paths that undo their own writes (the .log
    write of an append) leaves memory and disk possibly out of step, so the log fails,
    as Kafka takes a log dir offline on an IOException: the call raises LogFailedError
    and every later write does too, until a reopen recovers from what is on disk."""
    @functools.wraps(method)
    def guarded(self: "Log", *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(self, *args, **kwargs)
        except KqliteError:
            raise
        except OSError as exc:
            raise self._fail(exc, method.__name__) from exc
    # (functools.wraps' own type names the first parameter "self", not positional.)
    return cast("Callable[Concatenate[Log, _P], _T]", guarded)


class ProducerSummary(NamedTuple):
    """One producer of :meth:`Log.active_producers` (DescribeProducers' ActiveProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class Log:
    """A Kafka-format partition log in a directory. Use :meth:`Log.open`.

    Any number of threads may share one Log. Closing it while another thread reads it
    (:meth:`close`, or a Database evicting an idle log its reader holds without a
    lease) is safe: the read in progress finishes the step it is in (one lookup, one
    chunk of a read), and every later call or step of an iterator raises
    LogClosedError (a :meth:`read` iterator yields the records it read before the close,
    then raises at its next batch). A read never uses a descriptor the close released,
    nor the same number reused by a later open. Truncation and retention running
    beside a read change what it finds, never the files under it: it answers from the
    log as it was before or after them, or raises OffsetOutOfRangeError when its offset
    left the log. A :meth:`fetch_region` descriptor is the caller's own duplicate and
    stays readable after a close.
    """

    # Set by _load and clean_mark (their types, for the strict check of this module).
    _segments: LogSegments
    _high_watermark: int
    _marked: bool
    hw_follows_leo: bool

    # -- Open and close a log ----------------------------------------------------------------

    @classmethod
    def open(cls, path: "str | os.PathLike[str]", config: Optional[Mapping[str, Any]] = None,
             *, fs: "Optional[FileSystem]" = None, create: bool = True,
             **options: "Unpack[LogOptions]") -> "Log":
        """Open (creating if needed) the log in directory ``path``.

        ``config`` is a dict of Kafka topic settings (``{"segment.bytes": ...}``);
        keyword options use Python spelling (``segment_bytes=...``, ``fsync="always"``).
        ``fs`` replaces the file-system seam (tests only). Raises StorageError when the
        files cannot be read or written, FileNotFoundError with ``create=False`` and
        no log at ``path``.
        """
        settings = LogConfig(config, **options)
        fs = fs or DEFAULT_FS
        if not create and not fs.exists(path):
            raise FileNotFoundError(f"no log at {os.path.abspath(os.fspath(path))}")
        try:
            return cls(path, settings, fs, create)
        except KqliteError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot open the log at {os.fspath(path)}: {exc}") from exc

    def __init__(self, path: "str | os.PathLike[str]", config: LogConfig, fs: "FileSystem",
                 create: bool = True) -> None:
        self.path: str = os.path.abspath(os.fspath(path))
        self.config = config
        self.fs = fs
        self.topic, self.partition = parse_topic_partition(os.path.basename(self.path))
        self.recovery_reports: list[Any] = []
        self._closed = True
        self._failed: Optional[BaseException] = None
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        # Roll listeners: callables(new_base_offset), called under the write lock right
        # after this process rolled a new segment (the producer state snapshots there, as
        # Kafka writes <offset>.snapshot at a roll). An exception propagates to the write
        # that rolled; the roll stays.
        self._on_roll: list[Callable[[int], object]] = []
        self._producer_state = None     # loaded on first use: appending.producer_state
        self._producer_state_cuts = 0   # the truncations it has followed (sharing.py)
        self._first_unstable = NO_UNSTABLE  # as published in the shared state (state.py)
        self._record_marks = None       # read_one's marks of batches: record_lookup.py
        parent = os.path.dirname(self.path)
        if not fs.exists(self.path):
            parent_is_new = not fs.exists(parent)
            fs.makedirs(self.path)
            if parent_is_new:
                write_meta_properties(fs, parent)
                fs.fsync_dir(os.path.dirname(parent))  # the new data dir's own entry
            fs.fsync_dir(parent)
        self._data_dir: Optional[DataDir] = None
        # In a cluster broker's data dir (cluster_dir.py) only the broker's process may
        # write, and a HW the replication layer did not pin is never checkpointed.
        self._replicated = self._read_only = self._hw_from_checkpoint = False
        self._shared = SharedFiles(fs, self.path)
        try:
            self._open(parent)
        except BaseException:
            self._release_files()
            raise
        self._closed = False
        if self.config["flush.ms"] < 2 ** 62:
            flusher.register(self)

    def _open(self, parent: str) -> None:
        users = self._shared.users
        alone = users.try_lock(exclusive=True)
        if not alone:
            users.lock(exclusive=False)
        if is_data_dir(self.fs, parent):
            self._data_dir = DataDir.acquire(self.fs, parent)
            self._replicated = cluster_dir.is_replicated(self.fs, parent)
            self._read_only = self._replicated and not cluster_dir.is_claimed(parent)
        self._checkpoints = PartitionCheckpoints(self.fs, self.path, self.topic, self.partition,
                                                 self._data_dir)
        write_lock = self._shared.write_lock
        write_lock.lock(timeout=self._lock_timeout(), what=f"log {self.path}")
        try:
            state = self._shared.read()
            self._load(state, recover=alone and (state is None or not state.flags & FLAG_CLEAN))
        finally:
            write_lock.unlock()
        if alone:
            users.unlock()
            users.lock(exclusive=False)

    def _load(self, state: Any, recover: bool) -> None:
        listing = sorted(self.fs.listdir(self.path))
        checkpoints = self._checkpoints.read()
        loaded = load(self.fs, self.path, self.config, state, checkpoints, recover)
        self.recovery_reports.extend(loaded.reports)
        self._segments = loaded.segments
        self._corrupt = loaded.corrupt
        self.log_start_offset: int = loaded.log_start_offset
        self.recovery_point: int = loaded.recovery_point
        self.epochs = LeaderEpochCache(self.fs, self.path)
        self._generation = (state.generation + 1) if state else 1
        end = self.next_offset
        self._high_watermark = min(checkpoints.get(REPLICATION_OFFSET_FILE, end), end)
        self.hw_follows_leo = True
        if self._replicated:
            # A replica's log end may be past what was committed: until the replication
            # layer pins its HW, this handle never checkpoints one, and outside the
            # broker's process it reads the checkpointed one (cluster_dir.py).
            self._hw_from_checkpoint = True
            if self._read_only:
                self.hw_follows_leo = False
                self._high_watermark = self._checkpoints.checkpointed_high_watermark(
                    checkpoints, self.log_start_offset, end)
        self._synced_offset = self.recovery_point
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._last_checkpoint = self._last_flush
        self._dir_dirty = True  # the entries of files created or removed above are not durable
        self.epochs.truncate_from_end(end)
        clean_mark.opened(self, state, recover, listing, checkpoints)
        self._settle_producer_state(state, loaded.producer_state)

    def _settle_producer_state(self, state: Any, recovered: Any) -> None:
        """At open, under the write lock: the first unstable offset, from the producer
        state recovery built, or the shared state's; when neither says (no record, or one
        written before kqlite had transactions) the producer state is loaded to learn it,
        and published. A producer state without producers is not kept: a log no producer
        writes to keeps its appends' fast path (appending.producer_state loads it when
        one comes)."""
        if recovered is None:
            if state is not None and state.first_unstable_offset != UNKNOWN_UNSTABLE:
                self._first_unstable = state.first_unstable_offset
                return
            if self.next_offset == self.log_start_offset:
                self._first_unstable = NO_UNSTABLE          # nothing to learn
                return
            recovered = appending.load_producer_state(self)
        if recovered.producers:
            appending.adopt_producer_state(self, recovered)
        found = recovered.first_unstable_offset(self._high_watermark)
        self._first_unstable = NO_UNSTABLE if found is None else found
        if self._marked:
            self._write_state()

    @property
    def closed(self) -> bool:
        """Whether the log is closed (by :meth:`close`, or by the manager that leased it,
        when its topic is deleted or its database closes)."""
        return self._closed

    @_fails_on_io_error
    def close(self) -> None:
        """Flush, checkpoint and release the log. Safe to call twice. The files are
        released even when flushing or checkpointing fails (which then raises)."""
        if self._closed:
            return
        flusher.unregister(self)
        if self._failed is None and not self._marked and clean_mark.close_untouched(self):
            return      # it only read: nothing of its own to make durable
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
                    if self._producer_state is not None:
                        # A reopen starts from here instead of replaying the segment.
                        with self._locked_write():
                            appending.producer_state(self).take_snapshot(self.next_offset)
                    self._write_checkpoints()
                    users = self._shared.users
                    users.unlock()
                    last = users.try_lock(exclusive=True)
                    with self._locked_write():
                        if last:
                            self._segments.active.on_roll()
                            self._segments.active.sync()
                        self._write_state(flags=FLAG_CLEAN if last else 0, sync=last)
            except OSError as exc:
                if self._failed is None:      # before _release_files: no clean marker
                    self._failed = exc
                raise
            finally:
                self._closed = True
                self._segments.close_all()
                self._release_files()
        if flush_error is not None:
            raise flush_error

    def _release_files(self) -> None:
        self._shared.release()
        if self._data_dir is not None:
            # A failed log needs recovery: it must not mark the data dir cleanly shut down.
            self._data_dir.release(clean=self._failed is None)

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        try:
            state = f"[{self.start_offset}, {self.end_offset})"
        except LogClosedError:
            state = "closed"
        return f"<kqlite.Log {self.path} {state}>"

    # -- Offsets ------------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """The log end offset as this handle last saw it (:attr:`end_offset` catches up)."""
        return self._segments[-1].next_offset

    @property
    def end_offset(self) -> int:
        """The log end offset (LEO): the offset the next record will get."""
        with self._lock:
            self._check_open()
            self._refresh()
            return self._segments[-1].next_offset

    @property
    def start_offset(self) -> int:
        """The log start offset: the first offset still readable."""
        with self._lock:
            self._check_open()
            self._refresh()
            return self.log_start_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which consumers read (Isolation.HIGH_WATERMARK), caught up with
        other processes' appends: the log end, unless pinned by set_high_watermark."""
        with self._lock:
            self._check_open()
            self._refresh()
            return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The offset below which read_committed consumers read (Isolation.COMMITTED),
        caught up with other processes: Kafka's rule (isolation.last_stable_offset), the
        first offset of the oldest transaction that is undecided or whose marker the high
        watermark has not passed, when that lies below the high watermark; else the high
        watermark."""
        with self._lock:
            self._check_open()
            self._refresh()
            return self._last_stable_offset()

    def offset_snapshot(self) -> OffsetSnapshot:
        """The log start, last stable offset, high watermark and log end at one moment,
        caught up with other processes: an isolation.OffsetSnapshot (Kafka's
        fetchOffsetSnapshot), whose ``read_limit`` gives each isolation's limit."""
        with self._lock:
            self._check_open()
            self._refresh()
            hw = self._high_watermark
            return OffsetSnapshot(self.log_start_offset, self._last_stable_offset(), hw,
                                  self._segments[-1].next_offset)

    @property
    def size(self) -> int:
        """Bytes in all segments."""
        with self._lock:
            self._check_open()
            return self._segments.size_in_bytes()

    @property
    def segments(self) -> list[int]:
        """Base offsets of the segments, oldest first."""
        with self._lock:
            self._check_open()
            return self._segments.bases()

    def set_high_watermark(self, offset: int) -> int:
        """Replication: pin the high watermark at ``offset`` (within [log start, log end]);
        it then stops following the log end. Only truncation lowers a pinned high
        watermark on its own. Returns the high watermark."""
        with self._lock:
            self._check_open()
            self._refresh()
            self.hw_follows_leo = self._hw_from_checkpoint = False
            self._high_watermark = max(self.log_start_offset, min(offset, self.next_offset))
            return self._high_watermark

    def advance_high_watermark(self, offset: int) -> int:
        """Replication, on the leader: pin the high watermark and move it forward to
        ``offset`` (capped at the log end); a lower ``offset`` changes nothing (Kafka's
        maybeIncrementHighWatermark). Returns the high watermark."""
        with self._lock:
            self._check_open()
            self._refresh()
            self.hw_follows_leo = self._hw_from_checkpoint = False
            self._high_watermark = max(self._high_watermark, min(offset, self.next_offset))
            return self._high_watermark

    # -- Append -------------------------------------------------------------------------------

    @_fails_on_io_error
    def append(self, records: Union[AppendValue, Iterable[AppendValue]], *,
               timestamp: Optional[int] = None, codec: Codec = None,
               leader_epoch: Optional[int] = None) -> int:
        """Append records (bytes values, None tombstones or Record objects) as batches.

        Returns the offset of the first record. Long lists are split into batches of
        about 1 MiB, each at most ``max.message.bytes``. With ``fsync="always"`` it
        returns after the records are on disk.
        """
        return appending.append(self, records, timestamp, codec, leader_epoch)

    @_fails_on_io_error
    def append_batches(self, data: Union[bytes, bytearray, memoryview], *,
                       leader_epoch: Optional[int] = None, assign_offsets: bool = True,
                       origin: Optional[AppendOrigin] = None,
                       verification_guard: object = None) -> int:
        """Append bytes holding whole v2 batches (from an application or another log).

        The bytes are validated once, without building Python records: framing, CRC and
        the record boundaries inside each batch, with Kafka's LogValidator rules for
        ``origin`` (kqlite.format.validate.AppendOrigin; default LOCAL, or REPLICATION
        when ``assign_offsets`` is False, which keeps the leader's offsets). Base offsets
        are rewritten to the next offsets unless ``assign_offsets`` is False. Batches of
        producers are judged by the producer state as ``origin`` says (producer_state.py;
        a COORDINATOR append of a transactional batch that starts a transaction needs
        the ``verification_guard`` of :meth:`begin_verification`). Returns the first
        offset.
        """
        if origin is None:
            origin = AppendOrigin.LOCAL if assign_offsets else AppendOrigin.REPLICATION
        return appending.append_batches(self, data, leader_epoch, assign_offsets,
                                        origin, verification_guard).first_offset

    @_fails_on_io_error
    def append_as_leader(self, data: Union[bytes, bytearray, memoryview], *,
                         leader_epoch: int, origin: AppendOrigin = AppendOrigin.CLIENT,
                         verification_guard: object = None) -> "AppendInfo":
        """A produce request's batches, appended by the partition's leader (Kafka's
        appendAsLeader): validated as coming from a client, stamped with
        ``leader_epoch``, judged by the producer state (a retry of a batch already in the
        log is not written again: its first offsets are answered; a transactional batch
        that starts the producer's transaction here needs the current
        ``verification_guard`` of :meth:`begin_verification`, or NO_VERIFICATION from a
        broker that does not verify). Returns an AppendInfo(first_offset, last_offset,
        record_count, duplicate); raises InvalidRecordError, CorruptRecordError,
        RecordTooLargeError, UnsupportedCodecError, InvalidTxnStateError,
        OutOfOrderSequenceError or InvalidProducerEpochError, and then nothing was
        written."""
        return appending.append_batches(self, data, leader_epoch, True, origin,
                                        verification_guard)

    @_fails_on_io_error
    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, *, leader_epoch: Optional[int] = None,
                      timestamp: Optional[int] = None) -> int:
        """Append the COMMIT (``commit`` true) or ABORT marker of ``producer_id``'s
        transaction, as a partition leader does for WriteTxnMarkers (a 78-byte control
        batch stamped ``timestamp``, by default this clock; origin COORDINATOR). An ABORT
        that ends an open transaction writes its ``.txnindex`` entry. Returns the
        marker's offset; raises InvalidProducerEpochError (an epoch older than the
        producer's) or TransactionCoordinatorFencedError (a coordinator epoch older than
        its last marker's), and then nothing was written. A marker for a producer with
        no open transaction is legal and only moves its epochs."""
        data = build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit,
                                   now_ms() if timestamp is None else timestamp)
        return appending.append_batches(self, data, leader_epoch, True,
                                        AppendOrigin.COORDINATOR).first_offset

    def begin_verification(self, producer_id: int, sequence: int, epoch: int) -> object:
        """KIP-890 part 1 (Kafka's maybeStartTransactionVerification): the guard to append
        ``producer_id``'s first transactional batch here with, once the transaction
        coordinator confirmed the partition is in the transaction; None when that
        producer's transaction of ``epoch`` is open here already (nothing to verify).
        ``sequence`` is the batch's base sequence (-1 for a coordinator's batch)."""
        with self._locked_write():
            self._check_usable()
            return appending.producer_state(self).begin_verification(producer_id, sequence,
                                                                     epoch, now_ms())

    @_fails_on_io_error
    def roll(self) -> None:
        """Start a new segment now (no-op if the active one is empty)."""
        with self._locked_write():
            self._check_writable()
            if self._segments.active.size:
                appending.roll(self)
                self._write_state()

    # -- Flush --------------------------------------------------------------------------------

    @_fails_on_io_error
    def flush(self) -> None:
        """fsync everything appended so far (and the directory after a roll)."""
        self._check_usable()
        with self._lock:
            target = self.next_offset
        self._sync_to(target, force=True)

    def _sync_to(self, offset: int, force: bool = False) -> None:
        """Return once an fsync round covering ``offset`` (with ``force``: begun after this
        call) has finished; concurrent appenders share rounds (group_commit.py)."""
        group_commit.sync_to(self, offset, force)

    def _flush_if_due(self, now: float) -> None:
        """Called by the background flusher for ``flush.ms``."""
        if self._closed or self._failed is not None or not self._unflushed:
            return
        if (now - self._last_flush) * 1000.0 >= self.config["flush.ms"]:
            self.flush()

    # -- Read ---------------------------------------------------------------------------------

    def read(self, offset: Optional[int] = None, max_records: Optional[int] = None, *,
             max_offset: Optional[int] = None,
             isolation: Isolation = Isolation.HIGH_WATERMARK) -> RecordIterator:
        """Iterate Records from ``offset`` (default: the log start) up to the isolation's
        limit (by default the high watermark), and below ``max_offset`` if given. Markers
        are never returned; COMMITTED also leaves out the records of aborted transactions
        (Kafka's read_committed consumer).

        Raises OffsetOutOfRangeError if ``offset`` is below the log start or above the
        log end; reading at or past the limit yields nothing.
        """
        if max_records is not None and 0 < max_records <= record_lookup.FEW_RECORDS:
            # A few records of what may be a large batch: walked to, not decoded whole.
            return record_lookup.read_few(self, offset, max_records, max_offset, isolation)
        return reads.read(self, offset, max_records, max_offset, isolation)

    def read_one(self, offset: int, *,
                 isolation: Isolation = Isolation.HIGH_WATERMARK) -> Optional[Record]:
        """The Record at ``offset``, or None when there is none: ``offset`` is at or past
        the isolation's limit (by default the high watermark), compaction removed that
        record, it is a marker's, or (COMMITTED) its transaction was aborted. Raises
        OffsetOutOfRangeError if ``offset`` is below the log start or
        above the log end, as :meth:`read` does.

        Reads a few KiB around the record, not its whole batch (record_lookup.py): the
        batch is read, CRC-checked and checked record by record the first time, and its
        record boundaries remembered. Other processes' appends are seen, as by
        :meth:`read`.
        """
        return record_lookup.read_one(self, offset, isolation)

    def fetch_records(self, offset: int, min_records: int = 1, *,
                      isolation: Isolation = Isolation.HIGH_WATERMARK) -> RecordList:
        """A list of the Records from ``offset`` to the end of the batch in which
        ``min_records`` is reached (or to the isolation's limit): whole batches, as a
        consumer's fetch buffers them, so that no batch is decoded twice by consecutive
        fetches; markers and (COMMITTED) aborted records left out, as by :meth:`read`.
        The list's ``next_offset`` is the offset after the last batch read (a consumer's
        next position, past markers and aborted records too). Raises
        OffsetOutOfRangeError as :meth:`read` does."""
        return reads.fetch_records(self, offset, min_records, isolation)

    @overload
    def read_batches(self, offset: int, max_bytes: int = ..., *,
                     isolation: Isolation = ...,
                     aborted_transactions: Literal[False] = ...) -> bytes: ...

    @overload
    def read_batches(self, offset: int, max_bytes: int = ..., *,
                     isolation: Isolation = ...,
                     aborted_transactions: Literal[True]) -> Fetched: ...

    def read_batches(self, offset: int, max_bytes: int = 1 << 20, *,
                     isolation: Isolation = Isolation.HIGH_WATERMARK,
                     aborted_transactions: bool = False) -> Union[bytes, Fetched]:
        """Raw bytes of whole batches starting at the one that holds ``offset`` (no
        decoding), each ending below the isolation's limit (by default the high watermark).

        At least one batch is returned even if it exceeds ``max_bytes`` (as Kafka's fetch).
        Markers and aborted batches are returned too, as a broker's Fetch returns them;
        with ``aborted_transactions`` the answer is a ``Fetched(records,
        aborted_transactions)``: under COMMITTED the aborted transactions overlapping the
        bytes (``[AbortedTransaction(producer_id, first_offset)]``, Kafka's bound), else
        None.
        """
        return reads.read_batches(self, offset, max_bytes, isolation, aborted_transactions)

    @overload
    def fetch_region(self, offset: int, max_bytes: int, max_offset: Optional[int] = ..., *,
                     isolation: Isolation = ...,
                     aborted_transactions: Literal[False] = ..., min_one: bool = ...,
                     ) -> Optional[tuple[int, int, int]]: ...

    @overload
    def fetch_region(self, offset: int, max_bytes: int, max_offset: Optional[int] = ..., *,
                     isolation: Isolation = ...,
                     aborted_transactions: Literal[True], min_one: bool = ...) -> Fetched: ...

    def fetch_region(self, offset: int, max_bytes: int, max_offset: Optional[int] = None, *,
                     isolation: Isolation = Isolation.HIGH_WATERMARK,
                     aborted_transactions: bool = False, min_one: bool = True,
                     ) -> Union[Optional[tuple[int, int, int]], Fetched]:
        """Where the whole batches from the one holding ``offset`` lie on disk, for
        sendfile: ``(fd, position, length)`` within one segment, at most ``max_bytes``
        (but at least one batch; with ``min_one=False`` none when the first is larger,
        as Kafka reads every partition of a Fetch after the first that returned data),
        every batch ending below the isolation's limit (by
        default the high watermark) and below ``max_offset`` if given. ``None`` when there
        is nothing to read at ``offset``. The descriptor is a duplicate the caller must
        close: retention may close the segment meanwhile. With ``aborted_transactions``
        the answer is a ``Fetched(region or None, aborted_transactions)``, as for
        :meth:`read_batches` (a read_committed Fetch's AbortedTransactions)."""
        return reads.fetch_region(self, offset, max_bytes, max_offset, isolation,
                                  aborted_transactions, min_one)

    def offset_for_time(self, timestamp: int, *,
                        isolation: Isolation = Isolation.HIGH_WATERMARK) -> Optional[int]:
        """The earliest offset below the isolation's limit whose timestamp is >=
        ``timestamp`` (ms), or None. As Kafka's ListOffsets, every record counts, markers
        and aborted records included (only the limit depends on the isolation)."""
        return reads.offset_for_time(self, timestamp, isolation)

    def find_by_time(self, timestamp: int, *, isolation: Isolation = Isolation.HIGH_WATERMARK,
                     ) -> Optional[tuple[int, int]]:
        """``(offset, timestamp)`` of the record :meth:`offset_for_time` finds, or None: a
        ListOffsets answer (the record found may be a marker, which no read returns)."""
        return reads.find_by_time(self, timestamp, isolation)

    def aborted_transactions(self, offset: Optional[int] = None,
                             upper_bound: Optional[int] = None) -> list[AbortedTxn]:
        """The ``.txnindex`` entries (AbortedTxn: producer_id, first_offset, last_offset,
        last_stable_offset) of the transactions aborted in [``offset``, ``upper_bound``)
        (Kafka's collectAbortedTransactions; by default the whole log), oldest marker
        first."""
        with self._lock:
            self._check_open()
            self._refresh()
            start = self.log_start_offset if offset is None else offset
            end = self._segments[-1].next_offset + 1 if upper_bound is None else upper_bound
            return reads.collect_aborted(self, start, end)

    def max_timestamp(self) -> tuple[int, int]:
        """``(offset, timestamp)`` of the record with the largest timestamp, ``(-1, -1)``
        for a log without timestamps (ListOffsets' MAX_TIMESTAMP). Like Kafka's, it looks
        at the whole log, the high watermark notwithstanding."""
        return reads.max_timestamp(self)

    def active_producers(self) -> list[ProducerSummary]:
        """The producers whose state the log keeps (Kafka's DescribeProducers), each a
        :class:`ProducerSummary`: epoch, last sequence, last timestamp, the coordinator
        epoch of its last marker (-1 before any) and the first offset of its open
        transaction (-1 for none). Read under the write lock, as an append reads it, so
        another process's appends are included."""
        with self._locked_write():
            return [ProducerSummary(e.producer_id, e.epoch, e.last_seq, e.last_timestamp,
                                    e.coordinator_epoch, e.current_txn_first_offset)
                    for e in appending.producer_state(self).producers.values()]

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``[(producer id, first offset)]`` of the transactions open on this partition,
        oldest first (what ``kqlite transactions find-hanging`` compares with the
        coordinators' state). Read as :meth:`active_producers` is."""
        with self._locked_write():
            return appending.producer_state(self).ongoing_transactions()

    def batch_headers(self, start_offset: Optional[int] = None, *,
                      isolation: Isolation = Isolation.LOG_END) -> Iterator[BatchHeader]:
        """Iterate :class:`~kqlite.storage.BatchHeader` of the batches whose last offset is
        >= ``start_offset`` (default: the log start) and below the isolation's limit (by
        default the log end), reading headers only: the producer-state rebuild."""
        return reads.batch_headers(self, start_offset, isolation)

    # -- Retention, truncation, compaction -------------------------------------------------

    @_fails_on_io_error
    def delete_records(self, before: int) -> int:
        """Advance the log start offset to ``before`` (Kafka's DeleteRecords) and drop
        segments wholly below it. Returns the new log start offset."""
        return retention.delete_records(self, before)

    @_fails_on_io_error
    def enforce_retention(self, now_ms: Optional[int] = None) -> list[int]:
        """Delete whole old segments by the log start offset and, with cleanup.policy
        delete, by retention.bytes and retention.ms (Kafka's order); the active segment
        and segments not wholly below the high watermark are never deleted. Returns the
        deleted base offsets."""
        return retention.enforce_retention(self, now_ms)

    @_fails_on_io_error
    def truncate_to(self, offset: int) -> int:
        """Remove every record at or after ``offset`` (replication's truncation, Kafka's
        truncateTo), and the leader epochs starting at or after it, even when no record
        goes.

        Whole batches are removed, so the log end may land below ``offset`` when it falls
        inside a batch. Returns the new log end offset.
        """
        end = retention.truncate_to(self, offset)
        self.flush()
        return end

    @_fails_on_io_error
    def truncate_fully_and_start_at(self, offset: int) -> int:
        """Delete every segment and start the log over, empty, at ``offset`` (Kafka's
        truncateFullyAndStartAt: a follower whose log lies wholly below its leader's log
        start): log start = log end = high watermark = ``offset``; the leader-epoch
        cache and the producer state are emptied. Returns ``offset``."""
        retention.truncate_fully_and_start_at(self, offset)
        self.flush()
        return offset

    @_fails_on_io_error
    def assign_epoch_start(self, epoch: int, start_offset: int) -> bool:
        """Record in the leader-epoch cache (``leader-epoch-checkpoint``) that leader epoch
        ``epoch`` starts at ``start_offset`` (Kafka's maybeAssignEpochStartOffset): an
        epoch not above the latest known one changes nothing; entries starting at or
        after ``start_offset`` are superseded. Returns True if the cache changed."""
        return leader_epoch.assign_epoch_start(self, epoch, start_offset)

    @_fails_on_io_error
    def compact(self, now_ms: Optional[int] = None, *,
                force: bool = False) -> "CompactionReport":
        """Compact the log (``cleanup.policy`` compact or compact,delete): keep only the
        latest record of each key in the non-active segments; tombstones go
        ``delete.retention.ms`` after the compaction that first kept them. Runs only when
        the dirty share reaches ``min.cleanable.dirty.ratio`` (``force=True`` skips that
        test) and leaves records younger than ``min.compaction.lag.ms``. Offsets never
        change. Appends continue meanwhile; only the final swap takes the write lock.
        Returns a CompactionReport; a no-op on a log without ``compact``. See cleaner.py.
        """
        return cleaner.compact(CleanableLog(self), now_ms, force)

    # -- Shared with the implementation modules -------------------------------------------

    def _lock_timeout(self) -> float:
        return float(self.config["lock.timeout.ms"]) / 1000.0

    def _locked_write(self, refresh: bool = True) -> Locked:
        """The write lock as a context (sharing.Locked): refreshed unless ``refresh`` is
        False, LogClosedError on a closed log."""
        return Locked(self, refresh)

    def _refresh(self) -> None:
        """Catch up with changes other processes made (caller holds self._lock)."""
        refresh(self)
        if self._read_only and self._hw_from_checkpoint:
            self._high_watermark = self._checkpoints.refreshed_high_watermark(
                self._high_watermark, self.log_start_offset, self.next_offset)

    def _write_state(self, flags: int = 0, sync: bool = False) -> None:
        write_shared_state(self, flags, sync)

    def _write_checkpoints(self) -> None:
        clean_mark.write_checkpoints(self)

    def _check_writable(self) -> None:
        if self._corrupt is not None:
            raise self._corrupt
        if self._read_only:
            raise ReplicatedPartitionError(
                f"{self.topic}-{self.partition} in {os.path.dirname(self.path)} is "
                f"replicated by a cluster broker: this process may only read it (up to the "
                f"high watermark); produce to topic {self.topic!r} through the cluster")
        self._check_usable()
        if not self._marked and self._shared.write_lock.held is not None:
            clean_mark.mark_not_clean(self)     # before the handle's first change lands

    def _fail(self, exc: BaseException, action: str) -> LogFailedError:
        """Put the log in the failed state (keeping the first cause) and return the
        LogFailedError to raise."""
        if self._failed is None:
            self._failed = exc
        return LogFailedError(f"{action} on log {self.path} failed: {exc}; the log refuses "
                              f"writes until reopened")

    def _last_stable_offset(self) -> int:
        """The last stable offset (caller holds self._lock, refreshed): isolation.py's rule
        over this process's first unstable offset (appending.first_unstable_offset)."""
        ps = self._producer_state
        if self._first_unstable < 0 and (ps is None or not (ps.ongoing or ps.unreplicated)):
            return self._high_watermark         # no transaction anywhere: the common case
        first = appending.first_unstable_offset(self)
        return last_stable_offset(self._high_watermark, first if first >= 0 else None)

    def _producer_batches(self, offset: int) -> Iterator[tuple[BatchHeader, Any]]:
        """The producer state's view of the batches from ``offset`` (reads.producer_batches;
        caller holds the write lock)."""
        return reads.producer_batches(self._segments, offset)

    def _check_open(self) -> None:
        """LogClosedError on a closed log (caller holds self._lock: see the class
        docstring)."""
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")

    def _check_usable(self) -> None:
        self._check_open()
        if self._failed is not None:
            raise LogFailedError(f"log {self.path} failed earlier ({self._failed}); "
                                 f"reopen it to recover")
