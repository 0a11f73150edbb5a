"""aiokafka against `kqlite serve`."""

import asyncio
import time

import pytest

from broker_process import unique

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.errors import CommitFailedError  # noqa: E402

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker, codec):
    topic = unique(f"aio-{codec}")

    async def go():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec)
        await producer.start()
        try:
            for i in range(100):
                await producer.send(topic, b"v%d" % i, key=b"k%d" % i)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                    group_id=unique("aiog"), auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        got = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 100 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    got.extend(r.value for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert sorted(run(go())) == sorted(b"v%d" % i for i in range(100))


async def commit(consumer):
    """Commit as an application loop does: a commit that races a rebalance fails with
    CommitFailedError (Kafka answers REBALANCE_IN_PROGRESS too) and the records are
    simply read again by whoever owns the partition next."""
    try:
        await consumer.commit()
    except CommitFailedError:
        pass


def test_group_of_three_commit_resume_and_times(broker):
    topic = unique("aio-group")
    group = unique("aio-g3")

    async def go():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        now = int(time.time() * 1000)
        for i in range(90):
            await producer.send(topic, b"m%d" % i, partition=i % 3,
                                timestamp_ms=now - 90000 + i * 1000)
        await producer.stop()
        consumers = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=6000, heartbeat_interval_ms=500)
                     for _ in range(3)]
        for c in consumers:
            await c.start()
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < 90 and time.monotonic() < deadline:
            for c in consumers:
                for records in (await c.getmany(timeout_ms=100)).values():
                    seen.update(r.value for r in records)
                await commit(c)
        await consumers[0].stop()  # leaves: the other two take its partitions
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        for i in range(30):
            await producer.send(topic, b"late%d" % i, partition=i % 3)
        await producer.stop()
        late = set()
        deadline = time.monotonic() + 60
        while len(late) < 30 and time.monotonic() < deadline:
            for c in consumers[1:]:
                for records in (await c.getmany(timeout_ms=100)).values():
                    late.update(r.value for r in records if r.value.startswith(b"late"))
                await commit(c)
        tp = TopicPartition(topic, 0)
        found = await consumers[1].offsets_for_times({tp: now - 45000})
        for c in consumers[1:]:
            await c.stop()
        return seen, late, found[tp]

    seen, late, found = run(go())
    assert seen == {b"m%d" % i for i in range(90)}
    assert late == {b"late%d" % i for i in range(30)}
    assert found is not None and found.offset == 15


def test_admin_create_describe_delete_topics(broker):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    topic = unique("aio-admin")

    async def go():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                                                topic_configs={"retention.ms": "120000"})])
            listed = await admin.list_topics()
            described = await admin.describe_topics([topic])
            await admin.delete_topics([topic])
            after = await admin.list_topics()
        finally:
            await admin.close()
        return listed, described, after

    listed, described, after = run(go())
    assert topic in listed and topic not in after
    (meta,) = described
    assert meta["topic"] == topic and len(meta["partitions"]) == 3
