"""kqlite's ZooKeeper operations against a real ZooKeeper server: registration and broker
epochs, controller election and epoch fencing, topics, partition states, producer ids."""

import json
import threading

import pytest

from kqlite.cluster.rules.partition_state import PartitionState
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.store import BrokerIdInUseError, ControllerMovedError, ZkStore
from kqlite.errors import TopicExistsError, UnknownTopicError


@pytest.fixture
def store(zk_client):
    s = ZkStore(zk_client())
    s.ensure_paths()
    return s


def test_persistent_paths_and_cluster_id(store, zk_client):
    for path in zn.PERSISTENT_PATHS:
        assert store.zk.exists(path) is not None, path
    first = store.cluster_id()
    other = ZkStore(zk_client())
    assert other.cluster_id() == first and len(first) == 22
    assert json.loads(store.zk.get("/cluster/id")[0]) == {"version": "1", "id": first}


def test_registration_is_ephemeral_and_the_epoch_is_the_czxid(store, zk_client):
    epoch = store.register_broker(zn.BrokerInfo.plaintext(1, "127.0.0.1", 9001))
    data, stat = store.zk.get("/brokers/ids/1")
    assert epoch == stat.czxid and stat.ephemeralOwner == store.zk.client_id[0]
    assert json.loads(data)["endpoints"] == ["PLAINTEXT://127.0.0.1:9001"]
    # Registering again in the same session keeps the node and the epoch.
    assert store.register_broker(zn.BrokerInfo.plaintext(1, "127.0.0.1", 9001)) == epoch
    # Another live broker cannot take the id.
    other = ZkStore(zk_client())
    with pytest.raises(BrokerIdInUseError):
        other.register_broker(zn.BrokerInfo.plaintext(1, "127.0.0.1", 9002))
    seen = other.brokers()
    assert seen == {1: zn.BrokerInfo.plaintext(1, "127.0.0.1", 9001, None, epoch)}
    # When the first broker's session ends the node goes, and a re-registration (a bounced
    # broker) gets a larger epoch.
    store.zk.stop()
    assert other.zk.exists("/brokers/ids/1") is None
    assert other.register_broker(zn.BrokerInfo.plaintext(1, "127.0.0.1", 9001)) > epoch


def test_election_race_has_exactly_one_winner(zk_client):
    stores = [ZkStore(zk_client()) for _ in range(5)]
    stores[0].ensure_paths()
    wins, losses = [], []
    barrier = threading.Barrier(len(stores))

    def run(i):
        barrier.wait()
        try:
            wins.append((i, stores[i].elect_controller(i)))
        except ControllerMovedError:
            losses.append(i)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 4
    winner, (epoch, version) = wins[0]
    # The first controller of a fresh cluster has epoch 1 at zkVersion 1, as in Kafka.
    assert (epoch, version) == (1, 1)
    assert stores[1].controller_id() == winner
    assert stores[1].controller_epoch() == (1, 1)


def test_a_replaced_controller_is_fenced(zk_client):
    old = ZkStore(zk_client())
    old.ensure_paths()
    _, old_version = old.elect_controller(1)
    new = ZkStore(zk_client())
    # The old controller's session ends (as after a pause past the session timeout): the
    # ephemeral /controller goes and another broker wins with the next epoch.
    old.zk.stop()
    epoch, new_version = new.elect_controller(2)
    assert epoch == 2 and new_version == old_version + 1
    # The zombie comes back with its old epoch zkVersion: every write it tries fails the
    # check and changes nothing.
    zombie = ZkStore(zk_client())
    zombie.create_topic("t", zn.TopicAssignment(None, {0: (1,)}), {})
    state = PartitionState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
    with pytest.raises(ControllerMovedError):
        zombie.create_partition_states("t", {0: state}, old_version)
    assert zombie.partition_state("t", 0) is None
    with pytest.raises(ControllerMovedError):
        zombie.fenced(old_version, lambda tx: tx.delete("/controller"))
    zombie.resign_controller(old_version)      # a stale resignation is a no-op
    assert new.controller_id() == 2
    # The real controller's writes go through.
    new.create_partition_states("t", {0: state._replace(controller_epoch=2)}, new_version)
    assert zombie.partition_state("t", 0).controller_epoch == 2


def test_partition_state_updates_are_conditional_on_the_partition_epoch(store):
    _, fence = store.elect_controller(1)
    store.create_topic("t", zn.TopicAssignment(None, {0: (1, 2, 3)}), {})
    store.create_partition_states("t", {0: PartitionState(1, 0, (1, 2, 3), 1)}, fence)
    current = store.partition_state("t", 0)
    assert current.partition_epoch == 0
    shrunk = current._replace(isr=(1, 2))
    assert store.update_partition_state("t", 0, shrunk, fence) == 1
    # A writer still holding partition epoch 0 loses: None tells it to re-read and retry.
    assert store.update_partition_state("t", 0, current._replace(leader=2), fence) is None
    assert store.partition_state("t", 0) == shrunk._replace(partition_epoch=1)


def test_topics_configs_and_deletion_markers(store):
    _, fence = store.elect_controller(1)
    assignment = zn.TopicAssignment(None, {0: (1,), 1: (1,)})
    store.create_topic("orders", assignment, {"min.insync.replicas": "2"})
    with pytest.raises(TopicExistsError):
        store.create_topic("orders", assignment, {})
    assert store.topics() == ["orders"]
    assert store.topic_assignment("orders").partitions == {0: (1,), 1: (1,)}
    assert store.topic_config("orders") == {"min.insync.replicas": "2"}
    store.set_topic_config("orders", {"retention.ms": "1000"})
    assert store.topic_config("orders") == {"retention.ms": "1000"}
    changes = store.zk.get_children("/config/changes")
    assert changes == ["config_change_0000000000"]
    assert json.loads(store.zk.get("/config/changes/" + changes[0])[0])["entity_path"] == \
        "topics/orders"
    with pytest.raises(UnknownTopicError):
        store.mark_topic_for_deletion("nope")
    store.mark_topic_for_deletion("orders")
    assert store.topics_marked_for_deletion() == ["orders"]
    store.create_partition_states("orders", {0: PartitionState(1, 0, (1,), 1),
                                             1: PartitionState(1, 0, (1,), 1)}, fence)
    store.delete_topic_znodes("orders", fence)
    assert store.topics() == [] and store.topics_marked_for_deletion() == []
    assert store.zk.exists("/config/topics/orders") is None


def test_producer_id_blocks_are_unique_across_brokers(zk_client):
    stores = [ZkStore(zk_client()) for _ in range(4)]
    blocks = []
    lock = threading.Lock()

    def take(i):
        for _ in range(5):
            b = stores[i].allocate_producer_id_block(i)
            with lock:
                blocks.append(b)
    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    firsts = sorted(b.first for b in blocks)
    assert firsts == [i * zn.PRODUCER_ID_BLOCK_SIZE for i in range(20)]
    assert all(b.last == b.first + zn.PRODUCER_ID_BLOCK_SIZE - 1 for b in blocks)


def test_a_mirrored_producer_id_is_never_handed_out(zk_client):
    """A mirror copies producer ids another cluster gave (kqlite/server/mirror_append.py):
    the broker's own block skips them, and no block claimed afterwards holds them."""
    from kqlite.cluster.zookeeper.producer_ids import ZkProducerIds
    store = ZkStore(zk_client())
    mine, other = ZkProducerIds(store, 1), ZkProducerIds(store, 2)
    assert mine.allocate() == 0                   # broker 1 holds the block 0-999
    mine.reserve_above(5)
    assert mine.allocate() == 6                   # inside its block: skipped past
    mine.reserve_above(3)                         # already handed past: nothing changes
    assert mine.allocate() == 7
    mine.reserve_above(2500)                      # past every block: ZooKeeper's moves
    assert mine.allocate() == 2501                # and its own block is given up
    assert other.allocate() == 2501 + zn.PRODUCER_ID_BLOCK_SIZE
    store.reserve_producer_ids_above(9, 10)       # below the latest block: nothing
    assert zn.decode_producer_id_block(store.zk.get(zn.LATEST_PRODUCER_ID_BLOCK)[0]).last \
        == 2500 + 2 * zn.PRODUCER_ID_BLOCK_SIZE
