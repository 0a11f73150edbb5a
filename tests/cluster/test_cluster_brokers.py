"""Three real ``kqlite serve --zookeeper`` brokers over the session's real ZooKeeper (one
cluster for the module), driven by confluent-kafka: topics created through any broker,
acks=all produce and consume over replication factor 3; and the leader killed with
SIGKILL mid-stream while confluent-kafka, kafka-python or aiokafka produces with acks=all
and idempotence."""

import json
import time

import pytest

from kqlite.protocol import ErrorCode

from acks_all_producers import PRODUCERS
from cluster_processes import QUICK_EXPIRY, request as _request, running_cluster, until

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

WAIT = 90   # seconds: liveness guards only, never a pass/fail timing


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zk_module_hosts):
    # One cluster for the module: a test that kills a broker starts it again and waits
    # until it is back in its ISR, so each test finds the three brokers up.
    with running_cluster(tmp_path_factory.mktemp("brokers"), zk_module_hosts,
                         QUICK_EXPIRY) as c:
        yield c


def _partition(admin, topic, index=0):
    md = admin.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or index not in t.partitions:
        return None
    return t.partitions[index]


def _create(cluster, topic, partitions=1, replication_factor=3, config=None):
    # Sent to whichever broker librdkafka picks; it finds the controller itself.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, replication_factor,
                                            config=config or {})], request_timeout=60)
    futures[topic].result(timeout=WAIT)
    return admin


def _consume_all(bootstrap, topic, partitions, expected, group):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values = []
    deadline = time.monotonic() + WAIT
    try:
        while len(values) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            values.append(m.value().decode())
        # Anything past the expected count would be a duplicate: read a little longer.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                values.append(m.value().decode())
    finally:
        consumer.close()
    return values


def test_a_topic_created_through_any_broker_has_kafkas_znodes(cluster, zk_client):
    admin = _create(cluster, "orders", partitions=3, replication_factor=3,
                    config={"min.insync.replicas": "2"})
    zk = zk_client(hosts=cluster.zk_hosts)
    topic = json.loads(zk.get("/brokers/topics/orders")[0])
    assert topic["version"] == 3 and topic["adding_replicas"] == {} and \
        topic["removing_replicas"] == {} and len(topic["topic_id"]) == 22
    assert sorted(topic["partitions"]) == ["0", "1", "2"]
    for replicas in topic["partitions"].values():
        assert sorted(replicas) == [1, 2, 3]
    # Kafka's placement: the three partitions' preferred leaders are the three brokers.
    assert sorted(r[0] for r in topic["partitions"].values()) == [1, 2, 3]
    assert json.loads(zk.get("/config/topics/orders")[0]) == \
        {"version": 1, "config": {"min.insync.replicas": "2"}}
    controller = json.loads(zk.get("/controller")[0])["brokerid"]
    for p, replicas in topic["partitions"].items():
        state = json.loads(zk.get(f"/brokers/topics/orders/partitions/{p}/state")[0])
        assert state == {"version": 1, "leader": replicas[0], "leader_epoch": 0,
                         "controller_epoch": state["controller_epoch"], "isr": replicas}
        seen = _partition(admin, "orders", int(p))
        assert (seen.leader, seen.replicas, seen.isrs) == (replicas[0], replicas, replicas)
    assert admin.list_topics(timeout=10).controller_id == controller
    for b in (1, 2, 3):
        broker = json.loads(zk.get(f"/brokers/ids/{b}")[0])
        assert broker["endpoints"] == [f"PLAINTEXT://{cluster[b].address}"]
    # Only the controller creates topics: another broker answers NOT_CONTROLLER (and
    # clients resend to the controller Metadata names, as librdkafka did above).
    other = next(b for b in (1, 2, 3) if b != controller)
    answer = _request(cluster[other], 19, 5, {
        "topics": [{"name": "refunds", "num_partitions": 1, "replication_factor": 3,
                    "assignments": [], "configs": []}],
        "timeout_ms": 10000, "validate_only": False})
    assert answer["topics"][0]["error_code"] == ErrorCode.NOT_CONTROLLER


def test_acks_all_idempotent_records_are_replicated_and_consumed(cluster):
    _create(cluster, "events", partitions=3, config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked, failed = [], []

    def delivered(err, msg):
        (failed if err else acked).append(msg.value().decode() if not err else err)

    n = 600
    for i in range(n):
        producer.produce("events", value=str(i).encode(), key=str(i % 7).encode(),
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(WAIT) == 0
    assert failed == [] and sorted(acked, key=int) == [str(i) for i in range(n)]
    values = _consume_all(cluster.bootstrap, "events", 3, n, "readers")
    assert sorted(values, key=int) == [str(i) for i in range(n)]


def _leader_of(admin, topic, unlike=None):
    """The partition's metadata once it names a leader other than ``unlike``."""
    p = _partition(admin, topic)
    return p if p is not None and p.leader not in (-1, unlike) else None


def _isr_is(admin, topic, brokers):
    p = _partition(admin, topic)
    return p is not None and sorted(p.isrs) == brokers


def _send_slowly(producer, first, count):
    """Records ``first`` .. ``first + count - 1``, a few at a time, so that the stream
    is still flowing whenever the leader dies."""
    for start in range(first, first + count, 10):
        producer.send([str(i) for i in range(start, min(start + 10, first + count))])
        time.sleep(0.01)
    return first + count


@pytest.mark.parametrize("client", PRODUCERS, ids=[c.name for c in PRODUCERS])
def test_killing_the_leader_mid_stream_loses_and_duplicates_nothing(cluster, zk_client,
                                                                    client):
    pytest.importorskip(client.module)
    topic = f"payments-{client.module}"
    admin = _create(cluster, topic, partitions=1, config={"min.insync.replicas": "2"})
    before = until(lambda: _leader_of(admin, topic), "a first leader")
    leader = before.leader
    producer = client(cluster.bootstrap, topic)
    try:
        sent = _send_slowly(producer, 0, 100)
        until(lambda: producer.acknowledged() >= 50, "the first records acknowledged")
        # Killed right behind a burst, so that the burst is queued or on the wire, not
        # acknowledged, when the leader dies (sent slowly, it would all be acked by then).
        producer.send([str(i) for i in range(sent, sent + 200)])
        sent += 200
        cluster[leader].kill()
        sent = _send_slowly(producer, sent, 300)
        producer.flush()
    finally:
        producer.close()
    after = until(lambda: _leader_of(admin, topic, unlike=leader), "a new leader elected")
    assert after.leader in before.isrs
    assert producer.failed == []
    assert sorted(producer.acked, key=int) == [str(i) for i in range(sent)]
    values = _consume_all(cluster.bootstrap, topic, 1, sent, "auditors")
    # Every acknowledged record exactly once (idempotence), in the order produced.
    assert values == [str(i) for i in range(sent)]
    # The controller bumped the leader epoch when it moved leadership.
    state = json.loads(zk_client(hosts=cluster.zk_hosts).get(
        f"/brokers/topics/{topic}/partitions/0/state")[0])
    assert state["leader"] == after.leader and state["leader_epoch"] > 0
    # The killed broker comes back, catches up, and rejoins the ISR.
    cluster[leader].start().wait_listening()
    until(lambda: _isr_is(admin, topic, [1, 2, 3]), "the restarted broker back in the ISR")
