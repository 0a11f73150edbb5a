"""The issue's must-show: records (100,000 with --soak, 20,000 in the default run) and
group commits written through the embedded API, the data dir adopted by a broker joining
a 3-broker cluster; every record at its original offset on all three replicas (the
batches byte for byte), the group's committed offsets in the cluster, and a consumer of
the group resuming there."""

import os
import signal

import pytest

import kqlite
from kqlite.cluster.zookeeper.store import ZkStore

from brokers import ClusterBroker, start_registered, until

confluent = pytest.importorskip("confluent_kafka")

TOPIC = "orders"
PARTITIONS = 2


def _write_embedded(path, count, commits):
    """``count`` records over the topic's partitions and ``commits`` group commits; the
    batches of each partition as (base offset, bytes) and the group's last commits."""
    with kqlite.open(path) as db:
        db.create_topic(TOPIC, partitions=PARTITIONS)
        per = count // PARTITIONS
        for p in range(PARTITIONS):
            lg = db.log(TOPIC, p)
            step = 1000
            for start in range(0, per, step):
                lg.append([b"record-%d-%d" % (p, i) for i in range(start, min(start + step, per))])
        consumer = db.consumer(TOPIC, group="app", enable_auto_commit=False)
        last = {}
        for i in range(1, commits + 1):
            last = {(TOPIC, p): i * (per - 100) // commits - p for p in range(PARTITIONS)}
            consumer.commit(last)
        consumer.close(commit=False)
        batches = {p: _batches(db.log(TOPIC, p)) for p in range(PARTITIONS)}
    return batches, last


def _batches(lg, end=None):
    out = []
    offset = lg.start_offset
    end = lg.end_offset if end is None else end
    while offset < end:
        data = bytes(lg.read_batches(offset, 1 << 20))
        pos = 0
        from kqlite.format.batch import parse_header
        while pos < len(data):
            h = parse_header(data, pos)
            if h.base_offset >= end:
                break
            out.append((h.base_offset, data[pos:pos + h.size]))
            pos += h.size
            offset = h.last_offset + 1
    return out


def _states(zk_client, topic):
    store = ZkStore(zk_client)
    return {p: store.partition_state(topic, p) for p in range(PARTITIONS)}


def test_an_embedded_dir_joins_a_three_broker_cluster(tmp_path, zk_hosts, zk_client, soak):
    count = 100_000 if soak else 20_000     # the 100,000 with --soak
    app_dir = tmp_path / "broker-1"
    originals, commits = _write_embedded(app_dir, count, commits=200)
    others = [ClusterBroker(b, tmp_path / f"broker-{b}", zk_hosts) for b in (2, 3)]
    adopting = ClusterBroker(1, app_dir, zk_hosts, ["--default-replication-factor", "3",
                                                    "--offsets-topic-replication-factor", "3"])
    brokers = [adopting] + others
    zk = zk_client()
    try:
        start_registered(others, zk)
        adopting.start().wait_listening()
        until(lambda: all(s is not None and s.leader == 1 and sorted(s.isr) == [1, 2, 3]
                          for s in _states(zk, TOPIC).values()),
              "broker 1 leading every adopted partition, the others in its ISR")
        # The consumer group resumes where the application committed.
        bootstrap = ",".join(b.address for b in brokers)
        consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "app",
                                       "enable.auto.commit": False,
                                       "auto.offset.reset": "earliest"})
        tps = [confluent.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        until(lambda: {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=10)}
              == {p: commits[(TOPIC, p)] for p in range(PARTITIONS)},
              "the group's offsets carried into the cluster")
        consumer.subscribe([TOPIC])
        first = {}
        for _ in range(600):
            if len(first) == PARTITIONS:
                break
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                first.setdefault(msg.partition(), msg.offset())
        consumer.close()
        assert first == {p: commits[(TOPIC, p)] for p in range(PARTITIONS)}
        for b in brokers:
            b.proc.send_signal(signal.SIGTERM)
        for b in brokers:
            assert b.stop() == 0, b.log()
    except BaseException:
        for b in brokers:
            print(f"--- broker {b.broker_id} ---\n{b.log()}")
        raise
    finally:
        for b in brokers:
            b.kill()
    end = count // PARTITIONS
    for b in brokers:
        with kqlite.open(b.data_dir) as db:
            for p in range(PARTITIONS):
                lg = db.log(TOPIC, p)
                assert _batches(lg, end) == originals[p], (b.broker_id, p)


def test_a_broker_refuses_to_adopt_a_topic_name_the_cluster_has(tmp_path, zk_hosts,
                                                               zk_client):
    """``kqlite serve --zookeeper`` on an embedded dir whose topic name the cluster has:
    the broker exits with the reason, naming the topic, and the data dir keeps its
    content (as the embedded API reads it)."""
    from kqlite.cluster.zookeeper import znodes as zn
    app_dir = tmp_path / "app"
    _write_embedded(app_dir, 1000, commits=2)
    store = ZkStore(zk_client())
    store.ensure_paths()
    store.create_topic(TOPIC, zn.TopicAssignment(zn.uuid_from_text("AAAAAAAAAAAAAAAAAAAAAQ"),
                                                 {0: (2,)}), {})
    broker = ClusterBroker(1, app_dir, zk_hosts).start()
    try:
        assert broker.proc.wait(60) == 1
    finally:
        broker.kill()
    broker.stop()
    assert f"'{TOPIC}' already exist in the cluster" in broker.log()
    assert not os.path.exists(app_dir / ".kqlite-replicated")
    with kqlite.open(app_dir) as db:
        assert db.log(TOPIC, 0).append([b"still embedded"]) == 500


def test_a_broker_finishes_an_adoption_made_by_the_cli(tmp_path, zk_hosts, zk_client):
    """``kqlite cluster adopt`` leaves the data dir marked, its journal waiting for the
    broker to carry the committed offsets: the broker started on it resumes there (its
    Database writable, as any cluster broker's), carries them and removes the journal."""
    from brokers import kqlite_cli
    app_dir = tmp_path / "app"
    _, commits = _write_embedded(app_dir, 2000, commits=3)
    code, out, err = kqlite_cli("cluster", "adopt", "--data-dir", str(app_dir),
                                "--zookeeper", zk_hosts, "--broker-id", "1")
    assert code == 0, err
    assert os.path.exists(app_dir / ".kqlite" / "adoption" / "journal.json")
    broker = ClusterBroker(1, app_dir, zk_hosts, ["--offsets-topic-replication-factor", "1"])
    try:
        broker.start().wait_listening()
        until(lambda: not os.path.exists(app_dir / ".kqlite" / "adoption" / "journal.json"),
              "the offsets carried and the journal removed")
        consumer = confluent.Consumer({"bootstrap.servers": broker.address,
                                       "group.id": "app", "enable.auto.commit": False})
        tps = [confluent.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        assert {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=30)} == \
            {p: commits[(TOPIC, p)] for p in range(PARTITIONS)}
        consumer.close()
        producer = confluent.Producer({"bootstrap.servers": broker.address, "acks": "all"})
        delivered = []
        producer.produce(TOPIC, b"after", partition=0,
                         on_delivery=lambda e, m: delivered.append((e, m.offset())))
        producer.flush(30)
        assert delivered == [(None, 1000)]
    except BaseException:
        print(broker.log())
        raise
    finally:
        broker.kill()
