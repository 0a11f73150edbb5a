"""The partition seam: everything a request handler may ask of one partition (Kafka's
``Partition``).

Theory of operation: handlers never touch a ``Log``. They ask the replica manager
(replica_manager.py) for a :class:`Partition` and call it: append (with the producer's
``acks``), read (with an isolation: consumers up to the high watermark, followers up to
the log end), list an offset by time (or, for ListOffsets v0, by segment), answer
OffsetForLeaderEpoch, delete records.
The partition also states its leadership -- leader, leader epoch, replicas, ISR,
offline replicas -- which Metadata reports as it is.

Today's only implementation is :class:`~kqlite.server.local_partition.LocalPartition`:
one broker, always the leader, the ISR is itself and the high watermark follows the
log end. A replicated partition implements the same interface with followers, an ISR
that shrinks and grows and a high watermark that waits for them; the handlers, the
delayed operations (purgatory.py) and the wire stay as they are.

A partition keeps the positions its last storage call observed (log start, high
watermark, log end) so that delayed operations can decide on the event loop, without
touching the disk, whether a change concerns them.
"""

import abc
import os
from dataclasses import dataclass, field

from ..protocol import ErrorCode, FileRegion
from ..storage import Isolation

__all__ = ["Partition", "PartitionError", "AppendResult", "ReadResult", "RegionBudget",
           "fetch_isolation", "CONSUMER_REPLICA_ID"]

CONSUMER_REPLICA_ID = -1   # WIRE: Kafka's ReplicaId of an ordinary consumer
DEFAULT_REGION_LIMIT = 64


def fetch_isolation(replica_id):
    """The isolation of a Fetch from ``replica_id``: followers (a broker id >= 0) read to
    the log end, consumers (-1) to the high watermark (kqlite has no transactions, so
    read_committed reads the same). The one place this is decided."""
    return Isolation.LOG_END if replica_id >= 0 else Isolation.HIGH_WATERMARK


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


@dataclass
class ReadResult:
    """The answer to one partition of a Fetch. ``records`` is a FileRegion (the caller
    owns its descriptor: send it, or :meth:`release` it), bytes, or None after an error;
    ``size`` is its length. ``budget`` is the RegionBudget the region counts against."""
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

    def release(self):
        """Close the descriptor of an unsent region and forget the records."""
        if isinstance(self.records, FileRegion):
            if self.budget is not None:
                self.budget.close(self.records)
            else:
                os.close(self.records.fd)
        self.records = b"" if self.records is not None else None
        self.size = 0

    def position(self, isolation):
        """What a delayed fetch compares with the partition's later state."""
        end = self.log_end_offset if isolation is Isolation.LOG_END else self.high_watermark
        return self.log_start_offset, end


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

    def __init__(self, topic, index):
        self.topic = topic
        self.index = index
        self.key = (topic, index)
        self.is_deleted = False
        # Positions the last storage call observed (-1: not yet known).
        self.log_start_offset = -1
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

    def fetch_position(self, isolation):
        """(log start, fetchable end) as last observed, for a delayed fetch."""
        end = self.log_end_offset if isolation is Isolation.LOG_END else self.high_watermark
        return self.log_start_offset, end

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
    async def read(self, offset, max_bytes, *, isolation=Isolation.HIGH_WATERMARK,
                   replica_id=CONSUMER_REPLICA_ID, current_leader_epoch=-1, zero_copy=True,
                   last_fetched_epoch=-1, follower_log_start_offset=-1):
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but at least
        one batch) and below the isolation's limit. Returns ReadResult, whose records are
        a FileRegion with ``zero_copy``, else bytes. A follower's fetch also carries the
        epoch of its last batch (``last_fetched_epoch``, -1: none), which may be answered
        with ``ReadResult.diverging_epoch`` instead of records, and its log start."""

    @abc.abstractmethod
    async def list_offset(self, timestamp, *, current_leader_epoch=-1,
                          isolation=Isolation.HIGH_WATERMARK):
        """ListOffsets: ``(offset, timestamp, leader_epoch)`` for a timestamp in ms or the
        special values -2 (earliest), -1 (latest) and -3 (max timestamp); the epoch is
        the one the returned offset was written in, -1 if unknown. ``isolation``: a
        replica asks with LOG_END (its latest is the log end, as Kafka answers requests
        from a replica id), a client with the high watermark. Raises PartitionError."""

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
