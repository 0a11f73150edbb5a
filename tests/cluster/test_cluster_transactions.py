"""Transactions on a 3-broker cluster (issue 26): the transaction coordinator of each
transactional id runs on the leader of its ``__transaction_state`` partition, its
markers go to partition leaders on other brokers, and the partition leaders verify a
producer's first batch with the coordinator, wherever it is (KIP-890 part 1).

- ``__transaction_state`` is created through ZooKeeper on the first FindCoordinator with
  Kafka's defaults (50 partitions, replication factor 3, min.insync.replicas 2,
  compacted);
- a confluent-kafka transaction spanning three partitions, each led by another broker,
  commits whole; an aborted one is seen by no read_committed reader and whole by a
  read_uncommitted one;
- a consume-transform-produce step commits its input offsets (TxnOffsetCommit) to a group
  whose coordinator is on a third broker, neither the transaction coordinator's nor the
  output's leader; the committed offset follows the transaction's outcome, and an
  aborted commit stays aborted on the group's next coordinator;
- kafka-python's transactional producer commits and aborts on the same cluster;
- a second producer with the same transactional id fences the first (its commit fails);
- only an id's coordinator answers its InitProducerId (the others NOT_COORDINATOR), and
  the producer ids of coordinators on different brokers never collide.

The brokers run with the C helpers whichever pass starts them (this file runs in the
pure-Python pass only). Timings are never asserted.
"""

import os
import time

import pytest

from cluster_processes import Cluster, formed, until

from kqlite.format.internal_topics import kafka_partition_for_key

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

WAIT = 120                    # seconds: liveness guards only
TXN_PARTITIONS = 50           # Kafka's default, which the cluster is left with
OFFSETS_PARTITIONS = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    from kazoo.client import KazooClient
    chroot = f"/kqlite-txn-{time.monotonic_ns()}"
    admin_zk = KazooClient(hosts=zookeeper.connect_string)
    admin_zk.start(timeout=15)
    admin_zk.ensure_path(chroot)
    admin_zk.stop()
    admin_zk.close()
    c = Cluster(tmp_path_factory.mktemp("txn"), zookeeper.connect_string + chroot,
                extra=["--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS)])
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        until(lambda: formed(admin, 3), "every broker registered and a controller elected")
        c.zk_hosts = zookeeper.connect_string + chroot
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.kill()


def _spread_topic(cluster, topic):
    """A topic of three partitions, RF 3, partition p led by broker p+1."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    admin.create_topics([NewTopic(topic, 3, -1, replica_assignment=assignment)],
                        request_timeout=60)[topic].result(timeout=WAIT)

    def led():
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return len(parts) == 3 and all(
            parts[p].leader == p + 1 and len(parts[p].isrs) == 3 for p in range(3))
    until(led, f"{topic}'s preferred leaders and full ISRs")


def _leaders(cluster, topic):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return {p: md.leader for p, md in
            admin.list_topics(topic, timeout=10).topics[topic].partitions.items()}


def _all_led(cluster, topic, count):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    return found is not None and found.error is None and len(found.partitions) == count \
        and all(md.leader >= 0 for md in found.partitions.values())


def _producer(cluster, tid, **extra):
    return confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap,
                                     "transactional.id": tid, "acks": "all", **extra})


def _consume(cluster, topic, isolation, expected, group=None):
    """Every record of ``topic`` a reader at ``isolation`` sees, once it has seen
    ``expected`` (its values), read from the start."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group or f"reader-{os.getpid()}-"
        f"{time.monotonic_ns()}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": isolation})
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + WAIT
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        # A little longer: nothing more may come.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    return seen


def test_transaction_state_is_created_with_kafka_defaults(cluster):
    producer = _producer(cluster, "defaults-probe")
    producer.init_transactions(WAIT)
    from kazoo.client import KazooClient
    import json
    zk = KazooClient(hosts=cluster.zk_hosts)
    zk.start(timeout=15)
    try:
        config = json.loads(zk.get("/config/topics/__transaction_state")[0])["config"]
        assignment = json.loads(zk.get("/brokers/topics/__transaction_state")[0])["partitions"]
    finally:
        zk.stop()
        zk.close()
    assert config["cleanup.policy"] == "compact"
    assert config["min.insync.replicas"] == "2"
    assert config["compression.type"] == "uncompressed"
    assert len(assignment) == TXN_PARTITIONS
    assert {len(replicas) for replicas in assignment.values()} == {3}


def test_a_transaction_across_three_leaders_commits_whole_and_an_abort_is_invisible(cluster):
    topic = "txn-spread"
    _spread_topic(cluster, topic)
    producer = _producer(cluster, "spread-1")
    producer.init_transactions(WAIT)
    producer.begin_transaction()
    for p in range(3):
        for i in range(5):
            producer.produce(topic, value=f"committed-{p}-{i}".encode(), partition=p)
    producer.commit_transaction(WAIT)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=f"aborted-{p}".encode(), partition=p)
    producer.flush(WAIT)
    producer.abort_transaction(WAIT)
    producer.begin_transaction()
    producer.produce(topic, value=b"last", partition=1)
    producer.commit_transaction(WAIT)

    committed = _consume(cluster, topic, "read_committed", 16)
    assert sorted(committed) == sorted([f"committed-{p}-{i}".encode()
                                        for p in range(3) for i in range(5)] + [b"last"])
    everything = _consume(cluster, topic, "read_uncommitted", 19)
    assert sorted(v for v in everything if v.startswith(b"aborted")) == \
        [b"aborted-0", b"aborted-1", b"aborted-2"]


def _keys_on_distinct_brokers(cluster, topic):
    """A transactional id and a group whose coordinators lead on two brokers, and the
    broker neither is on, which leads partition ``output`` of ``topic``."""
    txn_leaders = _leaders(cluster, "__transaction_state")
    offsets_leaders = _leaders(cluster, "__consumer_offsets")
    out_leaders = _leaders(cluster, topic)
    for n in range(1000):
        tid = f"pipeline-{n}"
        txn_broker = txn_leaders[kafka_partition_for_key(tid, TXN_PARTITIONS)]
        for m in range(1000):
            group = f"group-{m}"
            group_broker = offsets_leaders[kafka_partition_for_key(group, OFFSETS_PARTITIONS)]
            if group_broker == txn_broker:
                continue
            for output, leader in out_leaders.items():
                if leader not in (txn_broker, group_broker):
                    return tid, group, output
    raise AssertionError("no transactional id and group on distinct brokers")


def _committed(cluster, group, topic, partition):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap,
                                         "group.id": group})
    try:
        (tp,) = consumer.committed([confluent_kafka.TopicPartition(topic, partition)],
                                   timeout=WAIT)
        return tp.offset
    finally:
        consumer.close()


def test_offsets_commit_to_a_group_coordinator_on_a_third_broker(cluster):
    source, sink = "txn-source", "txn-sink"
    _spread_topic(cluster, sink)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(source, 1, 3)], request_timeout=60)[source].result(WAIT)
    feeder = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        feeder.produce(source, value=f"in-{i}".encode())
    feeder.flush(WAIT)
    producer = _producer(cluster, "probe-txn-state")
    producer.init_transactions(WAIT)            # __transaction_state exists from here
    _committed(cluster, "probe-group", source, 0)   # and __consumer_offsets from here
    for topic, count in (("__transaction_state", TXN_PARTITIONS),
                         ("__consumer_offsets", OFFSETS_PARTITIONS)):
        until(lambda: _all_led(cluster, topic, count), f"{topic} led")
    tid, group, output = _keys_on_distinct_brokers(cluster, sink)

    producer = _producer(cluster, tid)
    producer.init_transactions(WAIT)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed"})
    consumer.subscribe([source])
    try:
        for outcome in ("commit", "abort", "commit"):
            batch = []
            while len(batch) < 5:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    batch.append(msg)
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, value=b"out-" + msg.value(), partition=output)
            producer.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition(source, 0, batch[-1].offset() + 1)],
                consumer.consumer_group_metadata(), WAIT)
            if outcome == "commit":
                producer.commit_transaction(WAIT)
                assert _committed(cluster, group, source, 0) == batch[-1].offset() + 1
            else:
                producer.abort_transaction(WAIT)
                assert _committed(cluster, group, source, 0) == batch[0].offset()
                consumer.seek(confluent_kafka.TopicPartition(source, 0, batch[0].offset()))
    finally:
        consumer.close()
    outputs = _consume(cluster, sink, "read_committed", 10)
    assert sorted(outputs) == sorted(f"out-in-{i}".encode() for i in range(10))


def test_kafka_python_commits_and_aborts_on_the_cluster(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "txn-kafka-python"
    _spread_topic(cluster, topic)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","),
                                   transactional_id="kafka-python-1", acks="all")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(3):
            producer.send(topic, value=f"kp-committed-{p}".encode(), partition=p)
        producer.commit_transaction()
        producer.begin_transaction()
        for p in range(3):
            producer.send(topic, value=f"kp-aborted-{p}".encode(), partition=p)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    seen = _consume(cluster, topic, "read_committed", 3)
    assert sorted(seen) == [b"kp-committed-0", b"kp-committed-1", b"kp-committed-2"]


def test_a_second_producer_with_the_same_id_fences_the_first(cluster):
    topic = "txn-fenced"
    _spread_topic(cluster, topic)
    first = _producer(cluster, "fenced-id")
    first.init_transactions(WAIT)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(WAIT)
    second = _producer(cluster, "fenced-id")
    second.init_transactions(WAIT)          # aborts the first's open transaction
    second.begin_transaction()
    second.produce(topic, value=b"successor", partition=2)
    second.commit_transaction(WAIT)
    with pytest.raises(confluent_kafka.KafkaException) as failed:
        first.commit_transaction(WAIT)
    assert failed.value.args[0].fatal()
    assert _consume(cluster, topic, "read_committed", 1) == [b"successor"]


def test_only_the_coordinator_answers_and_producer_ids_are_unique_across_brokers(cluster):
    """FindCoordinator names the leader of the id's ``__transaction_state`` partition; the
    other brokers answer InitProducerId NOT_COORDINATOR; the producer ids the coordinators
    hand out, from their blocks of ``/latest_producer_id_block``, never collide."""
    from cluster_processes import request
    from kqlite.protocol import ApiKey, ErrorCode
    _producer(cluster, "probe-coordinators").init_transactions(WAIT)
    until(lambda: _all_led(cluster, "__transaction_state", TXN_PARTITIONS),
          "__transaction_state led")
    pids, coordinators = {}, set()
    for n in range(12):
        tid = f"unique-{n}"
        found = until(lambda: (a := request(cluster[1], ApiKey.FIND_COORDINATOR, 3, {
            "key": tid, "key_type": 1}))["error_code"] == ErrorCode.NONE and a,
            f"the coordinator of {tid}")
        coordinator = found["node_id"]
        coordinators.add(coordinator)
        body = {"transactional_id": tid, "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1}
        for other in set(cluster.brokers) - {coordinator}:
            assert request(cluster[other], ApiKey.INIT_PRODUCER_ID, 4, body)["error_code"] \
                == ErrorCode.NOT_COORDINATOR
        answer = until(lambda: (a := request(cluster[coordinator], ApiKey.INIT_PRODUCER_ID,
                                             4, body))["error_code"] == ErrorCode.NONE and a,
                       f"{tid} initialized")
        pids[tid] = answer["producer_id"]
    assert len(set(pids.values())) == len(pids)
    assert len(coordinators) > 1


def test_an_aborted_offset_commit_stays_aborted_when_the_group_coordinator_moves(cluster):
    """The group's new coordinator loads ``__consumer_offsets`` as Kafka's
    GroupMetadataManager does: a transactional commit whose ABORT marker follows it is
    not a committed offset there (before this was fixed, the pipeline of the fault suite
    resumed past records it had never written out)."""
    source = "txn-moving-source"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(source, 1, 3)], request_timeout=60)[source].result(WAIT)
    until(lambda: _all_led(cluster, source, 1), f"{source} led")
    producer = _producer(cluster, "moving-pipeline")
    producer.init_transactions(WAIT)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap,
                                         "group.id": "moving-group"})
    try:
        for offset, commit in ((3, True), (7, False)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition(source, 0, offset)],
                consumer.consumer_group_metadata(), WAIT)
            producer.commit_transaction(WAIT) if commit else producer.abort_transaction(WAIT)
    finally:
        consumer.close()
    assert _committed(cluster, "moving-group", source, 0) == 3
    coordinator = _leaders(cluster, "__consumer_offsets")[
        kafka_partition_for_key("moving-group", OFFSETS_PARTITIONS)]
    cluster[coordinator].stop()
    try:
        until(lambda: _leaders(cluster, "__consumer_offsets")[
            kafka_partition_for_key("moving-group", OFFSETS_PARTITIONS)]
            not in (coordinator, -1), "the group's offsets partition led by another broker")
        assert _committed(cluster, "moving-group", source, 0) == 3
    finally:
        cluster[coordinator].start().wait_listening()
        until(lambda: all(len(md.isrs) == 3 for md in admin.list_topics(
            "__consumer_offsets", timeout=10).topics["__consumer_offsets"]
            .partitions.values()), "every offsets partition back in full ISR")
