"""The partition seam: everything a request handler may ask of one partition (Kafka's
``Partition``).

Theory of operation: handlers never touch a ``Log``. They ask the replica manager
(replica_manager.py) for a :class:`Partition` and call it: append (with the producer's
``acks``), read (with the request's isolation, ``storage.isolation.isolation_of``:
consumers up to the high watermark, read_committed ones up to the last stable offset,
followers up to the log end), list an offset by time (or, for ListOffsets v0, by
segment), answer OffsetForLeaderEpoch, delete records.
The partition also states its leadership -- leader, leader epoch, replicas, ISR,
offline replicas -- which Metadata reports as it is.

Today's only implementation is :class:`~kqlite.server.local_partition.LocalPartition`:
one broker, always the leader, the ISR is itself and the high watermark follows the
log end. A replicated partition implements the same interface with followers, an ISR
that shrinks and grows and a high watermark that waits for them; the handlers, the
delayed operations (purgatory.py) and the wire stay as they are.

A partition keeps the positions its last storage call observed (log start, last
stable offset, high watermark, log end: an ``OffsetSnapshot``) so that delayed
operations can decide on the event loop, without touching the disk, whether a change
concerns them; which of them limits a read is ``storage.isolation.read_limit``'s to say.
"""

import abc
import os
from dataclasses import dataclass, field

from ..protocol import ErrorCode, FileRegion
from ..storage import NO_VERIFICATION, Isolation
from ..storage.isolation import READ_UNCOMMITTED, OffsetSnapshot, isolation_of, read_limit

# ``isolation_of`` and ``READ_UNCOMMITTED`` are the isolation seam's, offered here to the
# handlers, which never import storage: a request's isolation is decided there. So is
# ``NO_VERIFICATION``, the verification guard of a broker that does not verify
# transactional batches (transaction.partition.verification.enable=false).
__all__ = ["Partition", "PartitionError", "AppendResult", "ReadResult", "RegionBudget",
           "CONSUMER_REPLICA_ID", "isolation_of", "READ_UNCOMMITTED", "NO_VERIFICATION"]

CONSUMER_REPLICA_ID = -1   # WIRE: Kafka's ReplicaId of an ordinary consumer
DEFAULT_REGION_LIMIT = 64


class PartitionError(Exception):
    """A request cannot be served by this partition; ``error_code`` is Kafka's answer
    (UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, KAFKA_STORAGE_ERROR, ...)."""

    def __init__(self, error_code, message=None):
        super().__init__(message or ErrorCode(error_code).name)
        self.error_code = error_code
        self.message = message


@dataclass
class AppendResult:
    """The answer to one partition of a Produce."""
    error_code: int = ErrorCode.NONE
    base_offset: int = -1          # offset of the first record appended (or of the duplicate)
    last_offset: int = -1          # offset of the last record appended
    log_start_offset: int = -1
    error_message: str = None
    record_count: int = 0          # records and bytes written (0 for a duplicate)
    size: int = 0
    log_append_time: int = -1      # the time stamped into a LogAppendTime topic's batch
    # KIP-467: (index in the batch, message) of each record that made storage refuse it.
    record_errors: tuple = ()


@dataclass
class ReadResult:
    """The answer to one partition of a Fetch. ``records`` is a FileRegion (the caller
    owns its descriptor: send it, or :meth:`release` it), bytes, or None after an error;
    ``size`` is its length. ``budget`` is the RegionBudget the region counts against.
    The offsets are those the read saw in storage (:meth:`set_offsets`)."""
    error_code: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: object = None
    size: int = 0
    budget: object = field(default=None, repr=False)
    # (epoch, end offset) when a follower's log diverged from the leader's after that
    # epoch (Fetch v12+'s DivergingEpoch): no records, truncate first.
    diverging_epoch: tuple = None
    # [(producer id, first offset)] of the aborted transactions overlapping the records,
    # for a read under an isolation that skips aborted batches (read_committed); None for
    # any other read, and after an error (Fetch's AbortedTransactions is null then).
    aborted_transactions: list = None

    def release(self):
        """Close the descriptor of an unsent region and forget the records."""
        if isinstance(self.records, FileRegion):
            if self.budget is not None:
                self.budget.close(self.records)
            else:
                os.close(self.records.fd)
        self.records = b"" if self.records is not None else None
        self.size = 0

    def set_offsets(self, snapshot):
        """Report the offsets of ``snapshot`` (an OffsetSnapshot)."""
        self.log_start_offset, self.last_stable_offset, self.high_watermark, \
            self.log_end_offset = snapshot

    def offsets(self):
        """The offsets reported, as an OffsetSnapshot."""
        return OffsetSnapshot(self.log_start_offset, self.last_stable_offset,
                              self.high_watermark, self.log_end_offset)

    def position(self, isolation):
        """What a delayed fetch compares with the partition's later state: (log start,
        the isolation's limit)."""
        return self.log_start_offset, read_limit(
            isolation, log_end=self.log_end_offset, high_watermark=self.high_watermark,
            last_stable_offset=self.last_stable_offset)


class RegionBudget:
    """How many fetch regions may be open at once (event loop only).

    A region holds a duplicated segment descriptor from its read until its response is
    sent. A Fetch over thousands of partitions must not hold thousands of them: the
    process's limit is often 1024, most of it given to the open logs. A read that finds
    the budget spent returns the records as bytes (``Partition.read(zero_copy=False)``)."""

    def __init__(self, limit=DEFAULT_REGION_LIMIT):
        self.limit = limit
        self.held = 0

    def take(self):
        """Reserve a region; False when the budget is spent."""
        if self.held >= self.limit:
            return False
        self.held += 1
        return True

    def give_back(self):
        """Return a reservation that did not become a region."""
        self.held -= 1

    def close(self, region):
        """Close a region (sent or discarded) and return its reservation."""
        os.close(region.fd)
        self.held -= 1


class Partition(abc.ABC):
    """One partition as the broker serves it. Attributes: ``topic``, ``index``, ``key``
    (``(topic, index)``, the purgatory key) and the leadership below."""

    # Metadata's per-partition error: a served partition has none; a cluster's view of a
    # partition without a live leader answers LEADER_NOT_AVAILABLE.
    error_code = ErrorCode.NONE
    # Whether the replica manager may gather this partition's reads with others of the
    # same Fetch into one storage-thread call (LocalPartition.read_in_storage).
    gathers_reads = False
    # Whether the replica manager may gather this partition's appends with others of the
    # same Produce into one storage-thread call (LocalPartition.append_in_storage).
    gathers_appends = False

    def __init__(self, topic, index):
        self.topic = topic
        self.index = index
        self.key = (topic, index)
        self.is_deleted = False
        # Positions the last storage call observed (-1: not yet known).
        self.log_start_offset = -1
        self.last_stable_offset = -1
        self.high_watermark = -1
        self.log_end_offset = -1

    def __repr__(self):
        return f"<{type(self).__name__} {self.topic}-{self.index} epoch {self.leader_epoch}>"

    # -- Leadership (what Metadata reports) -------------------------------------------------

    @property
    @abc.abstractmethod
    def leader_id(self):
        """The broker id of the leader, -1 if there is none."""

    @property
    @abc.abstractmethod
    def leader_epoch(self):
        """The current leader epoch; stamped into every batch the leader appends."""

    @property
    @abc.abstractmethod
    def replicas(self):
        """Broker ids of the assigned replicas, preferred leader first."""

    @property
    @abc.abstractmethod
    def isr(self):
        """Broker ids of the in-sync replicas."""

    @property
    @abc.abstractmethod
    def offline_replicas(self):
        """Assigned replicas that are not online."""

    def check_leader_epoch(self, current_leader_epoch):
        """Kafka's check of a request's CurrentLeaderEpoch (-1: no check): an older epoch is
        FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (our metadata is behind)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # -- State for delayed operations (event loop only, no I/O) ------------------------------

    def offsets(self):
        """The positions last observed, as an OffsetSnapshot."""
        return OffsetSnapshot(self.log_start_offset, self.last_stable_offset,
                              self.high_watermark, self.log_end_offset)

    def fetch_position(self, isolation):
        """(log start, the isolation's limit) as last observed, for a delayed fetch (Kafka's
        DelayedFetch compares the end a fetch may read to, by its isolation)."""
        return self.log_start_offset, read_limit(
            isolation, log_end=self.log_end_offset, high_watermark=self.high_watermark,
            last_stable_offset=self.last_stable_offset)

    def follower_fetch_arrived(self, offset, replica_id, current_leader_epoch,
                               last_fetched_epoch, follower_log_start_offset):
        """A follower's Fetch names this partition at ``offset``: called for every
        partition of the request as it arrives, before any of them is read (a leader may
        hear the follower's position then). A single broker has no followers."""

    @abc.abstractmethod
    def check_enough_replicas_reach_offset(self, offset):
        """(done, error_code) for a delayed acks=-1 produce needing ``offset`` committed:
        done once the high watermark reaches it (or the partition is gone)."""

    # -- Storage operations (run off the event loop) -----------------------------------------

    @abc.abstractmethod
    async def append(self, records, *, acks, timeout_ms, verification_guard=None):
        """Validate and append a Produce's record batches as leader; with ``acks=-1`` return
        only once they are committed (or ``timeout_ms`` passed). Returns AppendResult.
        ``verification_guard``: what :meth:`begin_verification` gave for a transactional
        batch, which storage checks is still current (KIP-890)."""

    @abc.abstractmethod
    async def append_as_mirror(self, records, *, timeout_ms):
        """Append an offset-preserving mirror's batches at their own offsets (mirror_append.py);
        returns AppendResult once they are committed (a replicated leader waits, at most
        ``timeout_ms``, until its high watermark covers them, as for ``acks=-1``)."""

    @abc.abstractmethod
    async def append_as_coordinator(self, records, *, acks, timeout_ms, verification_guard=None):
        """:meth:`append` of the broker's own batches (a transactional offset commit of the
        group coordinator): validated as Kafka's COORDINATOR origin, no sequence checked."""

    @abc.abstractmethod
    async def append_marker(self, producer_id, producer_epoch, coordinator_epoch, commit, *,
                            timeout_ms):
        """Append a transaction's COMMIT (``commit`` true) or ABORT marker as
        WriteTxnMarkers does (acks=-1); AppendResult, with INVALID_PRODUCER_EPOCH or
        TRANSACTION_COORDINATOR_FENCED when storage refuses it."""

    @abc.abstractmethod
    async def begin_verification(self, producer_id, sequence, epoch):
        """KIP-890 part 1: the guard to append a producer's first transactional batch here
        with, once its transaction coordinator confirmed the partition; None when the
        producer's transaction is open here already. Raises PartitionError."""

    @abc.abstractmethod
    async def read(self, offset, max_bytes, *, isolation=Isolation.HIGH_WATERMARK,
                   replica_id=CONSUMER_REPLICA_ID, current_leader_epoch=-1, zero_copy=True,
                   last_fetched_epoch=-1, follower_log_start_offset=-1):
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but at least
        one batch) and below the isolation's limit (``isolation``: the request's, from
        ``storage.isolation.isolation_of``; a follower's, with its ``replica_id``, is
        LOG_END). Returns ReadResult, whose records are a FileRegion with ``zero_copy``,
        else bytes. A follower's fetch also carries the epoch of its last batch
        (``last_fetched_epoch``, -1: none), which may be answered with
        ``ReadResult.diverging_epoch`` instead of records, and its log start."""

    @abc.abstractmethod
    async def list_offset(self, timestamp, *, current_leader_epoch=-1,
                          isolation=Isolation.HIGH_WATERMARK):
        """ListOffsets: ``(offset, timestamp, leader_epoch)`` for a timestamp in ms or the
        special values -2 (earliest), -1 (latest) and -3 (max timestamp); the epoch is
        the one the returned offset was written in, -1 if unknown. ``isolation`` (the
        request's, ``storage.isolation.isolation_of``) limits latest and a timestamp's
        match, as Kafka's fetchOffsetForTimestamp: a replica's latest is the log end
        (LOG_END), a client's the high watermark or, read_committed, the last stable
        offset. Raises PartitionError."""

    @abc.abstractmethod
    async def legacy_offsets(self, timestamp, max_num_offsets, *, from_consumer):
        """ListOffsets v0: up to ``max_num_offsets`` offsets by segment for ``timestamp``
        (-1, -2 or ms), largest first; a consumer's are capped at the high watermark
        (storage/legacy_offsets.py). Raises PartitionError, or ValueError for a negative
        ``max_num_offsets``."""

    @abc.abstractmethod
    async def active_producers(self):
        """DescribeProducers: ``[(producer id, epoch, last sequence, last timestamp)]``."""

    @abc.abstractmethod
    async def end_offset_for_epoch(self, epoch, *, current_leader_epoch=-1):
        """OffsetForLeaderEpoch: ``(largest epoch <= epoch, the offset where it ends)``.
        Raises PartitionError."""

    @abc.abstractmethod
    async def delete_records(self, offset):
        """DeleteRecords: move the log start up to ``offset`` (-1: the high watermark);
        returns the new log start offset. Raises PartitionError."""

    @abc.abstractmethod
    async def refresh(self):
        """Re-read the positions from storage (another process may have appended), and
        notify the delayed operations if they changed."""
