"""Doubles of the coordinator runtime's seams (kqlite/server/coordinator/), for tests
without sockets or a data dir: a state log in memory and a placement of a fixed size."""

import asyncio

from kqlite.format.batch import build_batch, decode_records, parse_header
from kqlite.format.control_records import COMMIT, build_control_batch
from kqlite.format.internal_topics import OFFSETS_TOPIC
from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.ownership import Ownership, SoleOwnership
from kqlite.server.coordinator.placement import Placement
from kqlite.server.coordinator.runtime import CoordinatorRuntime
from kqlite.server.coordinator.state_log import StateLog, StoredBatch
from kqlite.server.coordinator.state_topic import StateTopic

TOPIC = StateTopic(OFFSETS_TOPIC, 50, {}, append_timeout_ms=5000)


class MemoryStateLog(StateLog):
    """Each partition a list of records, read back one batch per record (transactional
    where a transactional append wrote it). ``gate`` (an asyncio.Event), when given, holds every
    read and append until it is set; ``append_error`` is answered instead of appending;
    ``appends`` records every call's (index, records, acks, timeout_ms), ``reads`` every
    call's partitions, ``transactional`` the producer and guard of transactional appends;
    a verification gives a guard unless ``open_producers`` holds (index, producer id)."""

    def __init__(self, records=None, gate=None):
        self.records = {i: list(rs) for i, rs in (records or {}).items()}
        self.gate = gate
        self.append_error = ErrorCode.NONE
        self.appends = []
        self.reads = []
        self.transactional = []   # (index, producer, guard) of each transactional append
        self.open_producers = set()   # (index, producer id): a transaction open there
        self.producers = {}           # (index, position in records) -> (producer id, epoch)

    async def begin_verification(self, index, producer):
        if (index, producer[0]) in self.open_producers:
            return ErrorCode.NONE, None
        return ErrorCode.NONE, ("guard", index, producer)

    async def _wait(self):
        if self.gate is not None:
            await self.gate.wait()

    async def append(self, index, records, *, acks, timeout_ms, producer=None, guard=None):
        self.appends.append((index, list(records), acks, timeout_ms))
        if producer is not None:
            self.transactional.append((index, producer, guard))
        await self._wait()
        if self.append_error:
            return self.append_error
        stored = self.records.setdefault(index, [])
        if producer is not None:
            self.producers.update({(index, len(stored) + n): producer
                                   for n in range(len(records))})
        stored.extend(records)
        return ErrorCode.NONE

    async def read(self, indexes, replay):
        indexes = list(indexes)
        self.reads.append(indexes)
        await self._wait()
        # An iterator, read once, as a log's batches are.
        return {i: replay(iter([stored_batch([r], self.producers.get((i, n)), at=n)
                                for n, r in enumerate(self.records.get(i, []))]))
                for i in indexes}


def stored_batch(records, producer=None, *, marker=None, at):
    """One StoredBatch at offset ``at``, as a state log reads it back: ``records``,
    transactional when ``producer`` ((producer id, epoch)) is given, or that producer's
    COMMIT or ABORT ``marker``."""
    if marker is not None:
        data = bytes(build_control_batch(producer[0], producer[1], 0, marker == COMMIT,
                                         1000, base_offset=at))
    elif producer is None:
        data = build_batch(records, base_offset=at)
    else:
        data = build_batch(records, base_offset=at, producer_id=producer[0],
                           producer_epoch=producer[1], base_sequence=0, transactional=True)
    header = parse_header(data, 0)
    return StoredBatch(header, decode_records(data, 0, header))


class FixedPlacement(Placement):
    """``count`` partitions, all led by broker 1 at h:1."""

    def __init__(self, count=TOPIC.partitions):
        self.count = count

    def partition_count(self):
        return self.count

    async def coordinator_for(self, index):
        return ErrorCode.NONE, 1, "h", 1


def runtime(state_log=None, ownership=None, topic=TOPIC, relocation=None):
    """A runtime over doubles: by default the single broker's ownership and an empty log."""
    return CoordinatorRuntime(topic, placement=FixedPlacement(topic.partitions),
                              ownership=ownership if ownership is not None else SoleOwnership(),
                              state_log=state_log if state_log is not None else MemoryStateLog(),
                              relocation=relocation)


def leader_runtime(state_log=None, relocation=None):
    """A runtime whose partitions come with elections, as a cluster broker's."""
    return runtime(state_log, Ownership(), relocation=relocation)


async def settle():
    for _ in range(20):
        await asyncio.sleep(0)
