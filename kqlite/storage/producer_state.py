"""Producer state beside a partition's log: Kafka's ProducerStateManager, with transactions.

Theory of operation
-------------------
*Idempotence.* An idempotent producer numbers the batches it sends to a partition:
``baseSequence`` starts at 0 and grows by the batch's offset span (wrapping after
2**31 - 1), under a producer id and an epoch that a restarted producer bumps. For
each producer id the partition remembers the epoch and the last five batches
appended (Kafka's NUM_BATCHES_TO_RETAIN: a producer keeps at most five requests in
flight), as :class:`BatchMetadata`.

*Transactions.* A transactional producer's batches carry the transactional bit; the
first one on this partition opens its transaction here, whose first offset the entry
keeps (``current_txn_first_offset``, Kafka's currentTxnFirstOffset) and the manager
lists among the *ongoing* transactions. The transaction ends with a marker, a control
batch appended for the coordinator (format/control_records.py): it clears the entry's
transaction, records the coordinator's epoch (``coordinator_epoch``) and, when a
transaction was open, yields a :class:`CompletedTxn`. The log then writes an
``AbortedTxn`` to the ``.txnindex`` for an ABORT (its last stable offset from
:meth:`last_stable_offset`) and hands the transaction to :meth:`complete_txn`, which
moves it to the *unreplicated* ones until the high watermark passes its marker. The
*first unstable offset* (:meth:`first_unstable_offset`) is the smallest first offset of
both kinds: read_committed readers stop there (isolation.py).

:meth:`check` judges an incoming batch against that memory, in Kafka's order
(UnifiedLog.analyzeAndValidateProducerState, ProducerAppendInfo), the first failure
raised:

======================================================  ===========  ==========================
rule                                                    origins      outcome
======================================================  ===========  ==========================
a CLIENT retry of one of the producer's last five       C            its BatchMetadata: nothing
batches (same epoch, same first and last sequence)                   is written, the producer
                                                                     gets the first offsets
a transactional data batch of a producer without an     C, K         InvalidTxnStateError
open transaction (of that epoch), without the current                (INVALID_TXN_STATE)
verification guard (KIP-890 part 1)
an epoch older than the producer's                      C, K         InvalidProducerEpochError
                                                        (R: logged)  (INVALID_PRODUCER_EPOCH)
a marker from a coordinator epoch older than the one    C, K         TransactionCoordinator-
that last ended a transaction of this producer                       FencedError (TRANSACTION_
                                                        (R: logged)  COORDINATOR_FENCED)
a CLIENT data batch whose first sequence is above the   C            OutOfOrderSequenceError
lowest its verification saw
a new epoch not starting at sequence 0, the same epoch  C            OutOfOrderSequenceError
not continuing at the last sequence + 1 (an unknown                  (OUT_OF_ORDER_SEQUENCE_
producer may start anywhere: its batches may be gone)                NUMBER)
a non-transactional data batch while the producer's     every        InvalidTxnStateError
transaction is open                                     origin
======================================================  ===========  ==========================

(C = CLIENT, K = COORDINATOR, R = REPLICATION; LOCAL appends, the application's own,
are judged by the last rule only. A marker with no open transaction is legal and only
moves the epochs, Kafka's testSkipEmptyTransactions; a control batch compaction
emptied changes nothing.) :meth:`check_all` judges several batches of one append in
turn, each against the state the ones before it would leave.

*Verification* (KIP-890 part 1): before appending a producer's first transactional
batch on this partition, the broker asks :meth:`begin_verification` for a guard (None
when that producer's transaction of that epoch is open already: nothing to verify),
asks the transaction coordinator whether the partition is in the transaction, and
appends with the guard; the append passes only while the guard is still the current
one, which the first transactional batch or marker of that producer clears. A broker
that does not verify (``transaction.partition.verification.enable=false``) appends
with :data:`NO_VERIFICATION`.

The state is a function of the log's batches (their headers, and a marker's record),
so it can always be rebuilt by replaying them; snapshots make that cheap.
:meth:`take_snapshot` writes ``<offset>.snapshot`` describing the state after every
batch below ``offset``; :meth:`load` starts from the newest readable snapshot in
[log start, log end] and replays only the batches after it (as Kafka's replay does,
with REPLICATION's leniency: nothing is refused). A snapshot that fails its version,
CRC or size checks is logged, deleted and the next older one tried; with none left
the whole log is replayed. Snapshots do not store unreplicated transactions (Kafka's
neither): a reload knows them again only by replaying their markers.

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
      coordinator_epoch       int32   the last marker's, -1 before any
      current_txn_first_offset int64  the open transaction's first offset, -1 for none

Kafka writes one entry per producer (its latest batch). kqlite writes one entry
per remembered batch, oldest first, each with the producer's epoch, coordinator
epoch and open transaction, so that the duplicate window survives a restart:
Kafka's reader keeps the last entry of each producer id, which is exactly the
entry Kafka would have written, and this reader takes a Kafka file as a window of
one batch. A loaded entry with a current_txn_first_offset is an ongoing
transaction again.

Integration contract (one manager per partition directory, owned by the Log;
every call under the log's write lock, by the process that writes the log, since
loading and truncating delete snapshot files):

* open: ``ProducerStateManager.load(dir, log_start, log_end, batches, fs=log.fs)``;
  ``batches(offset)`` yields ``(header, marker)`` for the batches from the one holding
  ``offset`` to the end: each header a :class:`kqlite.format.BatchHeader`, the marker
  the :class:`~kqlite.format.control_records.EndTransactionMarker` of a control batch
  of a producer (None for any other batch, and for an emptied control batch);
* append: ``check(batch, origin, guard, marker)`` (``check_all`` for several batches)
  before writing (an exception: write nothing; a BatchMetadata: a duplicate, write
  nothing and answer with its offsets), then ``update(batch, first_offset, marker)``
  for every batch written, idempotent or not, with the base offset the log gave it;
  a CompletedTxn it returns goes to ``last_stable_offset`` (for the ``.txnindex``
  entry of an abort), then to ``complete_txn``; ``advance(log_end)`` after batches
  built without producer fields (``Log.append``), so that :attr:`end_offset` follows
  the log end;
* roll: ``take_snapshot(new_segment_base_offset)``; close: ``take_snapshot()``;
* truncation at the end (recovery, replication): ``truncate(log_start, log_end,
  batches)``; the whole log replaced: ``truncate_fully(new_start)``;
* log start moved (retention, DeleteRecords): ``on_log_start_moved(log_start)``;
* another process appended or truncated (the log's refresh saw a new end):
  ``catch_up(log_start, log_end, batches)`` before ``check``;
* the high watermark: ``first_unstable_offset(high_watermark)`` forgets the
  unreplicated transactions whose marker it passed (Kafka's onHighWatermarkUpdated).

Differences from Kafka: LOCAL appends (the application's own) are judged only by
the open-transaction rule; a producer without batches (left by a control batch)
must restart at sequence 0, as in Kafka. Producer ids expire only when
:meth:`remove_expired` is called (Kafka: producer.id.expiration.ms, one day by
default, checked every ten minutes); a producer with an open transaction never
expires. The verification guards are the process's own, in memory, as Kafka's.
"""

import logging
import os
import re
import struct
from collections import deque
from typing import NamedTuple

from .. import _native
from ..errors import (InvalidProducerEpochError, InvalidTxnStateError, KqliteError,
                      OutOfOrderSequenceError, TransactionCoordinatorFencedError)
from ..format.constants import CONTROL_MASK, TRANSACTIONAL_MASK
from ..format.validate import AppendOrigin
from .fs import DEFAULT_FS, atomic_write

__all__ = ["ProducerStateManager", "ProducerEntry", "BatchMetadata", "CompletedTxn",
           "VerificationGuard", "NO_VERIFICATION", "KEEP_BATCHES", "KEEP_SNAPSHOTS",
           "SNAPSHOT_SUFFIX", "snapshot_name", "encode_snapshot", "decode_snapshot",
           "CorruptSnapshotError"]

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
_CLIENT = AppendOrigin.CLIENT
_COORDINATOR = AppendOrigin.COORDINATOR
_REPLICATION = AppendOrigin.REPLICATION
_VERIFIED = (_CLIENT, _COORDINATOR)         # the origins KIP-890's guard applies to
_new = tuple.__new__
_FENCING = (_CLIENT, _COORDINATOR)          # the origins whose stale epochs are refused


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


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn): its producer, first offset,
    the marker's offset and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class VerificationGuard:
    """KIP-890 part 1's proof that the coordinator was asked about a producer's
    transaction on this partition (Kafka's VerificationGuard and VerificationStateEntry):
    only identity counts; it also keeps the lowest sequence and the newest epoch its
    verifications saw."""

    __slots__ = ("producer_id", "lowest_sequence", "epoch", "created_ms")

    def __init__(self, producer_id, sequence, epoch, created_ms):
        self.producer_id = producer_id
        self.lowest_sequence = sequence
        self.epoch = epoch
        self.created_ms = created_ms

    def saw(self, sequence, epoch):
        """Another verification of the same producer (Kafka's
        maybeUpdateLowestSequenceAndEpoch): a newer epoch starts over, the same epoch
        keeps the lower sequence."""
        if epoch > self.epoch:
            self.lowest_sequence, self.epoch = sequence, epoch
        elif epoch == self.epoch:
            self.lowest_sequence = min(sequence, self.lowest_sequence)

    def __repr__(self):
        return (f"VerificationGuard(producer_id={self.producer_id}, epoch={self.epoch}, "
                f"lowest_sequence={self.lowest_sequence}, id=0x{id(self):x})")


class _NoVerification:
    """The guard of an append by a broker that does not verify transactions."""

    __slots__ = ()

    def __repr__(self):
        return "NO_VERIFICATION"


NO_VERIFICATION = _NoVerification()


class ProducerEntry:
    """A producer id's epoch, its newest batches (oldest first), the coordinator epoch of
    its last marker and the first offset of its open transaction (-1 for none)."""

    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "coordinator_epoch",
                 "current_txn_first_offset")

    def __init__(self, producer_id, epoch, batches=(), last_timestamp=-1, coordinator_epoch=-1,
                 current_txn_first_offset=-1):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches = deque(batches, maxlen=KEEP_BATCHES)
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_data_offset(self):
        """The last offset of the producer's newest remembered batch, -1 for none."""
        return self.batches[-1].last_offset if self.batches else -1

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

    def copy(self):
        return ProducerEntry(self.producer_id, self.epoch, self.batches, self.last_timestamp,
                             self.coordinator_epoch, self.current_txn_first_offset)

    def __repr__(self):
        return (f"ProducerEntry(producer_id={self.producer_id}, epoch={self.epoch}, "
                f"batches={list(self.batches)}, last_timestamp={self.last_timestamp}, "
                f"coordinator_epoch={self.coordinator_epoch}, "
                f"current_txn_first_offset={self.current_txn_first_offset})")


class CorruptSnapshotError(KqliteError):
    """Bytes that are not a readable version-1 snapshot (load skips such a file)."""


class ProducerStateManager:
    """The producer state of one partition directory; see the module docstring.

    ``producers`` maps producer id to :class:`ProducerEntry`; ``end_offset`` is the
    offset after the last batch the state includes (Kafka's mapEndOffset); ``ongoing``
    maps the first offset of each undecided transaction to its producer id,
    ``unreplicated`` the first offset of each decided one whose marker the high
    watermark has not passed to ``(producer id, marker offset)``."""

    def __init__(self, directory, *, fs=DEFAULT_FS, keep_snapshots=KEEP_SNAPSHOTS,
                 durable=True):
        if keep_snapshots < 1:
            raise ValueError(f"keep_snapshots must be at least 1, not {keep_snapshots}")
        self.directory = directory
        self.fs = fs
        self.keep_snapshots = keep_snapshots
        self.durable = durable
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = {}
        self.verifications = {}
        self.end_offset = 0

    @classmethod
    def load(cls, directory, log_start, log_end, batches, *, prune=True, **options):
        """A manager for ``directory`` holding the state of the log [log_start, log_end).
        ``prune=False`` leaves every snapshot file in place (a state built to rebuild one
        segment's transaction index, at open)."""
        manager = cls(directory, **options)
        manager.reload(log_start, log_end, batches, prune=prune)
        return manager

    # -- judging appends -----------------------------------------------------------------------

    def check(self, batch, origin=_CLIENT, verification_guard=None, marker=None):
        """Judge ``batch`` (a BatchHeader; ``marker`` its EndTransactionMarker if it is a
        control batch) before it is appended by ``origin`` with ``verification_guard``:
        None to append it, the BatchMetadata of the batch it duplicates, or raise (the
        table of the module docstring)."""
        pid = batch[9]
        if pid < 0:
            return None
        if origin.__class__ is not AppendOrigin:
            origin = AppendOrigin(origin)
        return self._judge(self.producers.get(pid), batch, origin, verification_guard, marker)

    def check_all(self, batches, origin=_CLIENT, verification_guard=None, markers=None):
        """:meth:`check` for the batches of one append (no duplicate answer: only a CLIENT
        append, one batch, may be a retry), each judged against the state the batches
        before it would leave. Nothing is changed."""
        origin = AppendOrigin(origin)
        scratch = {}
        guards = dict(self.verifications)
        for i, batch in enumerate(batches):
            pid = batch.producer_id
            if pid < 0:
                continue
            marker = markers[i] if markers else None
            entry = scratch.get(pid) or self.producers.get(pid)
            self._judge(entry, batch, origin, verification_guard, marker, guards)
            entry = entry.copy() if entry is not None else \
                ProducerEntry(pid, batch.producer_epoch)
            _learn(entry, batch, batch.base_offset, batch.last_offset, marker)
            scratch[pid] = entry
            if batch.is_transactional:
                guards.pop(pid, None)

    def _judge(self, entry, batch, origin, guard, marker, guards=None):
        # The header's fields by index: this runs for every batch of every producer.
        attributes, pid, epoch, first_seq = batch[5], batch[9], batch[10], batch[11]
        if attributes & CONTROL_MASK:
            if marker is not None:
                _check_epoch(entry, pid, epoch, origin)
                _check_coordinator_epoch(entry, pid, marker, origin)
            return None
        if entry is not None and origin is _CLIENT and first_seq >= 0 \
                and epoch == entry.epoch:
            duplicate = entry.find(first_seq, (first_seq + batch[6]) % _SEQUENCES)
            if duplicate is not None:
                return duplicate
        transactional = attributes & TRANSACTIONAL_MASK
        if transactional and origin in _VERIFIED and not _has_ongoing(entry, epoch) \
                and not _verified(guards if guards is not None else self.verifications,
                                  pid, guard):
            # UnifiedLog.analyzeAndValidateProducerState, KIP-890 part 1.
            raise InvalidTxnStateError(
                f"a transactional batch of producer {pid} (epoch {epoch}) was not part of "
                f"an ongoing transaction: the coordinator did not verify that this "
                f"partition is in it")
        if entry is not None and epoch < entry.epoch:
            _check_epoch(entry, pid, epoch, origin)
        if origin is _CLIENT and first_seq >= 0:
            self._check_sequence(entry, pid, epoch, first_seq)
        if entry is not None and entry.current_txn_first_offset >= 0 and not transactional:
            # ProducerAppendInfo.appendDataBatch, whatever the origin.
            raise InvalidTxnStateError(
                f"producer {pid} sent a non-transactional batch while its transaction "
                f"(from offset {entry.current_txn_first_offset}) is open")
        return None

    def _check_sequence(self, entry, pid, epoch, first_seq):
        guard = self.verifications.get(pid) if self.verifications else None
        if guard is not None and first_seq > guard.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"producer {pid} (epoch {epoch}) sent sequence {first_seq}, above the "
                f"lowest sequence {guard.lowest_sequence} its verification saw",
                pid, epoch, first_seq, guard.lowest_sequence)
        if entry is None:
            return
        if epoch > entry.epoch:
            if first_seq != 0 and entry.epoch >= 0:     # a known epoch was left behind
                raise OutOfOrderSequenceError(
                    f"producer {pid} starts its new epoch {epoch} at sequence "
                    f"{first_seq}; a new epoch starts at 0", pid, epoch, first_seq, 0)
            return
        expected = (entry.last_seq + 1) % _SEQUENCES
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid} (epoch {epoch}) sent sequence {first_seq}, but the "
                f"next expected is {expected}", pid, epoch, first_seq, expected)

    # -- learning appends ----------------------------------------------------------------------

    def update(self, batch, first_offset=None, marker=None):
        """Learn a batch written at ``first_offset`` (default: its own base offset);
        ``marker`` is a control batch's EndTransactionMarker (None for an emptied one).
        Returns the CompletedTxn of a marker that ended an open transaction, else None;
        the caller then passes it to :meth:`complete_txn`."""
        first = batch[0] if first_offset is None else first_offset
        last = first + batch[6]
        self.end_offset = last + 1
        producer_id = batch[9]
        if producer_id < 0:
            return None
        attributes = batch[5]
        if attributes & CONTROL_MASK:
            if marker is None:
                if batch[12]:
                    raise ValueError(f"the control batch at offset {first} needs its marker")
                return None
            entry = self.producers.get(producer_id)
            if entry is None:
                entry = self.producers[producer_id] = ProducerEntry(producer_id, batch[10])
            self.verifications.pop(producer_id, None)
            return _learn(entry, batch, first, last, marker)
        # ProducerAppendInfo.appendDataBatch, the common case inline.
        entry = self.producers.get(producer_id)
        epoch = batch[10]
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        timestamp = entry.last_timestamp = batch[8]
        seq = batch[11]
        if seq >= 0:
            entry.batches.append(_new(BatchMetadata, (seq, (seq + batch[6]) % _SEQUENCES,
                                                      first, last, timestamp)))
        if attributes & TRANSACTIONAL_MASK:
            # Started or continued: the transaction's state replaces the guard.
            self.verifications.pop(producer_id, None)
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = first
                self.ongoing[first] = producer_id
        return None

    def complete_txn(self, completed):
        """The transaction ``completed`` is decided (its marker and index entry written):
        it leaves the ongoing transactions for the unreplicated ones (Kafka's
        completeTxn)."""
        if self.ongoing.pop(completed.first_offset, None) is None:
            raise ValueError(f"transaction {completed} was not started")
        self.unreplicated[completed.first_offset] = (completed.producer_id,
                                                     completed.last_offset)

    def last_stable_offset(self, completed):
        """The last stable offset recorded with the ``.txnindex`` entry of ``completed``
        (Kafka's ``lastStableOffset(completedTxn)``): the first offset of the earliest
        ongoing transaction of another producer, else the marker's offset + 1."""
        for first in sorted(self.ongoing):
            if self.ongoing[first] != completed.producer_id:
                return first
        return completed.last_offset + 1

    def first_unstable_offset(self, high_watermark=None):
        """The first offset of the earliest transaction that is undecided, or decided with
        its marker at or past ``high_watermark`` (Kafka's firstUnstableOffset, after
        onHighWatermarkUpdated forgot those whose marker is below it); None when there is
        none."""
        unreplicated = self.unreplicated
        if unreplicated and high_watermark is not None:
            for first in [f for f, (_p, last) in unreplicated.items() if last < high_watermark]:
                del unreplicated[first]
        if not self.ongoing:
            return min(unreplicated) if unreplicated else None
        first = min(self.ongoing)
        return min(first, min(unreplicated)) if unreplicated else first

    def has_ongoing(self, producer_id, epoch):
        """Whether ``producer_id`` has a transaction of ``epoch`` open here (Kafka's
        UnifiedLog.hasOngoingTransaction)."""
        return _has_ongoing(self.producers.get(producer_id), epoch)

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``[(producer id, first offset)]`` of the undecided transactions, oldest first."""
        return [(self.ongoing[first], first) for first in sorted(self.ongoing)]

    def begin_verification(self, producer_id, sequence, epoch, now_ms=0):
        """The guard an append of ``producer_id``'s first transactional batch here must
        carry (Kafka's maybeStartTransactionVerification): None when its transaction of
        ``epoch`` is open already (nothing to verify), else the producer's current guard,
        made at its first verification and kept until its first transactional batch or
        marker lands."""
        if self.has_ongoing(producer_id, epoch):
            return None
        guard = self.verifications.get(producer_id)
        if guard is None:
            guard = self.verifications[producer_id] = VerificationGuard(
                producer_id, sequence, epoch, now_ms)
        else:
            guard.saw(sequence, epoch)
        return guard

    def advance(self, end_offset):
        """Batches without producer state (``Log.append``'s) now end the log at
        ``end_offset``: cheaper than :meth:`update` for each of them."""
        if end_offset > self.end_offset:
            self.end_offset = end_offset

    def remove_expired(self, now_ms, expiration_ms):
        """Forget producers whose last batch is ``expiration_ms`` or more older than
        ``now_ms`` (Kafka's producer.id.expiration.ms), unless their transaction is open,
        and verification guards as old; returns how many producers went."""
        expired = [pid for pid, entry in self.producers.items()
                   if entry.current_txn_first_offset < 0
                   and now_ms - entry.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        for pid in [pid for pid, guard in self.verifications.items()
                    if now_ms - guard.created_ms >= expiration_ms]:
            del self.verifications[pid]
        return len(expired)

    # -- loading and truncation ----------------------------------------------------------------

    def reload(self, log_start, log_end, batches, prune=True):
        """Rebuild the state of the log [log_start, log_end): the newest readable
        snapshot in that range, then the batches after it. Snapshots outside the range,
        or unreadable, are deleted unless ``prune`` is False."""
        if prune:
            self._remove_leftovers()
        self.producers, self.ongoing, self.unreplicated = {}, {}, {}
        start = None
        for offset in sorted(self.snapshot_offsets(), reverse=True):
            if offset > log_end or offset < log_start:
                if prune:
                    self._delete_snapshot(offset)   # describes truncated or deleted batches
            elif start is None:
                try:
                    self.producers = self._read_snapshot(offset)
                except CorruptSnapshotError as exc:
                    log.warning("producer snapshot %s is unusable (%s); trying an older one",
                                self._path(offset), exc)
                    if prune:
                        self._delete_snapshot(offset)
                else:
                    start = offset
        self.ongoing = {e.current_txn_first_offset: pid for pid, e in self.producers.items()
                        if e.current_txn_first_offset >= 0}
        self._replay(log_start if start is None else start, log_end, batches)

    def catch_up(self, log_start, log_end, batches):
        """Follow a log that changed behind this manager's back (another process appended
        or truncated): replay the batches in [end_offset, log_end), or reload when the
        log now ends before :attr:`end_offset`."""
        if log_end < self.end_offset:
            self.reload(log_start, log_end, batches)
            return
        if log_end > self.end_offset:
            self._replay(self.end_offset, log_end, batches)
        self.on_log_start_moved(log_start)

    def _replay(self, start, log_end, batches):
        """Learn the batches of [start, log_end), as a follower would (nothing refused)."""
        self.end_offset = start
        for header, marker in batches(start):
            if header.base_offset >= log_end:
                break
            if header.last_offset >= start:
                completed = self.update(header, marker=marker)
                if completed is not None:
                    self.complete_txn(completed)
        self.end_offset = log_end

    def truncate(self, log_start, log_end, batches):
        """The log now holds [log_start, log_end): forget batches at or after
        ``log_end`` (reloading from a snapshot) and snapshots outside the range."""
        if log_end == self.end_offset:
            self.on_log_start_moved(log_start)
            for offset in self.snapshot_offsets():
                if offset > log_end:
                    self._delete_snapshot(offset)
            return
        self.reload(log_start, log_end, batches)

    def truncate_fully(self, offset):
        """The log was emptied and restarts at ``offset``: no producer, no transaction,
        no snapshot."""
        for old in self.snapshot_offsets():
            self._delete_snapshot(old)
        self.producers, self.ongoing, self.unreplicated = {}, {}, {}
        self.end_offset = offset

    def on_log_start_moved(self, log_start):
        """Segments below ``log_start`` were deleted: their snapshots go too, and so do the
        unreplicated transactions whose marker went (Kafka's
        onLogStartOffsetIncremented). Ongoing transactions stay: the log clamps the first
        unstable offset to its start."""
        self.delete_snapshots_before(log_start)
        for first in [f for f, (_p, last) in self.unreplicated.items() if last < log_start]:
            del self.unreplicated[first]
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


# -- the rules, one function each ------------------------------------------------------------

def _has_ongoing(entry, epoch):
    return entry is not None and entry.current_txn_first_offset >= 0 and entry.epoch == epoch


def _verified(guards, producer_id, guard):
    """Whether ``guard`` lets a producer's first transactional batch in (Kafka's
    VerificationGuard.verify): a broker that does not verify, or the producer's current
    guard itself."""
    if guard is NO_VERIFICATION:
        return True
    return guard is not None and guards.get(producer_id) is guard


def _check_epoch(entry, pid, epoch, origin):
    """ProducerAppendInfo.checkProducerEpoch: an epoch older than the producer's is a
    zombie's; a follower only logs it (its leader judged the batch)."""
    if entry is None or epoch >= entry.epoch:
        return
    if origin in _FENCING:
        raise InvalidProducerEpochError(
            f"producer {pid} sent epoch {epoch}, older than its current epoch "
            f"{entry.epoch}: a newer instance of this producer has fenced it",
            pid, epoch, entry.epoch)
    if origin is _REPLICATION:
        log.warning("producer %d's batch has epoch %d, older than its current epoch %d",
                    pid, epoch, entry.epoch)


def _check_coordinator_epoch(entry, pid, marker, origin):
    """ProducerAppendInfo.checkCoordinatorEpoch: a marker from an older coordinator than
    the last one is a zombie coordinator's (-1 stands for a producer without markers)."""
    current = -1 if entry is None else entry.coordinator_epoch
    if current <= marker.coordinator_epoch:
        return
    if origin in _FENCING:
        raise TransactionCoordinatorFencedError(
            f"the {marker.name} marker of producer {pid} comes from coordinator epoch "
            f"{marker.coordinator_epoch}, older than the current {current}: a zombie "
            f"coordinator", pid, marker.coordinator_epoch, current)
    if origin is _REPLICATION:
        log.info("producer %d's marker has coordinator epoch %d, older than %d", pid,
                 marker.coordinator_epoch, current)


def _learn(entry, batch, first, last, marker):
    """Apply a batch written at [first, last] to its producer's ``entry``; the
    CompletedTxn of a marker that ended an open transaction, else None."""
    if batch.is_control:
        # ProducerAppendInfo.appendEndTxnMarker.
        completed = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(entry.producer_id, entry.current_txn_first_offset, first,
                                     marker.is_abort)
        entry.set_epoch(batch.producer_epoch)
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = batch.max_timestamp
        return completed
    # ProducerAppendInfo.appendDataBatch.
    entry.set_epoch(batch.producer_epoch)
    entry.last_timestamp = batch.max_timestamp
    if batch.base_sequence >= 0:
        entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence, first,
                                           last, batch.max_timestamp))
    if entry.current_txn_first_offset < 0 and batch.is_transactional:
        entry.current_txn_first_offset = first
    return None


# -- the snapshot file -------------------------------------------------------------------------

def encode_snapshot(producers):
    """The bytes of a snapshot file holding ``producers`` ({id: ProducerEntry})."""
    entries = []
    for producer_id, entry in producers.items():
        txn, coordinator = entry.current_txn_first_offset, entry.coordinator_epoch
        if not entry.batches:
            entries.append(_ENTRY.pack(producer_id, entry.epoch, -1, -1, 0,
                                       entry.last_timestamp, coordinator, txn))
        for b in entry.batches:
            entries.append(_ENTRY.pack(producer_id, entry.epoch, b.last_seq, b.last_offset,
                                       b.last_offset - b.first_offset, b.timestamp,
                                       coordinator, txn))
    body = _COUNT.pack(len(entries)) + b"".join(entries)
    return _HEAD.pack(SNAPSHOT_VERSION, _native.crc32c(body)) + body


def decode_snapshot(data):
    """{producer id: ProducerEntry} from a snapshot file's bytes; CorruptSnapshotError
    when they are not a version-1 snapshot with a correct CRC. A producer's coordinator
    epoch and open transaction are its last entry's."""
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
    for (producer_id, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch,
         txn_first_offset) in _ENTRY.iter_unpack(memoryview(data)[_HEAD.size + _COUNT.size:]):
        entry = producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = producers[producer_id] = ProducerEntry(producer_id, epoch)
        entry.last_timestamp = timestamp
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = txn_first_offset
        if last_offset >= 0 and last_seq >= 0:
            entry.batches.append(BatchMetadata((last_seq - delta) % _SEQUENCES, last_seq,
                                               last_offset - delta, last_offset, timestamp))
    return producers
