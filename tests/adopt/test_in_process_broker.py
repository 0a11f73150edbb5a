"""The application as one node of a three-broker cluster (cluster/in_process.py): its
embedded data dir adopted as it starts, acks=all appends through the leader path with
min.insync.replicas while the other brokers die, reads of a follower replica pinned at
its high watermark, appends refused where it does not lead (and their batches sent to
the leader over the wire, deduplicated there), a controlled close."""

import os
import signal

import pytest

import kqlite
from kqlite.cluster.in_process import InProcessAppendError, InProcessCommitError, open_broker
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol import ErrorCode

from brokers import ClusterBroker, start_registered, until, wait_registered

confluent = pytest.importorskip("confluent_kafka")


@pytest.fixture
def two_brokers(tmp_path, zk_hosts, zk_client):
    brokers = [ClusterBroker(b, tmp_path / f"broker-{b}", zk_hosts) for b in (2, 3)]
    zk = zk_client()
    try:
        start_registered(brokers, zk)
        yield brokers
    except BaseException:
        for b in brokers:
            print(f"--- broker {b.broker_id} ---\n{b.log()}")
        raise
    finally:
        for b in brokers:
            if b.alive:
                os.kill(b.proc.pid, signal.SIGCONT)
            b.kill()


def _state(zk, topic, p=0):
    return ZkStore(zk).partition_state(topic, p)


def _until_isr(zk, broker, isr, what):
    # ZooKeeper has the new ISR before the leader has the controller's answer: the
    # leader's own view is the one its appends are admitted by.
    until(lambda: sorted(_state(zk, "events").isr) == isr and
          sorted(broker.node.replicas.hosted("events", 0).isr) == isr, what)


def test_acks_all_appends_in_process_while_the_other_brokers_die(tmp_path, zk_hosts,
                                                                 zk_client, two_brokers):
    app = tmp_path / "app"
    with kqlite.open(app) as db:
        db.create_topic("events", partitions=1, config={"min.insync.replicas": 2})
        db.log("events", 0).append([b"embedded %d" % i for i in range(10)])
    zk = zk_client()
    broker = open_broker(str(app), zookeeper=zk_hosts, broker_id=1,
                         default_replication_factor=3, replica_lag_time_max_ms=1500)
    try:
        until(lambda: sorted(_state(zk, "events").isr) == [1, 2, 3], "the ISR complete")
        acked = [broker.append("events", 0, [b"all %d" % i]) for i in range(5)]
        assert acked == list(range(10, 15))
        two_brokers[1].kill()
        _until_isr(zk, broker, [1, 2], "broker 3 out of the ISR")
        acked.append(broker.append("events", 0, [b"two replicas"]))
        two_brokers[0].kill()
        _until_isr(zk, broker, [1], "broker 2 out of the ISR")
        with pytest.raises(InProcessAppendError) as refused:
            broker.append("events", 0, [b"one replica"])
        assert refused.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        # acks=1 is written, but with the ISR below min.insync.replicas the HW stays
        # (KAFKA-15583): in-process reads end where the committed records end.
        assert broker.append("events", 0, [b"acks=1"], acks=1) == 16
        assert broker.log_end("events", 0) == 17
        assert broker.high_watermark("events", 0) == 16
        values = [r.value for r in broker.read("events", 0)]
        assert values[:10] == [b"embedded %d" % i for i in range(10)]
        assert values[10:] == [b"all %d" % i for i in range(5)] + [b"two replicas"]
    finally:
        broker.close(controlled=False)


def test_reads_on_a_follower_never_pass_the_high_watermark(tmp_path, zk_hosts, zk_client,
                                                           two_brokers):
    from confluent_kafka.admin import AdminClient, NewTopic
    broker = open_broker(str(tmp_path / "app"), zookeeper=zk_hosts, broker_id=1)
    zk = zk_client()
    try:
        bootstrap = ",".join(b.address for b in two_brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("pinned", 1, -1, replica_assignment=[[2, 1, 3]])])[
            "pinned"].result(30)
        until(lambda: (s := _state(zk, "pinned")) is not None and sorted(s.isr) == [1, 2, 3],
              "the ISR complete")
        # The controller writes the ISR before broker 1 has its LeaderAndIsr, and its
        # UpdateMetadata (which names the leader to broker 1) comes after that: the topic
        # is asked of broker 1's data dir first, so the log is read only once it is there.
        until(lambda: "pinned" in broker.db.list_topics() and
              broker.log_end("pinned", 0) == 0 and broker.leader("pinned", 0) == 2,
              "broker 1 hosting its replica and knowing its leader")
        # Broker 3 stays in the ISR without fetching (30 s before it is dropped): the HW
        # is pinned at 0 while broker 1 copies the records.
        os.kill(two_brokers[1].proc.pid, signal.SIGSTOP)
        producer = confluent.Producer({"bootstrap.servers": bootstrap, "acks": 1})
        for i in range(20):
            producer.produce("pinned", value=b"r%d" % i, partition=0)
        producer.flush(30)
        until(lambda: broker.log_end("pinned", 0) == 20, "broker 1 copying the records")
        assert broker.high_watermark("pinned", 0) == 0
        assert broker.read("pinned", 0, 0) == []
        with pytest.raises(InProcessAppendError) as refused:
            broker.append("pinned", 0, [b"not the leader"])
        assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert refused.value.leader == 2
        # Hostile calls: refused before anything reaches the partition.
        with pytest.raises(InProcessAppendError) as unknown:
            broker.append("no-such-topic", 0, [b"x"])
        assert unknown.value.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(InProcessAppendError) as bad_name:
            broker.append("../escape", 0, [b"x"])
        assert bad_name.value.error_code in (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        for acks in (2, "all"):
            with pytest.raises(ValueError, match="acks"):
                broker.append("pinned", 0, [b"x"], acks=acks)
        with pytest.raises(ValueError, match="at least one record"):
            broker.append("pinned", 0, [])
        with pytest.raises(kqlite.errors.InvalidRecordError):
            broker.append("pinned", 0, [12345])
        os.kill(two_brokers[1].proc.pid, signal.SIGCONT)
        until(lambda: broker.high_watermark("pinned", 0) == 20, "the HW moving on")
        assert [r.offset for r in broker.read("pinned", 0, 0)] == list(range(20))
    finally:
        broker.close()


def _groups_by_coordinator(broker, wanted):
    """A group id coordinated by each broker id of ``wanted`` ({id: group})."""
    found = {}
    for i in range(500):
        coordinator = broker.group_coordinator(f"group-{i}")
        if coordinator in wanted and coordinator not in found:
            found[coordinator] = f"group-{i}"
    return found


def test_the_embedded_producer_and_consumer_calls_in_process(tmp_path, zk_hosts, zk_client,
                                                             two_brokers):
    app = tmp_path / "app"
    with kqlite.open(app) as db:
        db.create_topic("orders", partitions=2, config={"min.insync.replicas": 2})
        with db.producer() as embedded:
            embedded.send("orders", b"embedded", partition=0).result()
    zk = zk_client()
    broker = open_broker(str(app), zookeeper=zk_hosts, broker_id=1,
                         default_replication_factor=3)
    try:
        until(lambda: all(sorted(_state(zk, "orders", p).isr) == [1, 2, 3] for p in (0, 1)),
              "the ISRs complete")
        # Adopted partitions are placed with broker 1 first: keyless sends go round the
        # partitions it leads; a send where it does not lead is refused in its future.
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": two_brokers[0].address})
        admin.create_topics([NewTopic("elsewhere", 1, -1, replica_assignment=[[2, 1, 3]])])[
            "elsewhere"].result(30)
        producer = broker.producer(acks="all")
        sent = [producer.send("orders", b"v%d" % i).result() for i in range(3)]
        assert sorted((m.partition, m.offset) for m in sent) == [(0, 1), (0, 2), (1, 0)]
        keyed = producer.send("orders", b"keyed", key=b"k", partition=0,
                              headers=[("h", b"1")]).result()
        assert keyed.offset == 3
        until(lambda: broker.leader("elsewhere", 0) == 2, "broker 2 leading elsewhere-0")
        with pytest.raises(InProcessAppendError) as refused:
            producer.send("elsewhere", b"x").result()
        assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # The refused batch, sent to the leader over the wire twice (a retry whose first
        # answer was lost): its producer id and sequence make the second a duplicate.
        assert producer.producer_id[0] >= 0
        assert broker.send_to_leader("elsewhere", 0, refused.value.batch) == 0
        assert broker.send_to_leader("elsewhere", 0, refused.value.batch) == 0
        until(lambda: broker.high_watermark("elsewhere", 0) == 1, "elsewhere-0 replicated")
        assert [r.value for r in broker.read("elsewhere", 0)] == [b"x"]
        with pytest.raises(ValueError, match="acks"):
            broker.send_to_leader("elsewhere", 0, refused.value.batch, acks=0)
        with pytest.raises(InProcessAppendError) as nowhere:
            broker.send_to_leader("no-such-topic", 0, refused.value.batch)
        assert nowhere.value.error_code == ErrorCode.LEADER_NOT_AVAILABLE
        producer.flush()
        with pytest.raises(kqlite.errors.ConfigError, match="linger_ms"):
            broker.producer(linger_ms=5)
        with pytest.raises(kqlite.errors.ConfigError, match="acks"):
            broker.producer(acks=2)
        # The consumer reads every replica of the topic in-process, up to its HW.
        consumer = broker.consumer("orders")
        records = list(consumer)
        assert [(r.partition, r.offset) for r in records] == [
            (0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
        assert {r.value for r in records} == {b"embedded", b"v0", b"v1", b"v2", b"keyed"}
        assert (records[3].value, records[3].key, records[3].headers) == (
            b"keyed", b"k", (("h", b"1"),))
        assert consumer.poll(timeout_ms=50) == []
        with pytest.raises(kqlite.errors.ConfigError, match="group"):
            consumer.commit()
        # Commits go to the cluster's group coordinator: stored where broker 1 is it,
        # refused naming the coordinator where it is not.
        probe = confluent.Consumer({"bootstrap.servers": two_brokers[0].address,
                                    "group.id": "probe"})
        probe.committed([confluent.TopicPartition("orders", 0)], timeout=30)
        probe.close()
        until(lambda: len(_groups_by_coordinator(broker, (1, 2, 3))) == 3,
              "__consumer_offsets led by all three brokers")
        groups = _groups_by_coordinator(broker, (1, 2, 3))
        mine = broker.consumer("orders", group=groups[1])
        assert len(mine.poll(max_records=2)) == 2
        mine.commit()
        assert mine.committed(("orders", 0)) == 2
        resumed = broker.consumer("orders", group=groups[1])
        assert (resumed.position(("orders", 0)), resumed.position(("orders", 1))) == (2, 0)
        assert [(r.partition, r.offset) for r in resumed.poll()] == [(0, 2), (0, 3), (1, 0)]
        with pytest.raises(InProcessCommitError) as refused:
            broker.consumer("orders", group=groups[2])
        assert refused.value.error_code == ErrorCode.NOT_COORDINATOR
        assert refused.value.coordinator == 2
        # A group with members: a commit without membership is refused, as Kafka's.
        member = confluent.Consumer({"bootstrap.servers": two_brokers[0].address,
                                     "group.id": groups[1], "auto.offset.reset": "latest"})
        member.subscribe(["orders"])
        until(lambda: member.poll(0.2) is None and member.assignment(), "a member assigned")
        with pytest.raises(InProcessCommitError) as fenced:
            resumed.commit()
        assert fenced.value.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        member.close()
        latest = broker.consumer("orders", auto_offset_reset="latest")
        assert (latest.position(("orders", 0)), latest.poll()) == (4, [])
        with pytest.raises(kqlite.errors.ConfigError, match="enable_auto_commit"):
            broker.consumer("orders", group=groups[1], enable_auto_commit=True)
    finally:
        broker.close()


def test_an_acknowledged_record_is_readable_in_process_on_every_replica(tmp_path, zk_hosts,
                                                                        zk_client):
    # Three in-process brokers, each on a loop and thread of its own in this process: every
    # replica of the partition can be read through the in-process API.
    app = tmp_path / "app"
    with kqlite.open(app) as db:
        db.create_topic("events", partitions=1, config={"min.insync.replicas": 2})
    zk = zk_client()
    brokers = []
    try:
        for b in (2, 3):
            brokers.append(open_broker(str(tmp_path / f"broker-{b}"), zookeeper=zk_hosts,
                                       broker_id=b))
        wait_registered(zk, (2, 3))
        leader = open_broker(str(app), zookeeper=zk_hosts, broker_id=1,
                             default_replication_factor=3)
        brokers.insert(0, leader)
        until(lambda: sorted(_state(zk, "events").isr) == [1, 2, 3], "the ISR complete")
        producer = leader.producer(acks="all")
        for i in range(5):
            offset = producer.send("events", b"r%d" % i).result().offset
            # Acknowledged: every ISR member holds it; each serves it once its HW (the
            # leader's, carried by its next fetch, up to replica.fetch.wait.max.ms later)
            # has passed it: the replication lag.
            for b in brokers:
                until(lambda b=b: [r.value for r in b.read("events", 0, offset, 1)] ==
                      [b"r%d" % i], f"r{i} readable on broker {b.broker_id}", timeout=10,
                      interval=0.005)
        for b in brokers:
            assert [r.value for r in b.read("events", 0)] == [b"r%d" % i for i in range(5)]
    finally:
        for b in reversed(brokers):
            b.close(controlled=False)
