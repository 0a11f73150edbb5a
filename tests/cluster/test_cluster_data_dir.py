"""A cluster broker's data dir, from the outside: three real ``kqlite serve --zookeeper``
brokers (high watermarks checkpointed every 200 ms), confluent-kafka producing with
acks=all, and this process opening the brokers' data dirs with ``kqlite.open``.

- Each broker's ``replication-offset-checkpoint`` comes to hold every partition's high
  watermark; embedded reads of a running broker's dir see exactly the records below it,
  in order, and writes (Producer, topic creation, offset commits) are refused with
  ReplicatedPartitionError.
- A broker killed with SIGKILL after the interval leaves each partition's HW in its file,
  and its dir still reads up to there.
- A broker whose data dir's meta.properties names another broker id refuses to start.
- The Spark source reads the cluster through kafka.bootstrap.servers (the session
  fixture of tests/spark), rows equal to what was produced.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

import kqlite
from kqlite.errors import ReplicatedPartitionError
from kqlite.storage.checkpoint import read_offsets
from kqlite.storage.fs import DEFAULT_FS

from cluster_processes import running_cluster, until

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

WAIT = 90              # seconds: liveness guards only, never a pass/fail timing
PARTITIONS = 3


def _load_spark_fixture():
    # tests/spark/conftest.py's session-wide SparkSession, shared with the Spark tests.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spark",
                        "conftest.py")
    spec = importlib.util.spec_from_file_location("kqlite_spark_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.spark


spark = _load_spark_fixture()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zk_module_hosts):
    with running_cluster(tmp_path_factory.mktemp("cluster"), zk_module_hosts,
                         ["--replica-high-watermark-checkpoint-interval-ms", "200"]) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        futures = admin.create_topics([NewTopic("events", PARTITIONS, 3)], request_timeout=60)
        futures["events"].result(timeout=WAIT)
        yield c


@pytest.fixture(scope="module")
def produced(cluster):
    """{partition: [values]} produced with acks=all, every one acknowledged."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked = {p: [] for p in range(PARTITIONS)}
    failures = []

    def report(err, msg):
        if err is not None:
            failures.append(err)
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(600):
        producer.produce("events", b"v%04d" % i, partition=i % PARTITIONS, on_delivery=report)
        producer.poll(0)
    assert producer.flush(WAIT) == 0 and not failures
    return {p: [v for _o, v in sorted(values)] for p, values in acked.items()}


def _checkpoint(broker):
    return read_offsets(DEFAULT_FS, os.path.join(broker.data_dir,
                                                 "replication-offset-checkpoint"))


def _checkpointed_everything(broker, produced):
    found = _checkpoint(broker)
    return all(found.get(("events", p)) == len(v) for p, v in produced.items())


def _read_dir(data_dir):
    """{partition: (high watermark, [values read])} through the embedded API."""
    out = {}
    with kqlite.open(data_dir) as db:
        for p in range(PARTITIONS):
            with db.leased_log("events", p) as lg:
                hw = lg.high_watermark
                out[p] = (hw, [r.value for r in lg.read()])
    return out


def test_embedded_reads_of_running_brokers_stop_at_each_hw(cluster, produced):
    for b in (1, 2, 3):
        until(lambda b=b: _checkpointed_everything(cluster[b], produced),
              f"broker {b} checkpointed every partition's high watermark")
        seen = _read_dir(cluster[b].data_dir)
        checkpoint = _checkpoint(cluster[b])
        for p, (hw, values) in seen.items():
            assert hw == checkpoint[("events", p)]
            assert values == produced[p][:hw]
        assert {p: hw for p, (hw, _v) in seen.items()} == \
            {p: len(v) for p, v in produced.items()}


def test_embedded_writes_to_a_running_broker_are_refused(cluster, produced):
    with kqlite.open(cluster[1].data_dir) as db:
        with pytest.raises(ReplicatedPartitionError, match="'events'.*through the cluster"):
            db.producer().send("events", b"sneaky")
        with pytest.raises(ReplicatedPartitionError):
            db.create_topic("other", 1)
        with pytest.raises(ReplicatedPartitionError, match="__consumer_offsets"):
            db.offsets.commit("g", {("events", 0): 1})
        with db.leased_log("events", 0) as lg:
            with pytest.raises(ReplicatedPartitionError):
                lg.append(b"sneaky")
    assert _read_dir(cluster[1].data_dir)[0][1] == produced[0]


def test_spark_reads_the_cluster_through_its_brokers(spark, cluster, produced):
    df = (spark.read.format("kqlite").option("kafka.bootstrap.servers", cluster.bootstrap)
          .option("subscribe", "events").load())
    got = {p: [] for p in range(PARTITIONS)}
    for row in sorted(df.collect(), key=lambda r: (r.partition, r.offset)):
        got[row.partition].append(bytes(row.value))
    assert got == produced


def test_a_killed_broker_leaves_every_hw_in_its_checkpoint(cluster, produced):
    victim = cluster[3]
    until(lambda: _checkpointed_everything(victim, produced), "broker 3's checkpoint")
    victim.kill()
    assert {p: _checkpoint(victim)[("events", p)] for p in range(PARTITIONS)} == \
        {p: len(v) for p, v in produced.items()}
    seen = _read_dir(victim.data_dir)      # a stopped broker's dir reads the same way
    assert {p: values for p, (_hw, values) in seen.items()} == produced


def test_a_broker_refuses_a_data_dir_of_another_broker_id(cluster, tmp_path):
    data_dir = cluster[1].data_dir         # broker 1's dir, offered to a "broker 7"
    proc = subprocess.run(
        [sys.executable, "-m", "kqlite.cli", "serve", "--data-dir", data_dir,
         "--listen", "127.0.0.1:0", "--broker-id", "7", "--zookeeper", cluster.zk_hosts],
        capture_output=True, text=True, timeout=WAIT)
    assert proc.returncode != 0
    assert "broker.id=1" in proc.stderr and "--broker-id 1" in proc.stderr
    meta = open(os.path.join(data_dir, "meta.properties")).read()
    assert "broker.id=1" in meta and "version=0" in meta and "cluster.id=" in meta
