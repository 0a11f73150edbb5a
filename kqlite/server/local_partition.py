"""LocalPartition: the single-broker implementation of the partition seam.

Theory of operation: this broker is the only replica, so it is always the leader, the
ISR is itself, and the high watermark follows the log end (every record is committed
once appended); the last stable offset is storage's (the high watermark, until kqlite
has transactions). The leader epoch is the one the partition's leader-epoch cache last
recorded (0 for a new partition): a data dir that once belonged to a replicated cluster
keeps its epochs monotonic. Every batch the broker appends is stamped with that epoch
(``Log.append_as_leader(..., leader_epoch=)``), which also records it in the cache. A
mirror topic's batches keep the source's epochs (mirror_append.py), and the partition's
epoch rises to the largest one copied, so that the cache never goes back once the topic
is promoted and this broker stamps its own.

The object holds no ``Log``: each storage operation leases the partition's log from
the Database for its duration, inside a storage thread (storage_io.py), so a broker
over thousands of partitions keeps only the logs in use open. After each operation the
positions it saw (log start, high watermark, log end) are folded into the partition's
own, on the event loop; a change notifies the replica manager, which retries the
delayed produces and fetches watching this partition (purgatory.py). Each read, and
ListOffsets' latest offset, stops at the limit of the request's isolation among the
positions the same call saw (``storage.isolation.read_limit``).

The cluster's replicated partition (kqlite/cluster/replica/partition.py) extends this
class: it overrides ``_lease`` (each lease pins its high watermark), ``observe`` and the
leadership properties, and runs its work through the storage calls here
(``_storage_call``, ``_append_as_leader``, ``_read_checked``). Those read the epoch
through the ``leader_epoch`` property, which the replicated partition answers from its
role.
"""

import logging
import os
from typing import NamedTuple

from ..errors import (CorruptRecordError, InvalidProducerEpochError, InvalidRecordError,
                      InvalidTimestampError, InvalidTxnStateError, KqliteError, LogFailedError,
                      OffsetOutOfRangeError, OutOfOrderSequenceError, RecordTooLargeError,
                      TransactionCoordinatorFencedError, UnknownTopicError,
                      UnsupportedCodecError)
from ..format.batch import now_ms
from ..format.control_records import CONTROL_BATCH_SIZE
from ..format.validate import AppendOrigin
from ..protocol import ErrorCode, FileRegion
from ..storage import Isolation
from ..storage.isolation import OffsetSnapshot
from ..storage.leader_epoch import LeaderEpochCache
from ..storage.legacy_offsets import legacy_offsets_before
from .divergence import diverging_epoch_for
from .mirror_append import MirrorRefusal, append_mirrored, refuse_producer
from .partition import CONSUMER_REPLICA_ID, AppendResult, Partition, PartitionError, ReadResult
from .purgatory import DelayedProduce

__all__ = ["LocalPartition", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP"]

# WIRE: ListOffsets' special timestamps.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

# Storage's refusals of a produced batch, as Kafka answers them (nothing was written).
_REFUSALS = {
    InvalidTimestampError: ErrorCode.INVALID_TIMESTAMP,     # before its base class
    InvalidRecordError: ErrorCode.INVALID_RECORD,
    CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
    RecordTooLargeError: ErrorCode.MESSAGE_TOO_LARGE,
    UnsupportedCodecError: ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    InvalidTxnStateError: ErrorCode.INVALID_TXN_STATE,
    OutOfOrderSequenceError: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    InvalidProducerEpochError: ErrorCode.INVALID_PRODUCER_EPOCH,
    TransactionCoordinatorFencedError: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
}

logger = logging.getLogger("kqlite.server")


class _MarkerAppended(NamedTuple):
    """What appending one marker (or a mirror's batches) did, as Log.append_as_leader's
    AppendInfo says it."""
    first_offset: int
    last_offset: int
    record_count: int = 1
    duplicate: bool = False
    log_append_time: int = -1


class LocalPartition(Partition):
    """A partition of this broker's data dir, led by this broker alone."""

    def __init__(self, db, io, topic, index, *, broker_id, leader_epoch, delayed_produce,
                 on_change):
        super().__init__(topic, index)
        self._db = db
        self._io = io
        self._broker_id = broker_id
        self._leader_epoch = leader_epoch
        self._delayed_produce = delayed_produce
        self._on_change = on_change

    @staticmethod
    def initial_leader_epoch(db, topic, index):
        """The epoch to lead ``topic-index`` with: the latest in its leader-epoch cache, at
        least 0. Reads only the checkpoint file (opening the log could mean recovering it,
        which Metadata must not cost); call it in a storage thread."""
        # ON-DISK: Kafka's <topic>-<partition> directory name.
        directory = os.path.join(db.path, f"{topic}-{index}")
        try:
            return max(0, LeaderEpochCache(db.fs, directory).latest_epoch)
        except (KqliteError, OSError) as exc:
            logger.warning("%s-%d: cannot read the leader-epoch cache (%s); leading with "
                           "epoch 0", topic, index, exc)
            return 0

    # -- Leadership -------------------------------------------------------------------------

    @property
    def leader_id(self):
        return self._broker_id

    @property
    def leader_epoch(self):
        return self._leader_epoch

    @property
    def replicas(self):
        return [self._broker_id]

    @property
    def isr(self):
        return [self._broker_id]

    @property
    def offline_replicas(self):
        return []

    def check_enough_replicas_reach_offset(self, offset):
        if self.is_deleted:
            return True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return self.high_watermark >= offset, ErrorCode.NONE

    # -- Positions --------------------------------------------------------------------------

    def _lease(self):
        return self._db.leased_log(self.topic, self.index)

    def leased_log(self):
        """The log leased as this partition's storage calls lease it (a context manager;
        a replicated partition pins the HW it holds first): what a reader outside the
        event loop reads through."""
        return self._lease()

    @staticmethod
    def _positions(log):
        """The OffsetSnapshot of a leased log, in a storage thread (it re-reads the shared
        state: other writers' appends)."""
        return log.offset_snapshot()

    def observe(self, positions):
        """Fold positions a storage call saw (an OffsetSnapshot) into ours (event loop).
        They only grow here: results of concurrent calls may arrive out of order, and one
        leader never truncates its log."""
        if positions is None:
            return
        new = OffsetSnapshot(*map(max, positions, self.offsets()))
        if new != self.offsets():
            self.log_start_offset, self.last_stable_offset, self.high_watermark, \
                self.log_end_offset = new
            self._on_change(self)

    async def refresh(self):
        try:
            positions = await self._io.run(self.positions_in_storage)
        except UnknownTopicError:
            return
        except (KqliteError, OSError) as exc:
            logger.debug("%s-%d: cannot re-read the log end: %s", self.topic, self.index, exc)
            return
        self.observe(positions)

    def positions_in_storage(self):
        """The OffsetSnapshot storage has now; in a storage thread. The replica manager
        calls it for many partitions in one thread hop."""
        with self._lease() as log:
            return self._positions(log)

    # -- Produce ----------------------------------------------------------------------------

    async def append(self, records, *, acks, timeout_ms, verification_guard=None):
        result, positions = await self._io.run(self._append_as_leader, records,
                                               verification_guard)
        self.observe(positions)
        return await self.await_acks(result, acks, timeout_ms)

    # The replica manager may gather this partition's append into one storage-thread call
    # for a whole Produce (``append_in_storage``, then ``observe`` and ``await_acks``,
    # exactly what :meth:`append` does around its own call); the replicated partition
    # has leader work around its append and answers False. A log whose flush policy
    # fsyncs every append (``fsync="always"``, ``flush.messages`` 1) is appended by its
    # own call: in one call the partitions' fsyncs would run one after another, in their
    # own calls they run at once on the storage threads. What the policy is, the last
    # append saw (a hint: a policy just altered costs one request the other way).
    _syncs_each_append = False

    @property
    def gathers_appends(self):
        return not self._syncs_each_append

    def append_in_storage(self, records, verification_guard=None):
        """In a storage thread: the storage part of :meth:`append`, ``(AppendResult,
        positions or None)``."""
        return self._append_as_leader(records, verification_guard)

    async def append_as_coordinator(self, records, *, acks, timeout_ms, verification_guard=None):
        result, positions = await self._io.run(self._append_as_leader, records,
                                               verification_guard, AppendOrigin.COORDINATOR)
        self.observe(positions)
        return await self.await_acks(result, acks, timeout_ms)

    async def append_marker(self, producer_id, producer_epoch, coordinator_epoch, commit, *,
                            timeout_ms):
        result, positions = await self._io.run(self._append_marker, producer_id,
                                               producer_epoch, coordinator_epoch, commit)
        self.observe(positions)
        return await self.await_acks(result, -1, timeout_ms)

    async def begin_verification(self, producer_id, sequence, epoch):
        guard, positions = await self._io.run(
            self._storage_call, "begin a verification",
            lambda log: log.begin_verification(producer_id, sequence, epoch))
        self.observe(positions)
        return guard

    async def await_acks(self, result, acks, timeout_ms):
        """With ``acks=-1``, park a successful append in the delayed-produce purgatory
        until ``check_enough_replicas_reach_offset`` says its last offset is committed;
        the answer then, or the error the wait ended with."""
        if acks == -1 and result.error_code == ErrorCode.NONE:
            op = DelayedProduce(self, result.last_offset + 1, timeout_ms)
            await self._delayed_produce.wait(op, [self.key])
            return acked(result, op)
        return result

    def watch_acks(self, result, acks, timeout_ms, on_answer):
        """:meth:`await_acks` without a coroutine: ``on_answer(AppendResult)`` on the loop
        (Purgatory.watch), at once unless acks=-1 has to wait."""
        if acks == -1 and result.error_code == ErrorCode.NONE:
            op = DelayedProduce(self, result.last_offset + 1, timeout_ms)
            self._delayed_produce.watch(op, [self.key],
                                        lambda _completed: on_answer(acked(result, op)))
        else:
            on_answer(result)

    def _append_as_leader(self, records, verification_guard=None, origin=AppendOrigin.CLIENT):
        """The append, in a storage thread; returns ``(AppendResult, positions or None)``.
        Storage validates the bytes once (Kafka's LogValidator rules) and judges them
        against the producer state under the log's write lock (Log.append_as_leader:
        sequences, epochs, transactions and their verification guard); this maps its
        refusals to Kafka's error codes."""
        def append(log):
            config = log.config
            self._syncs_each_append = config["fsync"] == "always" \
                or config["flush.messages"] <= 1
            if origin is AppendOrigin.CLIENT:
                refuse_producer(config, self.topic)
            info = log.append_as_leader(records, leader_epoch=self.leader_epoch,
                                        origin=origin, verification_guard=verification_guard)
            if info.written is not None:
                self._wrote(info)
            return info
        return self._append_with(append, len(records), "append to")

    def _wrote(self, info):
        """In the thread of a leader append that wrote ``info.written`` (an AppendInfo):
        a cluster leader keeps it for its followers' next fetch (ReplicatedPartition)."""

    async def append_as_mirror(self, records, *, timeout_ms):
        # One broker: every append is committed as it lands (acks=-1 waits for nothing).
        copied = []
        result, positions = await self._io.run(self._append_mirrored, records, None, copied)
        self.observe(positions)
        # KIP-1279's invariant: the partition's epoch at or above every epoch its mirrored
        # batches carry (they keep the source's here), so the batches this broker stamps
        # once the topic is promoted never go below them in the leader-epoch cache.
        if copied and copied[0] > self._leader_epoch:
            self._leader_epoch = copied[0]
        return result

    # The allocator mirrored producer ids are reserved in: the data dir's on one broker.
    def _mirror_producer_ids(self):
        return self._db.producer_ids

    def _append_mirrored(self, records, leader_epoch=None, copied=None):
        """A mirror's batches at their own offsets, in a storage thread (mirror_append.py:
        ``leader_epoch`` None keeps theirs, else it is stamped); as
        :meth:`_append_as_leader` returns. ``copied``, a list, receives the latest epoch
        of the leader-epoch cache after the append."""
        def append(log):
            first, last, count = append_mirrored(log, records, self.topic,
                                                 self._mirror_producer_ids(), leader_epoch)
            if copied is not None:
                copied.append(log.epochs.latest_epoch)
            return _MarkerAppended(first, last, count)
        return self._append_with(append, len(records), "mirror into")

    def _append_marker(self, producer_id, producer_epoch, coordinator_epoch, commit):
        """A transaction marker, in a storage thread (Log.append_marker); as
        :meth:`_append_as_leader` returns."""
        def append(log):
            offset = log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                       leader_epoch=self.leader_epoch)
            return _MarkerAppended(offset, offset)
        return self._append_with(append, CONTROL_BATCH_SIZE, "write a marker to")

    def _append_with(self, append, size, what):
        try:
            with self._lease() as log:
                info = append(log)
                positions = self._positions(log)
        except UnknownTopicError:
            return AppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        except MirrorRefusal as exc:
            return AppendResult(exc.error_code, error_message=str(exc)), None
        except KqliteError as exc:
            for kind, code in _REFUSALS.items():
                if isinstance(exc, kind):
                    return AppendResult(code, error_message=str(exc), record_errors=getattr(
                        exc, "record_errors", ())), None
            self._storage_failed(exc, f"{what} {self.topic}-{self.index}")
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc)), None
        except OSError as exc:       # opening the log: its directory, metadata, files
            self._storage_failed(exc, f"{what} {self.topic}-{self.index}")
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc)), None
        self._io.alarms.recovered(self.key)
        return AppendResult(base_offset=info.first_offset, last_offset=info.last_offset,
                            log_start_offset=positions.log_start_offset,
                            record_count=info.record_count,
                            size=0 if info.duplicate else size,
                            log_append_time=info.log_append_time), positions

    # -- Fetch ------------------------------------------------------------------------------

    async def read(self, offset, max_bytes, *, isolation=Isolation.HIGH_WATERMARK,
                   replica_id=CONSUMER_REPLICA_ID, current_leader_epoch=-1, zero_copy=True,
                   last_fetched_epoch=-1, follower_log_start_offset=-1):
        # ``follower_log_start_offset`` only matters to a leader that tracks followers.
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            return ReadResult(code)
        result = await self._io.run(self._read_checked, offset, max_bytes, isolation,
                                    last_fetched_epoch, zero_copy,
                                    on_abandon=ReadResult.release)
        if result.high_watermark >= 0:
            self.observe(result.offsets())
        return result

    # The replica manager may gather this partition's read into one storage-thread call
    # for a whole Fetch (``read_in_storage`` between ``before_gathered_read`` and
    # ``after_gathered_read``, exactly what :meth:`read` does around its own call).
    gathers_reads = True

    def before_gathered_read(self, fetch, replica_id):
        """On the loop, before a gathered read of ``fetch`` (a FetchPartition): ``(error
        code refusing it, what after_gathered_read needs)``."""
        return self.check_leader_epoch(fetch.current_leader_epoch), None

    def after_gathered_read(self, result, fetch, replica_id, before):
        """On the loop, after a gathered read: fold the positions it saw."""
        if result.high_watermark >= 0:
            self.observe(result.offsets())

    def read_recent(self, fetch, replica_id, isolation, max_bytes, min_one):
        """On the loop: ``fetch`` answered without storage, or None (always, here: only
        a cluster leader keeps its last appends for its followers)."""
        return None

    def read_in_storage(self, offset, max_bytes, isolation, last_fetched_epoch, zero_copy,
                        min_one=True):
        """In a storage thread: the storage part of :meth:`read` (its epoch check done).
        Without ``min_one`` a first batch larger than ``max_bytes`` is not returned
        (no region is opened for it): the Fetch already has data from an earlier
        partition."""
        return self._read_checked(offset, max_bytes, isolation, last_fetched_epoch,
                                  zero_copy, min_one)

    def _read_checked(self, offset, max_bytes, isolation, last_fetched_epoch, zero_copy,
                      min_one=True):
        """In a storage thread: the diverging-epoch check of a fetch that carries the epoch
        of its last batch (divergence.py; any leader answers it), then the read."""
        if last_fetched_epoch >= 0:
            try:
                with self._lease() as log:
                    seen = self._positions(log)
                    code, diverging = diverging_epoch_for(log.epochs, last_fetched_epoch,
                                                          offset, seen.log_start_offset,
                                                          seen.log_end_offset)
            except UnknownTopicError:
                return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            except (KqliteError, OSError) as exc:
                self._storage_failed(exc, f"fetch {self.topic}-{self.index} at {offset}")
                return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR)
            if code or diverging is not None:
                result = ReadResult(code, records=b"", diverging_epoch=(
                    None if diverging is None else tuple(diverging)))
                result.set_offsets(seen)
                return result
        return self._read_from_log(offset, max_bytes, isolation, zero_copy, min_one)

    def _read_from_log(self, offset, max_bytes, isolation, zero_copy, min_one=True):
        result = ReadResult()
        try:
            with self._lease() as log:
                seen = self._positions(log)
                result.set_offsets(seen)
                # Nothing past the positions reported with the records; a read_committed
                # read gets the aborted transactions of what it returns (None otherwise).
                region, result.aborted_transactions = log.fetch_region(
                    offset, max_bytes, max_offset=seen.read_limit(isolation),
                    isolation=isolation, aborted_transactions=True, min_one=min_one)
        except UnknownTopicError:
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        except OffsetOutOfRangeError:
            result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            return result
        except (KqliteError, OSError) as exc:  # a damaged segment fails this partition only
            self._storage_failed(exc, f"fetch {self.topic}-{self.index} at {offset}")
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            return result
        self._io.alarms.recovered(self.key)
        if region is None:
            result.records = b""
            return result
        fd, position, length = region
        if zero_copy:
            result.records, result.size = FileRegion(fd, position, length), length
            return result
        try:
            data = _pread_exactly(fd, length, position)
        except OSError as exc:
            logger.error("fetch %s-%d at %d: %s", self.topic, self.index, offset, exc)
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            return result
        finally:
            os.close(fd)
        result.records, result.size = data, len(data)
        return result

    # -- Offsets ----------------------------------------------------------------------------

    async def list_offset(self, timestamp, *, current_leader_epoch=-1,
                          isolation=Isolation.HIGH_WATERMARK):
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            raise PartitionError(code)
        found, positions = await self._io.run(self._storage_call, "list offsets",
                                              self._offset_for_timestamp, timestamp,
                                              isolation)
        self.observe(positions)
        return found

    def _offset_for_timestamp(self, log, timestamp, isolation=Isolation.HIGH_WATERMARK):
        if timestamp == EARLIEST_TIMESTAMP:
            offset = log.start_offset
            return offset, -1, _epoch_for_offset(log, offset)
        if timestamp == LATEST_TIMESTAMP:
            return log.offset_snapshot().read_limit(isolation), -1, self.leader_epoch
        if timestamp == MAX_TIMESTAMP:
            offset, found_ts = log.max_timestamp()
            return offset, found_ts, _epoch_for_offset(log, offset) if offset >= 0 else -1
        # A match only below the isolation's limit (Kafka's fetchOffsetForTimestamp); a
        # marker may be the match, as in Kafka.
        found = log.find_by_time(timestamp, isolation=isolation)
        if found is None:
            return -1, -1, -1
        offset, found_ts = found
        return offset, found_ts, _epoch_for_offset(log, offset)

    async def legacy_offsets(self, timestamp, max_num_offsets, *, from_consumer):
        # Answered without a leadership check, by a cluster's followers too, so what it
        # saw is not folded into the positions: a follower's are its fetcher's to set.
        found, _positions = await self._io.run(
            self._storage_call, "list offsets by segment", self._offsets_by_segment,
            timestamp, max_num_offsets, from_consumer)
        return found

    @staticmethod
    def _offsets_by_segment(log, timestamp, max_num_offsets, from_consumer):
        return legacy_offsets_before(log, timestamp, max_num_offsets, now_ms=now_ms(),
                                     from_consumer=from_consumer)

    async def active_producers(self):
        found, positions = await self._io.run(self._storage_call, "describe producers",
                                              lambda log: log.active_producers())
        self.observe(positions)
        return found

    async def end_offset_for_epoch(self, epoch, *, current_leader_epoch=-1):
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            raise PartitionError(code)
        found, positions = await self._io.run(self._storage_call, "offset for leader epoch",
                                              self._epoch_end, epoch)
        self.observe(positions)
        return found

    def _epoch_end(self, log, epoch):
        end = log.end_offset
        if not log.epochs.entries:
            # Nothing was ever stamped (the embedded API writes no epoch): all of the log
            # belongs to the epoch we lead with.
            return self.leader_epoch, end
        return log.epochs.end_offset_for(epoch, end)

    async def delete_records(self, offset):
        low, positions = await self._io.run(self._storage_call, "delete records",
                                            self._delete_below, offset)
        self.observe(positions)
        return low

    @staticmethod
    def _delete_below(log, offset):
        return log.delete_records(log.high_watermark if offset == -1 else offset)

    def _storage_call(self, action, fn, *args):
        """``fn(log, *args)`` on the leased log in a storage thread, with Kafka's error
        codes for the failures; returns ``(result, positions)``."""
        try:
            with self._lease() as log:
                result = fn(log, *args)
                positions = self._positions(log)
        except UnknownTopicError as exc:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None
        except OffsetOutOfRangeError as exc:
            raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc)) from None
        except (KqliteError, OSError) as exc:
            self._storage_failed(exc, f"{action} of {self.topic}-{self.index}")
            raise PartitionError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
        self._io.alarms.recovered(self.key)
        return result, positions

    def _storage_failed(self, exc, what):
        """Report a storage failure (in a storage thread): a full disk or descriptor table
        once per episode (exhaustion.py), anything else every time. A log that a failed
        write left refusing writes (LogFailedError) is closed, so that the next call
        reopens it, recovering from what is on disk: the partition works again, without
        a restart, once the cause is gone."""
        if self._io.alarms.check(exc, self.key, what) is None:
            logger.error("%s: %s", what, exc)
        if isinstance(exc, LogFailedError):
            key = self.key
            try:
                self._db.logs.drop(lambda k: k == key)
            except Exception as close_exc:    # noqa: BLE001 -- the next lease retries
                logger.warning("%s: closing the failed log: %s", what, close_exc)


def acked(result, op):
    """The answer of an append once its DelayedProduce ``op`` is done: ``result``, or the
    error the wait ended with."""
    if op.error_code:
        return AppendResult(op.error_code, log_start_offset=result.log_start_offset,
                            record_count=result.record_count, size=result.size)
    return result


def _pread_exactly(fd, length, position):
    """The bytes of a region fetch_region found (whole batches, so never past the end)."""
    chunks = []
    while length:
        chunk = os.pread(fd, length, position)
        if not chunk:
            raise OSError(f"segment ended {length} bytes before the batches it indexes")
        chunks.append(chunk)
        length -= len(chunk)
        position += len(chunk)
    return b"".join(chunks)


def _epoch_for_offset(log, offset):
    """The leader epoch ``offset`` was written in, by the leader-epoch cache (Kafka's
    epochForOffset): the latest epoch starting at or before it, -1 if none does."""
    found = -1
    for epoch, start in list(log.epochs.entries):
        if start > offset:
            break
        found = epoch
    return found
