"""What a client test suite that passes against one broker does to a 3-broker cluster
(issue 33): topics of replication factor 3, two busy CPU loops beside the brokers.

- a stream of 500 KB records produced with acks=all is delivered whole (every record
  acknowledged, the high watermark, which the whole ISR has reached, at the last one);
- a consumer's ``committed()`` (OffsetFetch, which librdkafka sends with
  ``require_stable``) answers right after auto-commits and after manual commits: the
  offset a synchronous commit stored, that of an asynchronous one or an earlier one
  (librdkafka may send the OffsetFetch before the OffsetCommit), never a timeout;
- a Produce refused for some of its records is answered by a cluster leader as by the
  single broker (KIP-467's ``record_errors``).

Timings are never asserted (``until`` and the clients' timeouts are liveness guards);
benchmarks/workloads/cluster.py measures the 500 KB stream's throughput.
"""

import os
import subprocess
import sys
import time

import pytest

from cluster_processes import request, running_cluster, until

from kqlite.format.batch import build_batch
from kqlite.format.record import Record
from kqlite.protocol import ApiKey, ErrorCode

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

RECORDS = 300                 # 150 MB through three replicas: the stream, not its length
RECORD_SIZE = 500_000
COMMITS = 20
WAIT = 120                    # seconds: liveness guards only


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zk_module_hosts):
    with running_cluster(tmp_path_factory.mktemp("clients"), zk_module_hosts,
                         ["--offsets-topic-num-partitions", "5"]) as c:
        yield c


@pytest.fixture
def busy_cpu():
    """Two processes spinning on the CPU for the whole test (the machine has two cores)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for loop in loops:
        loop.kill()
        loop.wait()


def _create(cluster, topic, config=None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config=config or {})],
                        request_timeout=60)[topic].result(timeout=WAIT)

    def led():
        md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        return md if md.leader >= 0 and len(md.isrs) == 3 else None
    return until(led, f"a leader and a full ISR for {topic}").leader


def _watermarks(cluster, topic):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap,
                                         "group.id": "watermarks"})
    def asked():
        # The broker librdkafka asks first may not have applied the controller's
        # UpdateMetadata for a new topic yet; librdkafka then fails at once with
        # _UNKNOWN_PARTITION instead of asking again, so the test asks again.
        try:
            return consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0),
                                                  timeout=10)
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() != confluent_kafka.KafkaError._UNKNOWN_PARTITION:
                raise
            return None
    try:
        return until(asked, f"the watermarks of {topic}-0")
    finally:
        consumer.close()


def test_a_stream_of_500_kb_records_with_acks_all_is_delivered(cluster, busy_cpu):
    topic = "big-records"
    _create(cluster, topic)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
        "message.max.bytes": 2_000_000, "message.timeout.ms": WAIT * 1000})
    reports = []
    value = os.urandom(RECORD_SIZE)
    for _ in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value, partition=0,
                                 on_delivery=lambda err, msg: reports.append(err))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(WAIT) == 0
    assert len(reports) == RECORDS and all(err is None for err in reports), \
        {str(e) for e in reports if e is not None}
    # The high watermark is at the last record: the whole ISR (three replicas) holds them.
    assert _watermarks(cluster, topic) == (0, RECORDS)


def test_committed_answers_after_auto_and_manual_commits(cluster, busy_cpu):
    topic, group = "commits", "committed-reader"
    _create(cluster, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap,
                                         "acks": "all"})
    for i in range(100):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(WAIT) == 0
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": True,
        "auto.commit.interval.ms": 200})
    partition = confluent_kafka.TopicPartition(topic, 0)
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + WAIT
        while seen < 100 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                seen += 1
        assert seen == 100
        # The auto-commit of the position (100) becomes readable.
        until(lambda: consumer.committed([partition], timeout=30)[0].offset == 100,
              "the auto-commit of offset 100 read back")
    finally:
        consumer.close()
    # Manual commits (no auto-commit to race them), committed() asked right after each.
    # After a synchronous commit it reads that offset. After an asynchronous one it
    # answers, with that offset or one committed before (librdkafka may send the
    # OffsetFetch first), and the last one is read back in the end.
    manual = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group,
        "enable.auto.commit": False})
    try:
        manual.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        for offset in range(1, COMMITS + 1):
            asynchronous = offset % 2 == 1
            manual.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, offset)],
                          asynchronous=asynchronous)
            [answer] = manual.committed([partition], timeout=30)
            assert answer.error is None, answer
            if asynchronous:
                assert answer.offset in (100, *range(1, offset + 1)), answer
            else:
                assert answer.offset == offset, answer
        manual.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, COMMITS + 1)],
                      asynchronous=True)
        until(lambda: manual.committed([partition], timeout=30)[0].offset == COMMITS + 1,
              "the last asynchronous commit read back")
    finally:
        manual.close()


def test_a_cluster_leader_names_the_records_it_refuses(cluster):
    topic = "compacted-records"
    leader = _create(cluster, topic, {"cleanup.policy": "compact"})
    records = [Record(b"v%d" % i, key=None if i in (0, 2) else b"k%d" % i) for i in range(4)]

    def answered():
        """The leader's answer once it leads (Metadata may name it a moment before its
        LeaderAndIsr is applied: UNKNOWN_TOPIC_OR_PARTITION, which clients retry)."""
        answer = request(cluster[leader], ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": topic, "partition_data": [
                    {"index": 0,
                     "records": build_batch(records, timestamp=1_700_000_000_000)}]}]})
        [p] = answer["responses"][0]["partition_responses"]
        return None if p["error_code"] in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                           ErrorCode.NOT_LEADER_OR_FOLLOWER) else p
    p = until(answered, f"{topic}-0 led by broker {leader}")
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert p["error_code"] == ErrorCode.INVALID_RECORD
    assert p["record_errors"] == [{"batch_index": 0, "batch_index_error_message": message},
                                  {"batch_index": 2, "batch_index_error_message": message}]
    assert p["error_message"].startswith("One or more records have been rejected due to 2 "
                                         "record errors in total")
    assert _watermarks(cluster, topic) == (0, 0)
