"""The cluster replica manager's refusals of the controller's requests, without sockets.

kqlite/cluster/replica/manager.py's ClusterReplicaManager refuses, as Kafka 3.9's
ReplicaManager in ZooKeeper mode does:

- LeaderAndIsr and StopReplica while the broker is stopping (BROKER_NOT_AVAILABLE, also
  for a LeaderAndIsr the stop began under, which the stop waits for), from
  an older controller than one already heard (STALE_CONTROLLER_EPOCH), addressed to an
  older incarnation of this broker (STALE_BROKER_EPOCH; a broker epoch of -1 asks for no
  check), each refusal whole: every partition carries the code;
- per partition of a LeaderAndIsr: a leader epoch not above the one held
  (STALE_CONTROLLER_EPOCH), replicas that do not include this broker
  (UNKNOWN_TOPIC_OR_PARTITION), a local topic with another topic id than ZooKeeper's
  (INCONSISTENT_TOPIC_ID), a topic that cannot be made locally (KAFKA_STORAGE_ERROR);
- per partition of a StopReplica: a leader epoch below the one held (FENCED_LEADER_EPOCH;
  -1 and the deletion marker -2 skip the check);
- UpdateMetadata addressed to an older incarnation of this broker (STALE_BROKER_EPOCH) or
  from an older controller than one already heard (STALE_CONTROLLER_EPOCH).

Each test builds the manager in this process over a real Database in ``tmp_path`` and its
storage executor, with ZooKeeper played by a store that answers the topic's assignment and
config, and checks the code and that nothing changed: no partition made or dropped, no
role changed, no epoch moved, the metadata cache as it was.
"""

import asyncio
import uuid

import pytest

import kqlite
from kqlite.cluster.replica.manager import ClusterReplicaManager
from kqlite.cluster.replica.metadata_cache import MetadataCache
from kqlite.cluster.rules.partition_state import LEADER_DURING_DELETE
from kqlite.cluster.zookeeper.znodes import TopicAssignment, uuid_to_text
from kqlite.errors import UnknownTopicError
from kqlite.protocol import ErrorCode
from kqlite.server.partition import PartitionError
from kqlite.server.storage_io import StorageExecutor

BROKER = 0
TOPIC = "t"
TOPIC_ID = uuid.UUID(int=0x1234)
CONTROLLER_EPOCH = 4
BROKER_EPOCH = 40
LEADER_EPOCH = 6
PARTITION_EPOCH = 9


class ZooKeeper:
    """What the replica manager reads from ZooKeeper (the ZkStore calls it makes):
    each topic's assignment (UnknownTopicError when there is none, as ZkStore raises)
    and its config overrides."""

    def __init__(self):
        self.assignments = {TOPIC: TopicAssignment(TOPIC_ID, {0: [0, 1], 1: [1, 2]})}
        self.hold = None      # a coroutine function every call awaits first, when set

    def topic_assignment(self, name):
        try:
            return self.assignments[name]
        except KeyError:
            raise UnknownTopicError(name) from None

    def topic_config(self, _name):
        return {}

    async def call(self, fn, *args):
        """The node's ``zk_call``, without its thread: the store answers at once (once
        ``hold`` returns, when a test set one)."""
        if self.hold is not None:
            await self.hold()
        return fn(*args)


class Registration:
    """This broker's registration as its Controller knows it: the broker epoch (the
    czxid of ``/brokers/ids/0``) that requests to an older incarnation fall below."""

    broker_epoch = BROKER_EPOCH


class Broker:
    def __init__(self, path):
        self.db = kqlite.open(str(path / "broker-0"), retention_check_interval_ms=0)
        self.io = StorageExecutor(2)
        self.zookeeper = ZooKeeper()
        self.cache = MetadataCache(BROKER)
        self.manager = ClusterReplicaManager(
            self.db, self.io, broker_id=BROKER, cache=self.cache, store=self.zookeeper,
            zk=self.zookeeper.call)
        self.manager.controller = Registration()
        self.roles = []
        self.manager.on_roles_changed = self._roles_changed

    def _roles_changed(self, leaders, others):
        """What the coordinators hear (coordinators/roles.py): partitions that lead here,
        and those that follow or stopped; a call naming none changes no role."""
        if leaders or others:
            self.roles.append(([(p.topic, p.index) for p in leaders],
                               [(p.topic, p.index) for p in others]))

    async def lead_partition_0(self):
        """The controller's LeaderAndIsr making this broker the leader of t-0."""
        assert await self.manager.leader_and_isr(leader_and_isr()) == (
            ErrorCode.NONE, [(TOPIC, TOPIC_ID, 0, ErrorCode.NONE)])
        self.roles.clear()

    def state(self):
        """Everything a refused request must leave as it was."""
        m = self.manager
        return {
            "controller_epoch": m.controller_epoch,
            "hosted": sorted((p.topic, p.index, p.is_leader, p.leader_id, p.leader_epoch,
                              p.partition_epoch, tuple(p.isr), tuple(p.replicas))
                             for p in m.hosted_replicas()),
            "followed": sorted(m.fetchers.status()),
            "local_topics": self.db.list_topics(),
            "cache": (self.cache.controller_epoch, self.cache.controller_id,
                      dict(self.cache.brokers), dict(self.cache.partitions)),
        }

    async def close(self):
        await self.manager.stop()
        self.io.shutdown()
        self.db.close()


def leader_and_isr(*, index=0, leader=BROKER, leader_epoch=LEADER_EPOCH,
                   replicas=(0, 1), controller_epoch=CONTROLLER_EPOCH,
                   broker_epoch=BROKER_EPOCH, topic_id=TOPIC_ID):
    """A LeaderAndIsr v7 body for one partition of ``TOPIC``, as controller/requests.py
    builds it."""
    return {
        "controller_id": 1, "is_k_raft_controller": False,
        "controller_epoch": controller_epoch, "broker_epoch": broker_epoch, "type": 0,
        "topic_states": [{"topic_name": TOPIC, "topic_id": topic_id, "partition_states": [{
            "partition_index": index, "controller_epoch": controller_epoch,
            "leader": leader, "leader_epoch": leader_epoch, "isr": [leader],
            "partition_epoch": PARTITION_EPOCH, "replicas": list(replicas),
            "adding_replicas": [], "removing_replicas": [], "is_new": False,
            "leader_recovery_state": 0}]}],
        "live_leaders": []}


def stop_replica(*, leader_epoch=LEADER_EPOCH, delete=False,
                 controller_epoch=CONTROLLER_EPOCH, broker_epoch=BROKER_EPOCH):
    """A StopReplica v4 body for t-0, as controller/requests.py builds it."""
    return {
        "controller_id": 1, "is_k_raft_controller": False,
        "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
        "topic_states": [{"topic_name": TOPIC, "partition_states": [{
            "partition_index": 0, "leader_epoch": leader_epoch,
            "delete_partition": delete}]}]}


def update_metadata(*, controller_epoch=CONTROLLER_EPOCH, broker_epoch=BROKER_EPOCH):
    """An UpdateMetadata v8 body naming brokers 0 and 1 and t-0 led by 0, as
    controller/requests.py builds it."""
    return {
        "controller_id": 1, "is_k_raft_controller": False, "type": 0,
        "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
        "topic_states": [{"topic_name": TOPIC, "topic_id": TOPIC_ID, "partition_states": [{
            "partition_index": 0, "controller_epoch": controller_epoch, "leader": BROKER,
            "leader_epoch": LEADER_EPOCH, "isr": [BROKER], "zk_version": PARTITION_EPOCH,
            "replicas": [0, 1], "offline_replicas": []}]}],
        "live_brokers": [{"id": b, "rack": None, "endpoints": [
            {"port": 9092 + b, "host": "127.0.0.1", "listener": "PLAINTEXT",
             "security_protocol": 0}]} for b in (0, 1)]}


def run(tmp_path, test, *, leading=True):
    """``test(broker)`` on a fresh broker; with ``leading``, t-0 is led here first (leader
    epoch LEADER_EPOCH, controller epoch CONTROLLER_EPOCH)."""
    async def main():
        broker = Broker(tmp_path)
        try:
            if leading:
                await broker.lead_partition_0()
            await test(broker)
        finally:
            await broker.close()
    asyncio.run(main())


# -- LeaderAndIsr: the whole request ----------------------------------------------------------

def test_leader_and_isr_while_stopping_is_refused_broker_not_available(tmp_path):
    async def test(b):
        await b.manager.stop()
        before = b.state()
        code, partitions = await b.manager.leader_and_isr(
            leader_and_isr(leader_epoch=LEADER_EPOCH + 1, controller_epoch=CONTROLLER_EPOCH + 1))
        assert code == ErrorCode.BROKER_NOT_AVAILABLE
        assert partitions == [(TOPIC, TOPIC_ID, 0, ErrorCode.BROKER_NOT_AVAILABLE)]
        assert b.state() == before and b.roles == []
    run(tmp_path, test)


def test_leader_and_isr_the_stop_began_under_is_refused_broker_not_available(tmp_path,
                                                                              caplog):
    # The broker begins to stop while a LeaderAndIsr reads ZooKeeper: the stop waits for
    # it, and it refuses as one arriving during the stop is refused, without a traceback
    # (it used to make t-1 a follower and then fail on the closed fetcher manager).
    async def test(b):
        reading, release = asyncio.Event(), asyncio.Event()

        async def hold():
            reading.set()
            await release.wait()
        b.zookeeper.hold = hold
        before = b.state()
        request = asyncio.ensure_future(b.manager.leader_and_isr(leader_and_isr(
            index=1, leader=1, replicas=(0, 1), leader_epoch=LEADER_EPOCH + 1)))
        await reading.wait()
        stopping = asyncio.ensure_future(b.manager.stop())
        await asyncio.sleep(0)      # the stop's first step: the broker is stopping
        release.set()
        code, partitions = await request
        await stopping
        assert code == ErrorCode.BROKER_NOT_AVAILABLE
        assert partitions == [(TOPIC, TOPIC_ID, 1, ErrorCode.BROKER_NOT_AVAILABLE)]
        assert b.state() == before and b.roles == []
    with caplog.at_level("INFO", logger="kqlite"):
        run(tmp_path, test)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not [r for r in caplog.records if r.exc_info]


def test_leader_and_isr_from_an_older_controller_is_refused_stale_controller_epoch(tmp_path):
    async def test(b):
        before = b.state()
        code, partitions = await b.manager.leader_and_isr(leader_and_isr(
            index=1, replicas=(0, 1), leader_epoch=LEADER_EPOCH + 1,
            controller_epoch=CONTROLLER_EPOCH - 1))
        assert code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert partitions == [(TOPIC, TOPIC_ID, 1, ErrorCode.STALE_CONTROLLER_EPOCH)]
        assert b.state() == before and b.roles == []
        assert b.manager.controller_epoch == CONTROLLER_EPOCH
    run(tmp_path, test)


def test_leader_and_isr_to_an_older_broker_epoch_is_refused_stale_broker_epoch(tmp_path):
    async def test(b):
        before = b.state()
        code, partitions = await b.manager.leader_and_isr(leader_and_isr(
            broker_epoch=BROKER_EPOCH - 1, controller_epoch=CONTROLLER_EPOCH + 1))
        assert code == ErrorCode.STALE_BROKER_EPOCH
        assert partitions == [(TOPIC, TOPIC_ID, 0, ErrorCode.STALE_BROKER_EPOCH)]
        assert b.state() == before and b.roles == []
        # Refused whole: the newer controller epoch it carried was not taken either.
        assert b.manager.controller_epoch == CONTROLLER_EPOCH
    run(tmp_path, test)


def test_leader_and_isr_with_no_broker_epoch_is_not_checked_against_it(tmp_path):
    """-1 is "no check" (LeaderAndIsr.NoEpoch): the request is applied."""
    async def test(b):
        assert await b.manager.leader_and_isr(leader_and_isr(broker_epoch=-1)) == (
            ErrorCode.NONE, [(TOPIC, TOPIC_ID, 0, ErrorCode.NONE)])
        (p,) = b.manager.hosted_replicas()
        assert p.is_leader and p.leader_epoch == LEADER_EPOCH
    run(tmp_path, test, leading=False)


# -- LeaderAndIsr: per partition ---------------------------------------------------------------

@pytest.mark.parametrize("leader_epoch", [LEADER_EPOCH, LEADER_EPOCH - 1])
def test_leader_and_isr_not_above_the_held_leader_epoch_is_refused_stale_controller_epoch(
        tmp_path, leader_epoch):
    async def test(b):
        before = b.state()
        # As a follower of broker 1 this time: the refusal must come before any role change.
        code, partitions = await b.manager.leader_and_isr(
            leader_and_isr(leader=1, leader_epoch=leader_epoch))
        assert code == ErrorCode.NONE
        assert partitions == [(TOPIC, TOPIC_ID, 0, ErrorCode.STALE_CONTROLLER_EPOCH)]
        assert b.state() == before and b.roles == []
        (p,) = b.manager.hosted_replicas()
        assert p.is_leader and p.leader_epoch == LEADER_EPOCH
    run(tmp_path, test)


def test_leader_and_isr_for_a_partition_not_replicated_here_is_refused_unknown(tmp_path):
    async def test(b):
        before = b.state()
        code, partitions = await b.manager.leader_and_isr(
            leader_and_isr(index=1, leader=1, replicas=(1, 2)))
        assert code == ErrorCode.NONE
        assert partitions == [(TOPIC, TOPIC_ID, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert b.state() == before and b.roles == []
        with pytest.raises(PartitionError) as refused:
            await b.manager.get(TOPIC, 1)
        assert refused.value.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    run(tmp_path, test)


def test_leader_and_isr_over_a_local_topic_with_another_id_is_refused_inconsistent(tmp_path):
    async def test(b):
        stale_id = uuid_to_text(uuid.UUID(int=0x5678))
        b.db.create_topic(TOPIC, 2, topic_id=stale_id)
        before = b.state()
        code, partitions = await b.manager.leader_and_isr(leader_and_isr())
        assert code == ErrorCode.NONE
        assert partitions == [(TOPIC, TOPIC_ID, 0, ErrorCode.INCONSISTENT_TOPIC_ID)]
        # The request is the current controller's: its epoch is taken, the partition not.
        assert b.state() == dict(before, controller_epoch=CONTROLLER_EPOCH)
        assert b.roles == []
        assert b.db.topic_metadata(TOPIC, refresh=True)["topic_id"] == stale_id
    run(tmp_path, test, leading=False)


def test_leader_and_isr_for_a_topic_that_cannot_be_made_locally_is_a_storage_error(tmp_path):
    """The topic's assignment is gone from ZooKeeper (deleted meanwhile): the local topic
    cannot be made with its partition count, and the partition is refused."""
    async def test(b):
        del b.zookeeper.assignments[TOPIC]
        before = b.state()
        code, partitions = await b.manager.leader_and_isr(leader_and_isr())
        assert code == ErrorCode.NONE
        assert partitions == [(TOPIC, TOPIC_ID, 0, ErrorCode.KAFKA_STORAGE_ERROR)]
        # The request is the current controller's: its epoch is taken, the partition not.
        assert b.state() == dict(before, controller_epoch=CONTROLLER_EPOCH)
        assert b.roles == [] and b.db.list_topics() == []
    run(tmp_path, test, leading=False)


# -- StopReplica ------------------------------------------------------------------------------

def test_stop_replica_while_stopping_is_refused_broker_not_available(tmp_path):
    async def test(b):
        await b.manager.stop()
        before = b.state()
        code, partitions = await b.manager.stop_replicas(stop_replica(delete=True))
        assert code == ErrorCode.BROKER_NOT_AVAILABLE
        assert partitions == [(TOPIC, 0, ErrorCode.BROKER_NOT_AVAILABLE)]
        assert b.state() == before and b.roles == []
    run(tmp_path, test)


def test_stop_replica_from_an_older_controller_is_refused_stale_controller_epoch(tmp_path):
    async def test(b):
        before = b.state()
        code, partitions = await b.manager.stop_replicas(
            stop_replica(delete=True, controller_epoch=CONTROLLER_EPOCH - 1))
        assert code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert partitions == [(TOPIC, 0, ErrorCode.STALE_CONTROLLER_EPOCH)]
        assert b.state() == before and b.roles == []
    run(tmp_path, test)


def test_stop_replica_to_an_older_broker_epoch_is_refused_stale_broker_epoch(tmp_path):
    async def test(b):
        before = b.state()
        code, partitions = await b.manager.stop_replicas(
            stop_replica(delete=True, broker_epoch=BROKER_EPOCH - 1))
        assert code == ErrorCode.STALE_BROKER_EPOCH
        assert partitions == [(TOPIC, 0, ErrorCode.STALE_BROKER_EPOCH)]
        assert b.state() == before and b.roles == []
    run(tmp_path, test)


def test_stop_replica_below_the_held_leader_epoch_is_refused_fenced_leader_epoch(tmp_path):
    async def test(b):
        before = b.state()
        code, partitions = await b.manager.stop_replicas(
            stop_replica(leader_epoch=LEADER_EPOCH - 1, delete=True))
        assert code == ErrorCode.NONE
        assert partitions == [(TOPIC, 0, ErrorCode.FENCED_LEADER_EPOCH)]
        assert b.state() == before and b.roles == []
    run(tmp_path, test)


@pytest.mark.parametrize("leader_epoch", [LEADER_DURING_DELETE, -1])
def test_stop_replica_with_the_deletion_or_no_epoch_marker_skips_the_epoch_check(
        tmp_path, leader_epoch):
    async def test(b):
        code, partitions = await b.manager.stop_replicas(
            stop_replica(leader_epoch=leader_epoch, delete=True))
        assert (code, partitions) == (ErrorCode.NONE, [(TOPIC, 0, ErrorCode.NONE)])
        assert b.manager.hosted_replicas() == []
        assert b.roles == [([], [(TOPIC, 0)])]
    run(tmp_path, test)


# -- UpdateMetadata ---------------------------------------------------------------------------

def test_update_metadata_to_an_older_broker_epoch_is_refused_stale_broker_epoch(tmp_path):
    async def test(b):
        before = b.state()
        assert b.manager.update_metadata(update_metadata(broker_epoch=BROKER_EPOCH - 1)) == \
            ErrorCode.STALE_BROKER_EPOCH
        assert b.state() == before and not b.cache.heard_from_controller
    run(tmp_path, test)


def test_update_metadata_from_an_older_controller_is_refused_stale_controller_epoch(tmp_path):
    """The controller epoch heard in LeaderAndIsr fences an older controller's
    UpdateMetadata, though the cache itself has heard from no controller yet."""
    async def test(b):
        before = b.state()
        assert b.manager.update_metadata(
            update_metadata(controller_epoch=CONTROLLER_EPOCH - 1)) == \
            ErrorCode.STALE_CONTROLLER_EPOCH
        assert b.state() == before and not b.cache.heard_from_controller
        assert b.manager.update_metadata(update_metadata()) == ErrorCode.NONE
        assert b.cache.controller_epoch == CONTROLLER_EPOCH and b.cache.is_alive(1)
    run(tmp_path, test)
