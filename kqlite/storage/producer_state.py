"""Idempotent-producer state beside a partition's log: Kafka's ProducerStateManager.

Theory of operation. An idempotent producer numbers the batches it sends to a
partition: ``baseSequence`` starts at 0 and grows by the batch's offset span
(wrapping after 2**31 - 1), under a producer id and an epoch that a restarted
producer bumps. For each producer id the partition remembers the epoch and the
last five batches appended (Kafka's NUM_BATCHES_TO_RETAIN: a producer keeps at
most five requests in flight), as :class:`BatchMetadata`. :meth:`check` judges an
incoming batch against that memory:

* a retry of one of those five batches (same epoch, same first and last
  sequence) is a duplicate: nothing is written and the producer is answered with
  the offsets the batch got the first time;
* an epoch older than the known one is a fenced producer:
  :class:`InvalidProducerEpochError` (INVALID_PRODUCER_EPOCH);
* a newer epoch must start at sequence 0, the same epoch must continue at the
  last sequence + 1; anything else is :class:`OutOfOrderSequenceError`
  (OUT_OF_ORDER_SEQUENCE_NUMBER);
* an unknown producer id is accepted at any sequence (its earlier batches may
  have been deleted by retention).

:meth:`update` learns each batch once it is in the log. The state is a function
of the log's batch headers, so it can always be rebuilt by replaying them;
snapshots make that cheap. :meth:`take_snapshot` writes ``<offset>.snapshot``
describing the state after every batch below ``offset``; :meth:`load` starts
from the newest readable snapshot in [log start, log end] and replays only the
headers after it. A snapshot that fails its version, CRC or size checks is
logged, deleted and the next older one tried; with none left the whole log is
replayed.

Snapshot file (ON-DISK: Kafka's PRODUCER_SNAPSHOT schema, version 1; named by
the offset in 20 digits, e.g. ``00000000000000001234.snapshot``; big-endian)::

    version                   int16   1
    crc                       uint32  CRC-32C of every byte after this field
    producer_entries          int32 count, then per entry (46 bytes):
      producer_id             int64
      epoch                   int16
      last_sequence           int32   -1 with no batch
      last_offset             int64   -1 with no batch
      offset_delta            int32   last_offset - the batch's first offset
      timestamp               int64   the batch's max timestamp
      coordinator_epoch       int32   -1 (kqlite has no transaction coordinator)
      current_txn_first_offset int64  -1 (no transaction is ever ongoing)

Kafka writes one entry per producer (its latest batch). kqlite writes one entry
per remembered batch, oldest first, so that the duplicate window survives a
restart: Kafka's reader keeps the last entry of each producer id, which is
exactly the entry Kafka would have written, and this reader takes a Kafka file
as a window of one batch.

Integration contract (one manager per partition directory, owned by the Log;
every call under the log's write lock, by the process that writes the log, since
loading and truncating delete snapshot files):

* open: ``ProducerStateManager.load(dir, log_start, log_end, log.batch_headers,
  fs=log.fs)``; ``batch_headers(offset)`` yields the headers of the batches from
  the one holding ``offset`` to the end, each a :class:`kqlite.format.BatchHeader`
  (what ``Log.batch_headers`` yields and ``validate_batches`` returns);
* append: ``check(batch, origin)`` before writing (an exception: write nothing;
  a BatchMetadata: a duplicate, write nothing and answer with its offsets), then
  ``update(batch, first_offset)`` for every batch written, idempotent or not, with
  the base offset the log gave it, and ``advance(log_end)`` after batches built
  without producer fields (``Log.append``), so that :attr:`end_offset` follows the
  log end;
* roll: ``take_snapshot(new_segment_base_offset)``; close: ``take_snapshot()``;
* truncation at the end (recovery, replication): ``truncate(log_start, log_end,
  batch_headers)``; the whole log replaced: ``truncate_fully(new_start)``;
* log start moved (retention, DeleteRecords): ``on_log_start_moved(log_start)``;
* another process appended or truncated (the log's refresh saw a new end):
  ``catch_up(log_start, log_end, batch_headers)`` before ``check``.

Differences from Kafka: no transactions (no ongoing-transaction index, no LSO,
control batches only update the epoch); only CLIENT appends are checked (Kafka
also checks the epoch of COORDINATOR appends; kqlite's LOCAL appends come from
the application itself); a producer without batches (left by a control batch)
must restart at sequence 0, as in Kafka. Producer ids expire only when
:meth:`remove_expired` is called (Kafka: producer.id.expiration.ms, one day by
default, checked every ten minutes).
"""

import logging
import os
import re
import struct
from collections import deque
from typing import NamedTuple

from .. import _native
from ..errors import InvalidProducerEpochError, KqliteError, OutOfOrderSequenceError
from ..format.validate import AppendOrigin
from .fs import DEFAULT_FS, atomic_write

__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "KEEP_BATCHES",
           "KEEP_SNAPSHOTS", "SNAPSHOT_SUFFIX", "snapshot_name", "encode_snapshot",
           "decode_snapshot", "CorruptSnapshotError"]

log = logging.getLogger("kqlite.storage")

KEEP_BATCHES = 5                # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
KEEP_SNAPSHOTS = 3              # newest snapshots kept by take_snapshot
SNAPSHOT_SUFFIX = ".snapshot"   # ON-DISK: Kafka's producer snapshot suffix
SNAPSHOT_VERSION = 1            # ON-DISK: Kafka's PRODUCER_SNAPSHOT_VERSION
_SNAPSHOT_NAME = re.compile(r"^(\d+)\.snapshot$")
_HEAD = struct.Struct(">hI")                # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")         # the entry fields, in the order above
_CRC_START = _HEAD.size                     # the CRC covers the entries array
_SEQUENCES = 1 << 31                        # sequences wrap after 2**31 - 1


def snapshot_name(offset):
    """The file name of the snapshot at ``offset`` (Kafka's 20-digit file prefix)."""
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class BatchMetadata(NamedTuple):
    """One remembered batch: sequences and offsets are inclusive."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    """A producer id's epoch and its newest batches (oldest first)."""

    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp")

    def __init__(self, producer_id, epoch, batches=(), last_timestamp=-1):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches = deque(batches, maxlen=KEEP_BATCHES)
        self.last_timestamp = last_timestamp

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else -1

    def set_epoch(self, epoch):
        """A new epoch starts a new sequence: forget the old epoch's batches."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()

    def find(self, first_seq, last_seq):
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def __repr__(self):
        return (f"ProducerEntry(producer_id={self.producer_id}, epoch={self.epoch}, "
                f"batches={list(self.batches)}, last_timestamp={self.last_timestamp})")


class CorruptSnapshotError(KqliteError):
    """Bytes that are not a readable version-1 snapshot (load skips such a file)."""


class ProducerStateManager:
    """The producer state of one partition directory; see the module docstring.

    ``producers`` maps producer id to :class:`ProducerEntry`; ``end_offset`` is the
    offset after the last batch the state includes (Kafka's mapEndOffset).
    """

    def __init__(self, directory, *, fs=DEFAULT_FS, keep_snapshots=KEEP_SNAPSHOTS,
                 durable=True):
        if keep_snapshots < 1:
            raise ValueError(f"keep_snapshots must be at least 1, not {keep_snapshots}")
        self.directory = directory
        self.fs = fs
        self.keep_snapshots = keep_snapshots
        self.durable = durable
        self.producers = {}
        self.end_offset = 0

    @classmethod
    def load(cls, directory, log_start, log_end, batch_headers, **options):
        """A manager for ``directory`` holding the state of the log [log_start, log_end)."""
        manager = cls(directory, **options)
        manager.reload(log_start, log_end, batch_headers)
        return manager

    # -- appends -------------------------------------------------------------------------------

    def check(self, batch, origin=AppendOrigin.CLIENT):
        """Judge ``batch`` before it is appended: None to append it, the BatchMetadata of
        the batch it duplicates, or raise InvalidProducerEpochError or
        OutOfOrderSequenceError. Only CLIENT appends are judged."""
        if AppendOrigin(origin) is not AppendOrigin.CLIENT:
            return None
        producer_id, first_seq = batch.producer_id, batch.base_sequence
        if producer_id < 0 or first_seq < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        epoch = batch.producer_epoch
        if epoch == entry.epoch:
            duplicate = entry.find(first_seq, batch.last_sequence)
            if duplicate is not None:
                return duplicate
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} sent epoch {epoch}, older than its current epoch "
                f"{entry.epoch}: a newer instance of this producer has fenced it",
                producer_id, epoch, entry.epoch)
        if epoch > entry.epoch:
            if first_seq != 0 and entry.epoch >= 0:     # a known epoch was left behind
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} starts its new epoch {epoch} at sequence "
                    f"{first_seq}; a new epoch starts at 0", producer_id, epoch, first_seq, 0)
            return None
        expected = (entry.last_seq + 1) % _SEQUENCES
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} (epoch {epoch}) sent sequence {first_seq}, but the "
                f"next expected is {expected}", producer_id, epoch, first_seq, expected)
        return None

    def update(self, batch, first_offset=None):
        """Learn a batch written at ``first_offset`` (default: its own base offset)."""
        first = batch.base_offset if first_offset is None else first_offset
        last = first + batch.last_offset - batch.base_offset
        self.end_offset = last + 1
        producer_id = batch.producer_id
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, batch.producer_epoch)
        entry.set_epoch(batch.producer_epoch)
        entry.last_timestamp = batch.max_timestamp
        if batch.is_control or batch.base_sequence < 0:
            return
        entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence, first,
                                           last, batch.max_timestamp))

    def advance(self, end_offset):
        """Batches without producer state (``Log.append``'s) now end the log at
        ``end_offset``: cheaper than :meth:`update` for each of them."""
        if end_offset > self.end_offset:
            self.end_offset = end_offset

    def remove_expired(self, now_ms, expiration_ms):
        """Forget producers whose last batch is ``expiration_ms`` or more older than
        ``now_ms`` (Kafka's producer.id.expiration.ms); returns how many."""
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- loading and truncation ----------------------------------------------------------------

    def reload(self, log_start, log_end, batch_headers):
        """Rebuild the state of the log [log_start, log_end): the newest readable
        snapshot in that range, then the headers of the batches after it."""
        self._remove_leftovers()
        self.producers = {}
        start = None
        for offset in sorted(self.snapshot_offsets(), reverse=True):
            if offset > log_end or offset < log_start:
                self._delete_snapshot(offset)   # describes truncated or deleted batches
            elif start is None:
                try:
                    self.producers = self._read_snapshot(offset)
                except CorruptSnapshotError as exc:
                    log.warning("producer snapshot %s is unusable (%s); trying an older one",
                                self._path(offset), exc)
                    self._delete_snapshot(offset)
                else:
                    start = offset
        self._replay(log_start if start is None else start, log_end, batch_headers)

    def catch_up(self, log_start, log_end, batch_headers):
        """Follow a log that changed behind this manager's back (another process appended
        or truncated): replay the headers of the batches in [end_offset, log_end), or
        reload when the log now ends before :attr:`end_offset`."""
        if log_end < self.end_offset:
            self.reload(log_start, log_end, batch_headers)
            return
        if log_end > self.end_offset:
            self._replay(self.end_offset, log_end, batch_headers)
        self.on_log_start_moved(log_start)

    def _replay(self, start, log_end, batch_headers):
        """Learn the batches of [start, log_end) from their headers."""
        self.end_offset = start
        for header in batch_headers(start):
            if header.base_offset >= log_end:
                break
            if header.last_offset >= start:
                self.update(header)
        self.end_offset = log_end

    def truncate(self, log_start, log_end, batch_headers):
        """The log now holds [log_start, log_end): forget batches at or after
        ``log_end`` (reloading from a snapshot) and snapshots outside the range."""
        if log_end == self.end_offset:
            self.on_log_start_moved(log_start)
            for offset in self.snapshot_offsets():
                if offset > log_end:
                    self._delete_snapshot(offset)
            return
        self.reload(log_start, log_end, batch_headers)

    def truncate_fully(self, offset):
        """The log was emptied and restarts at ``offset``: no producer, no snapshot."""
        for old in self.snapshot_offsets():
            self._delete_snapshot(old)
        self.producers = {}
        self.end_offset = offset

    def on_log_start_moved(self, log_start):
        """Segments below ``log_start`` were deleted: their snapshots go too."""
        self.delete_snapshots_before(log_start)
        self.end_offset = max(self.end_offset, log_start)

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot_offsets(self):
        """Offsets of the snapshot files in the directory, ascending."""
        offsets = []
        for name in self.fs.listdir(self.directory):
            m = _SNAPSHOT_NAME.match(name)
            if m:
                offsets.append(int(m.group(1)))
        return sorted(offsets)

    def take_snapshot(self, offset=None):
        """Write the state as ``<offset>.snapshot`` (default: :attr:`end_offset`) and keep
        only the newest ``keep_snapshots``; returns the path, or None when that snapshot
        exists. ``offset`` must not be below end_offset; above it, the caller vouches
        that the batches in between carry no producer state."""
        if offset is None:
            offset = self.end_offset
        if offset < self.end_offset:
            raise ValueError(f"cannot snapshot at offset {offset}: the producer state already "
                             f"includes batches up to offset {self.end_offset - 1}")
        self.end_offset = offset
        path = self._path(offset)
        written = None
        if not self.fs.exists(path):
            atomic_write(self.fs, path, encode_snapshot(self.producers), durable=self.durable)
            written = path
        for old in self.snapshot_offsets()[:-self.keep_snapshots]:
            self._delete_snapshot(old)
        return written

    def delete_snapshots_before(self, offset):
        """Delete the snapshots below ``offset``."""
        for old in self.snapshot_offsets():
            if old < offset:
                self._delete_snapshot(old)

    def _path(self, offset):
        return os.path.join(self.directory, snapshot_name(offset))

    def _delete_snapshot(self, offset):
        try:
            self.fs.remove(self._path(offset))
        except FileNotFoundError:
            pass

    def _remove_leftovers(self):
        # atomic_write's temporary files, left by a crash in the middle of a snapshot.
        for name in self.fs.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                try:
                    self.fs.remove(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass

    def _read_snapshot(self, offset):
        f = self.fs.open(self._path(offset))
        try:
            data = f.pread(f.size(), 0)
        finally:
            f.close()
        return decode_snapshot(data)


def encode_snapshot(producers):
    """The bytes of a snapshot file holding ``producers`` ({id: ProducerEntry})."""
    entries = []
    for producer_id, entry in producers.items():
        if not entry.batches:
            entries.append(_ENTRY.pack(producer_id, entry.epoch, -1, -1, 0,
                                       entry.last_timestamp, -1, -1))
        for b in entry.batches:
            entries.append(_ENTRY.pack(producer_id, entry.epoch, b.last_seq, b.last_offset,
                                       b.last_offset - b.first_offset, b.timestamp, -1, -1))
    body = _COUNT.pack(len(entries)) + b"".join(entries)
    return _HEAD.pack(SNAPSHOT_VERSION, _native.crc32c(body)) + body


def decode_snapshot(data):
    """{producer id: ProducerEntry} from a snapshot file's bytes; CorruptSnapshotError
    when they are not a version-1 snapshot with a correct CRC."""
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is shorter than a snapshot header")
    version, crc = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    actual = _native.crc32c(memoryview(data)[_CRC_START:])
    if actual != crc:
        raise CorruptSnapshotError(f"CRC mismatch: stored 0x{crc:08x}, "
                                   f"computed 0x{actual:08x}")
    (count,) = _COUNT.unpack_from(data, _HEAD.size)
    expected = _HEAD.size + _COUNT.size + count * _ENTRY.size
    if count < 0 or expected != len(data):
        raise CorruptSnapshotError(f"{count} entries do not fill {len(data)} bytes")
    producers = {}
    for (producer_id, epoch, last_seq, last_offset, delta, timestamp, _coordinator_epoch,
         _txn_first_offset) in _ENTRY.iter_unpack(memoryview(data)[_HEAD.size + _COUNT.size:]):
        entry = producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = producers[producer_id] = ProducerEntry(producer_id, epoch)
        entry.last_timestamp = timestamp
        if last_offset >= 0 and last_seq >= 0:
            entry.batches.append(BatchMetadata((last_seq - delta) % _SEQUENCES, last_seq,
                                               last_offset - delta, last_offset, timestamp))
    return producers
