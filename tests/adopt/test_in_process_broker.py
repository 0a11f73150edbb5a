"""The application as one node of a three-broker cluster (cluster/in_process.py): its
embedded data dir adopted as it starts, acks=all appends through the leader path with
min.insync.replicas while the other brokers die, reads of a follower replica pinned at
its high watermark, appends refused where it does not lead, a controlled close."""

import os
import signal

import pytest

import kqlite
from kqlite.cluster.in_process import InProcessAppendError, open_broker
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol import ErrorCode

from brokers import FastBroker, until

confluent = pytest.importorskip("confluent_kafka")


@pytest.fixture
def two_brokers(tmp_path, zk_hosts, zk_client):
    brokers = [FastBroker(b, tmp_path / f"broker-{b}", zk_hosts) for b in (2, 3)]
    zk = zk_client()
    try:
        for b in brokers:
            b.start()
        for b in brokers:
            b.wait_listening()
        until(lambda: len(zk.get_children("/brokers/ids")) == 2, "brokers 2 and 3 registered")
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
        until(lambda: sorted(_state(zk, "events").isr) == [1, 2], "broker 3 out of the ISR")
        acked.append(broker.append("events", 0, [b"two replicas"]))
        two_brokers[0].kill()
        until(lambda: sorted(_state(zk, "events").isr) == [1], "broker 2 out of the ISR")
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
        until(lambda: broker.log_end("pinned", 0) == 0 and
              broker.db.list_topics().count("pinned"), "broker 1 hosting its replica")
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
