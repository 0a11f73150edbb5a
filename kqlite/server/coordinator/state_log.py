"""How a coordinator's records are written to and read from its state topic (storage, as
opposed to ownership: which partitions this broker answers for).

Theory of operation. A :class:`StateLog` appends records to one partition of the state
topic and answers with Kafka's error code of the append, and reads partitions from their
log start to their log end (as Kafka's coordinators load: records above the high
watermark count too), handing each one's batches, as :class:`StoredBatch` (header and
records, markers included), to a pure ``replay`` function in one storage-thread call, so
that decoding never runs on the event loop and a broker loading all its partitions at
start waits for one call. A replay sees the batches and not only their records because
a transactional offset commit counts only once its COMMIT marker follows (Kafka's
GroupMetadataManager loads a partition so; :func:`data_records` is the records-only view
for a replay with no transactional batches to tell apart). Two implementations:

- :class:`PartitionStateLog`: the partition's leader writes through the partition seam
  (``Partition.append``, kqlite/server/partition.py) as a produce with the leader epoch
  stamped, ``acks`` (-1: answered once the in-sync replicas have the records, or
  REQUEST_TIMED_OUT after ``timeout_ms``) and the seam's refusals (NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS, ...). It is the only writer of its partition, so what its
  coordinator loaded on election and appended since is the whole state. A cluster
  broker's.
- :class:`DataDirStateLog`: the single broker's. The state topic is the data dir's own,
  which embedded processes on the same data dir (``kqlite.open(dir)``) write too, so it
  has other writers (``shared_database`` is that Database): appends go in as the
  embedded API writes them (``Log.append``, in a storage thread; one broker is its whole
  ISR, so every ``acks`` is met once the records are written), and a coordinator reads
  its state through the data dir's own store of it (kqlite/db: ``Database.offsets`` for
  committed offsets), which catches up with what other processes appended before every
  answer. It keeps no copy loaded once, which another process's write would make stale.
"""

import abc
import logging
from typing import NamedTuple

from ...errors import (InvalidProducerEpochError, InvalidTxnStateError, RecordTooLargeError,
                       UnknownTopicError)
from ...format.batch import build_batch, decode_records, parse_header
from ...format.header import BatchHeader
from ...format.validate import AppendOrigin
from ...protocol import ErrorCode
from ...storage import Isolation
from ..local_partition import LocalPartition
from ..partition import PartitionError

__all__ = ["StateLog", "PartitionStateLog", "DataDirStateLog", "StoredBatch", "data_records"]

log = logging.getLogger("kqlite.server")

_READ_CHUNK = 1 << 20


class StoredBatch(NamedTuple):
    """One batch of a state partition as a replay sees it: ``records`` decoded (a marker's
    one control record included), none below the log start."""
    header: BatchHeader
    records: list


def stored_batches(log_, isolation):
    """The batches of ``log_`` from its log start up to ``isolation``'s limit, oldest
    first, decoded one read chunk at a time."""
    start = log_.start_offset
    offset = start
    while data := log_.read_batches(offset, _READ_CHUNK, isolation=isolation):
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            records = decode_records(data, pos, header)
            if header.base_offset < start:    # the log start lies inside this batch
                records = [r for r in records if r.offset >= start]
            yield StoredBatch(header, records)
            pos += header.size
            offset = header.last_offset + 1


def data_records(batches):
    """The records of ``batches`` (StoredBatch) that are not markers, oldest first."""
    for batch in batches:
        if not batch.header.is_control:
            yield from batch.records


def transactional_batch(records, producer):
    """``records`` as one transactional batch of ``producer`` ((producer id, epoch)), base
    sequence 0, as Kafka's group coordinator writes a transactional offset commit (its
    appends are the coordinator's: no sequence is checked)."""
    producer_id, epoch = producer
    return build_batch(records, producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=0, transactional=True)


class StateLog(abc.ABC):
    """The interface; see the module docstring."""

    # The Database whose stores read this log with other processes' writes, or None when
    # this broker's coordinator is its only writer.
    shared_database = None

    @abc.abstractmethod
    async def append(self, index, records, *, acks, timeout_ms, producer=None, guard=None):
        """Append ``records`` (kqlite Records) to partition ``index``; the error code of the
        append (NONE once written as ``acks`` asks). With ``producer`` ((producer id,
        epoch)) they are one transactional batch of that producer, appended as a
        coordinator appends it (no sequence check) with the verification ``guard`` of
        :meth:`begin_verification`."""

    @abc.abstractmethod
    async def begin_verification(self, index, producer):
        """``(error code, guard)`` for a transactional batch of ``producer`` about to go to
        partition ``index``: the log's verification guard, or None when the producer has a
        transaction open there already (nothing to verify)."""

    @abc.abstractmethod
    async def read(self, indexes, replay):
        """``{index: replay(batches)}`` for each partition of ``indexes``, ``batches`` an
        iterator over its StoredBatch from its log start to its log end, oldest first, to
        be read once (they are decoded as they are read); run in one storage-thread
        call."""

    async def leader_epochs(self, indexes):
        """``{index: the latest leader epoch partition ``index`` recorded}``, for the
        partitions that recorded one (a broker owning them from its start takes these as
        its coordinator epochs)."""
        return {}


class PartitionStateLog(StateLog):
    """Through the partition seam of the broker's replica manager (read when used: it is
    made after the coordinator); see the module docstring."""

    def __init__(self, topic, broker):
        self.topic = topic
        self.broker = broker

    async def append(self, index, records, *, acks, timeout_ms, producer=None, guard=None):
        try:
            partition = await self.broker.replicas.get(self.topic.name, index)
        except PartitionError as exc:
            return exc.error_code
        if producer is None:
            result = await partition.append(build_batch(records), acks=acks,
                                            timeout_ms=timeout_ms)
        else:
            result = await partition.append_as_coordinator(
                transactional_batch(records, producer), acks=acks, timeout_ms=timeout_ms,
                verification_guard=guard)
        return result.error_code

    async def begin_verification(self, index, producer):
        try:
            partition = await self.broker.replicas.get(self.topic.name, index)
            return ErrorCode.NONE, await partition.begin_verification(producer[0], -1,
                                                                      producer[1])
        except PartitionError as exc:
            return exc.error_code, None

    async def read(self, indexes, replay):
        return await self.broker.io.run(self._read, list(indexes), replay)

    def _read(self, indexes, replay):
        replayed = {}
        for index in indexes:
            with self.broker.db.leased_log(self.topic.name, index) as log_:
                replayed[index] = replay(stored_batches(log_, Isolation.LOG_END))
        return replayed


class DataDirStateLog(StateLog):
    """The data dir's own state topic, created on the first append; ``run`` awaits a
    blocking call in a storage thread. See the module docstring."""

    def __init__(self, topic, database, run):
        self.topic = topic
        self.shared_database = database
        self.run = run

    async def append(self, index, records, *, acks, timeout_ms, producer=None, guard=None):
        return await self.run(self._append, index, records, producer, guard)

    def _append(self, index, records, producer, guard):
        db, topic = self.shared_database, self.topic
        if db.topics.get(topic.name) is None:
            db.create_topic(topic.name, topic.partitions, topic.config, exist_ok=True)
        try:
            with db.leased_log(topic.name, index) as log_:
                if producer is None:
                    log_.append(records)
                else:
                    log_.append_batches(transactional_batch(records, producer),
                                        origin=AppendOrigin.COORDINATOR,
                                        verification_guard=guard)
        except RecordTooLargeError as exc:
            log.warning("%s-%d: %d record(s) not written: %s", topic.name, index, len(records),
                        exc)
            return ErrorCode.MESSAGE_TOO_LARGE
        except (InvalidTxnStateError, InvalidProducerEpochError) as exc:
            log.info("%s-%d: a transactional batch was refused: %s", topic.name, index, exc)
            return ErrorCode.INVALID_TXN_STATE if isinstance(exc, InvalidTxnStateError) \
                else ErrorCode.INVALID_PRODUCER_EPOCH
        return ErrorCode.NONE

    async def begin_verification(self, index, producer):
        return await self.run(self._begin_verification, index, producer)

    def _begin_verification(self, index, producer):
        db, topic = self.shared_database, self.topic
        if db.topics.get(topic.name) is None:
            db.create_topic(topic.name, topic.partitions, topic.config, exist_ok=True)
        with db.leased_log(topic.name, index) as log_:
            return ErrorCode.NONE, log_.begin_verification(producer[0], -1, producer[1])

    async def read(self, indexes, replay):
        return await self.run(self._read, list(indexes), replay)

    async def leader_epochs(self, indexes):
        return await self.run(self._leader_epochs, list(indexes))

    def _leader_epochs(self, indexes):
        db = self.shared_database
        if db.topics.get(self.topic.name) is None:
            return {}
        return {index: LocalPartition.initial_leader_epoch(db, self.topic.name, index)
                for index in indexes}

    def _read(self, indexes, replay):
        db = self.shared_database
        if db.topics.get(self.topic.name) is None:   # nothing stored yet; reading creates
            return {index: replay([]) for index in indexes}           # nothing
        replayed = {}
        for index in indexes:
            try:
                with db.leased_log(self.topic.name, index) as log_:
                    replayed[index] = replay(stored_batches(log_, Isolation.HIGH_WATERMARK))
            except UnknownTopicError:       # a topic made by hand with fewer partitions
                replayed[index] = replay([])
        return replayed
