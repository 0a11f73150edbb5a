"""The runtime of a coordinator whose state lives in a compacted internal topic: the part
Kafka's group and transaction coordinators share, written once for both.

Theory of operation
-------------------
A coordinator (the group coordinator, ``group/``; the transaction coordinator, ``txn/``)
keeps one kind of state, keyed by a string (a group id, a transactional id),
in a state topic (:class:`~kqlite.server.coordinator.state_topic.StateTopic`): the
partition of a key is Kafka's,
:func:`~kqlite.format.internal_topics.kafka_partition_for_key` over the topic's partition
count, and the coordinator of a key is whichever broker leads that partition. The runtime
composes three pieces, each replaceable on its own, and a fourth for one topic:

- the placement (placement.py): which broker leads each partition, for FindCoordinator,
  and the partition count keys are placed by;
- the ownership (ownership.py, pure): the partitions this broker owns (loaded), is
  loading or does not own, with the coordinator epoch of each, from which every request
  gets its first answer (:meth:`CoordinatorRuntime.owner_error`): NONE,
  COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR;
- the state log (state_log.py): how the records are written and read. Ownership (who
  answers for a key) and storage (where its records go) are separate: a cluster broker
  and the single broker differ in both, independently;
- the relocation (relocation.py), for ``__consumer_offsets`` only: the records kqlite's
  legacy placement left in another partition, brought where Kafka's rule puts them before
  a load reads the partition.

Loading and unloading. Leading a partition in a new leader epoch (:meth:`elect`, which a
cluster feeds from LeaderAndIsr) starts a load: the relocation, if any, runs first (a
relocation that fails is logged and the load goes on), then the partition's batches,
from its log start to its log end, are replayed by the coordinator
(``CoordinatorState.replay``, pure, in a storage thread) and, if the ownership still
wants this load (no resignation, no newer election meanwhile), handed to it
(``CoordinatorState.load``) and the partition is owned. Leading it no more
(:meth:`resign`: followership, StopReplica) cancels a load under way and drops the
partition's state (``CoordinatorState.unload``). A load that fails is logged and the
partition is owned with what was read (as Kafka does). The single broker
(``SoleOwnership``) owns every partition from its start: its coordinators load all of
them once, at start (:meth:`load_at_start`), after the relocation.

Writes. :meth:`append` sends a coordinator's records to its key's partition through the
state log, with ``acks`` (-1 by default, as Kafka's coordinators write) and a timeout
(the state topic's, unless the caller names one), and maps the append's error code
through the coordinator's table (Kafka's GroupMetadataManager and TransactionStateManager
each have one). A partition this broker does not own takes no record: the append is
answered NOT_LEADER_OR_FOLLOWER, before the mapping.

Reads. What a coordinator loaded is its state when the state log has no other writer (a
cluster's partition, written only by its leader): the coordinator keeps it and updates it
with its own appends once they succeed. A state log with other writers
(``StateLog.shared_database``: the single broker's data dir, which embedded processes
write too) is read through the data dir's own store of that state (kqlite/db), which
re-reads what the others appended before every answer; the coordinator keeps nothing of
it that such a write could make stale (its load at start brings back only the state that
no other process writes, such as a group's members and generation).
"""

import abc
import asyncio
import logging

from ...format.internal_topics import OFFSETS_TOPIC, kafka_partition_for_key
from ...protocol import ErrorCode
from .ownership import SoleOwnership
from .placement import SolePlacement
from .relocation import DataDirRelocation
from .state_log import DataDirStateLog

__all__ = ["CoordinatorRuntime", "CoordinatorState", "sole_broker_runtime"]

log = logging.getLogger("kqlite.server")


class CoordinatorState(abc.ABC):
    """What a coordinator keeps of the partitions it owns: the runtime's calls into it."""

    @abc.abstractmethod
    def replay(self, batches):
        """What one partition's batches amount to, for :meth:`load`: ``batches`` iterates
        them (state_log.StoredBatch, markers included) oldest first, once. Pure: it runs in
        a storage thread."""

    @abc.abstractmethod
    def load(self, index, replayed):
        """Take over partition ``index`` as ``replay`` found it (on the event loop)."""

    @abc.abstractmethod
    def unload(self, index):
        """Drop the state of partition ``index``: this broker no longer owns it."""


class CoordinatorRuntime:
    """One coordinator's runtime over its state topic; see the module docstring."""

    def __init__(self, topic, *, placement, ownership, state_log, relocation=None):
        self.topic = topic
        self.placement = placement
        self.ownership = ownership
        self.state_log = state_log
        self.relocation = relocation
        self.state = None
        self._loads = {}          # partition -> the task loading it

    def attach(self, state):
        """Called once by the coordinator whose state this is (a CoordinatorState)."""
        self.state = state

    # -- Ownership ------------------------------------------------------------------------

    def partition_for(self, key):
        return kafka_partition_for_key(key, self.placement.partition_count())

    def coordinator_epoch(self, index):
        """The coordinator epoch this broker owns partition ``index`` in (the partition's
        leader epoch), None when it does not own it."""
        return self.ownership.epoch_for(index)

    def owner_error(self, key):
        """NONE when this broker owns the partition of ``key``, else the answer to a
        request for it: COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR."""
        return self.ownership.error_for(self.partition_for(key))

    @property
    def loading(self):
        """Whether some partition is being loaded (Kafka's ListGroups and ListTransactions
        answer COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        return bool(self.ownership.loading)

    async def coordinator_for(self, key):
        """FindCoordinator for ``key``: ``(error code, node id, host, port)``."""
        return await self.placement.coordinator_for(self.partition_for(key))

    # -- Loading and unloading --------------------------------------------------------------

    async def load_at_start(self):
        """With an ownership that holds every partition from the start: relocate, replay
        every partition (in one storage call), then hand each to the coordinator; nothing
        is handed over if the relocation or the read fails (the exception is raised).
        Otherwise nothing: loads come with elections."""
        if not self.ownership.loads_at_start or self.state is None:
            return
        indexes = range(self.placement.partition_count())
        self.ownership.epochs.update(await self.state_log.leader_epochs(indexes))
        if self.relocation is not None:
            await self.relocation.relocate(indexes)
        replayed = await self.state_log.read(indexes, self.state.replay)
        for index, state in replayed.items():
            self.state.load(index, state)

    def elect(self, index, epoch):
        """This broker leads partition ``index`` in leader epoch ``epoch``."""
        if not self.ownership.elect(index, epoch):
            return
        log.info("loading %s-%d (coordinator epoch %d)", self.topic.name, index, epoch)
        stale = self._loads.pop(index, None)
        if stale is not None:
            stale.cancel()
        self._loads[index] = asyncio.get_running_loop().create_task(self._load(index, epoch))

    async def _load(self, index, epoch):
        try:
            await self._relocate(index)
            (replayed,) = (await self.state_log.read([index], self.state.replay)).values()
        except asyncio.CancelledError:
            raise
        except Exception:       # noqa: BLE001 -- as Kafka: logged, the partition is owned
            log.exception("loading %s-%d failed", self.topic.name, index)
            replayed = self.state.replay([])
        finally:
            if self._loads.get(index) is asyncio.current_task():
                del self._loads[index]
        if not self.ownership.loaded(index, epoch):
            return
        self.state.load(index, replayed)
        log.info("loaded %s-%d (coordinator epoch %d)", self.topic.name, index, epoch)

    async def _relocate(self, index):
        if self.relocation is None:
            return
        try:
            await self.relocation.relocate([index])
        except asyncio.CancelledError:
            raise
        except Exception:       # noqa: BLE001 -- the partition's own records still load
            log.exception("moving the records of %s-%d's keys from their legacy partition "
                          "failed", self.topic.name, index)

    def resign(self, index, epoch):
        """This broker no longer leads partition ``index`` (a follower, or stopped), as of
        leader epoch ``epoch``."""
        if not self.ownership.resign(index, epoch):
            return
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        if self.state is not None:
            self.state.unload(index)
        log.info("unloaded %s-%d", self.topic.name, index)

    async def stop(self):
        """Cancel the loads under way."""
        tasks = list(self._loads.values())
        self._loads.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- Writes ------------------------------------------------------------------------------

    async def append(self, key, records, *, acks=-1, timeout_ms=None, errors=None,
                     producer=None, guard=None):
        """Append ``records`` to the partition of ``key``; the append's error code, mapped
        through ``errors`` (``{append error: coordinator error}``). See the module
        docstring. With ``producer`` ((producer id, epoch)) the records are one
        transactional batch of that producer (a transactional offset commit), appended with
        ``guard`` from :meth:`verify_transactional`."""
        index = self.partition_for(key)
        if self.ownership.error_for(index):
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            code = await self.state_log.append(
                index, records, acks=acks,
                timeout_ms=self.topic.append_timeout_ms if timeout_ms is None else timeout_ms,
                producer=producer, guard=guard)
        return errors.get(code, code) if errors else code

    async def verify_transactional(self, key, producer, verify):
        """Before a transactional batch of ``producer`` goes to the partition of ``key``
        (KIP-890 part 1): ``(error code, guard)``. The partition's log gives a guard unless
        the producer already has a transaction open there (then there is nothing to
        verify); ``verify(index)`` (the transaction coordinator's answer) must then be NONE
        for the append to go ahead with that guard."""
        index = self.partition_for(key)
        if self.ownership.error_for(index):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        code, guard = await self.state_log.begin_verification(index, producer)
        if code or guard is None:
            return code, guard
        return await verify(index), guard


def sole_broker_runtime(broker, topic):
    """The single broker's runtime for ``topic``: every partition its own from the start,
    its records in the data dir it shares with embedded processes (for
    ``__consumer_offsets``, moved once to Kafka's placement before the first load)."""
    relocation = DataDirRelocation(broker.db.offsets.ensure_kafka_placement, broker.io.run) \
        if topic.name == OFFSETS_TOPIC else None
    return CoordinatorRuntime(topic, placement=SolePlacement(broker, topic),
                              ownership=SoleOwnership(),
                              state_log=DataDirStateLog(topic, broker.db, broker.io.run),
                              relocation=relocation)
