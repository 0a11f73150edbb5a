"""confluent-kafka (librdkafka) against `kqlite serve`."""

import threading
import time

import pytest

import kqlite

from broker_process import unique

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions,  # noqa: E402
                                   NewTopic)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce(broker, topic, values, **conf):
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **conf})
    errors = []
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=b"k%d" % i, headers=[("n", b"%d" % i)],
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors


def consume_all(broker, topic, n, group, **conf):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None or msg.error():
            continue
        got.append(msg)
    c.commit(asynchronous=False)
    c.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker, codec):
    topic = unique(f"ck-{codec}")
    values = [b"librdkafka-%d" % i for i in range(300)]
    produce(broker, topic, values, **{"compression.type": codec})
    got = consume_all(broker, topic, 300, unique("ckg"))
    assert sorted(m.value() for m in got) == sorted(values)
    assert all(dict(m.headers())["n"] == m.key()[1:] for m in got)


def test_idempotent_producer(broker):
    topic = unique("ck-idem")
    produce(broker, topic, [b"x%d" % i for i in range(500)], **{"enable.idempotence": True,
                                                                  "acks": "all"})
    got = consume_all(broker, topic, 500, unique("ckg"))
    assert sorted(m.value() for m in got) == sorted(b"x%d" % i for i in range(500))


def test_group_rebalance_commit_resume_and_times(broker):
    topic = unique("ck-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)]
                                 ).values():
        f.result(30)
    group = unique("ck-g3")
    seen = {i: [] for i in range(3)}
    stops = [threading.Event() for _ in range(3)]
    assigned = {}
    done = {}  # partition -> offset committed successfully

    def member(i):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        c.subscribe([topic], on_assign=lambda cons, parts: assigned.__setitem__(i, parts))
        while not stops[i].is_set():
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                seen[i].append(msg.value())
                try:
                    c.commit(msg, asynchronous=False)
                    done[msg.partition()] = msg.offset() + 1
                except KafkaException:
                    pass  # raced a rebalance (as with Kafka): the next owner re-reads
        c.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        p.produce(topic, b"a-%d" % i, timestamp=now - 300000 + i * 1000)
    p.flush(30)
    deadline = time.monotonic() + 60
    while len({v for vs in seen.values() for v in vs}) < 300 and time.monotonic() < deadline:
        time.sleep(0.1)
    stops[0].set()
    threads[0].join(30)
    for i in range(300):
        p.produce(topic, b"b-%d" % i)
    p.flush(30)
    after = lambda: {v for i in (1, 2) for v in seen[i] if v.startswith(b"b-")}  # noqa: E731
    # Records read while the group rebalances may fail to commit and be read again by
    # the partition's next owner, so wait for the commits too.
    while (len(after()) < 300 or sum(done.values()) < 600) and \
            time.monotonic() < deadline + 60:
        time.sleep(0.1)
    stops[1].set()
    stops[2].set()
    for t in threads[1:]:
        t.join(30)
    assert {v for vs in seen.values() for v in vs} >= {b"a-%d" % i for i in range(300)}
    assert after() == {b"b-%d" % i for i in range(300)}
    # Committed offsets resume: a new member of the group sees nothing old.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest"})
    committed = c.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    # A partition the sticky partitioner never picked has no commit (OFFSET_INVALID, -1001).
    assert sum(max(tp.offset, 0) for tp in committed) == 600, (committed, done)
    found = c.offsets_for_times([TopicPartition(topic, p, now - 150000) for p in range(6)],
                                timeout=10)
    # The answer per partition, from the same files through the embedded API.
    db = kqlite.open(broker.data_dir)
    try:
        expected = [db.log(topic, p).offset_for_time(now - 150000) for p in range(6)]
    finally:
        db.close()
    assert [tp.offset for tp in found] == [-1 if o is None else o for o in expected]
    assert any(o is not None for o in expected)
    c.close()


def test_admin_create_delete(broker):
    topic = unique("ck-admin")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1,
                                           config={"retention.ms": "60000"})]).values():
        f.result(30)
    assert topic in admin.list_topics(timeout=10).topics
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "60000"
    for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
        f.result(30)
    assert len(admin.list_topics(timeout=10).topics[topic].partitions) == 3
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(topic, b"r%d" % i, partition=0)
    assert p.flush(30) == 0
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)])
    assert deleted[TopicPartition(topic, 0, 4)].result(30).low_watermark == 4
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("ck-wm")})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
    c.close()
    for f in admin.delete_topics([topic]).values():
        f.result(30)
    assert topic not in admin.list_topics(timeout=10).topics
