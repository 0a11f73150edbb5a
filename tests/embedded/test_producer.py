"""Producer: Kafka's key partitioner, linger batching, serializers, errors."""

import pytest
from kafka.partitioner.default import murmur2 as kp_murmur2

import kqlite
from kqlite.errors import InvalidRecordError, KqliteError
from kqlite.db.partitioner import murmur2, partition_for_key


def test_murmur2_matches_kafka_and_kafka_python():
    # Values from Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    for i in range(500):
        key = b"user-%d" % i * (i % 5 + 1)
        assert murmur2(key) & 0xFFFFFFFF == kp_murmur2(key)


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        database.create_topic("t", partitions=6)
        yield database


def test_keys_land_on_kafkas_partitions(db):
    with db.producer() as producer:
        for i in range(60):
            key = b"key-%d" % i
            md = producer.send("t", value=b"v", key=key).result()
            assert md.partition == (kp_murmur2(key) & 0x7FFFFFFF) % 6 == partition_for_key(key, 6)
            assert md.topic == "t" and md.timestamp > 0


def test_explicit_partition_headers_and_timestamp(db):
    with db.producer() as producer:
        md = producer.send("t", b"v", partition=4, headers=[("h", b"1")], timestamp=123).result()
    rec = next(iter(db.log("t", 4).read(md.offset)))
    assert (rec.value, rec.headers, rec.timestamp) == (b"v", (("h", b"1"),), 123)


def test_keyless_records_stick_until_batch_size_bytes_then_switch(db):
    # KIP-794: a keyless record goes to the sticky partition until batch_size bytes
    # (21 bytes of record overhead + the value, here 121 a record) went to it.
    with db.producer(batch_size=1000) as producer:
        parts = [producer.send("t", b"x" * 100).result().partition for _ in range(200)]
    runs = [parts[i:i + 9] for i in range(0, 198, 9)]
    assert all(len(set(run)) == 1 for run in runs)            # 9 * 121 >= 1000
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))  # then another partition
    assert len(set(parts)) > 1


def test_linger_batches_records_per_partition(db):
    with db.producer(linger_ms=50, batch_size=1 << 20) as producer:
        futures = [producer.send("t", b"v%d" % i, partition=1) for i in range(100)]
        producer.flush()
        offsets = [f.result().offset for f in futures]
    assert offsets == list(range(100))
    from kqlite import _native
    batches, _stop, _status = _native.scan_batches(db.log("t", 1).read_batches(0, 1 << 20))
    assert len(batches) <= 3  # one batch per linger window, not 100


def test_batch_size_triggers_send(db):
    with db.producer(linger_ms=60_000, batch_size=500) as producer:
        futures = [producer.send("t", b"x" * 100, partition=0) for _ in range(20)]
        assert futures[5].result(timeout=10).offset == 5  # did not wait for linger


def test_serializers(db):
    import json
    with db.producer(key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode()
                     ) as producer:
        md = producer.send("t", {"a": 1}, key="k").result()
    rec = next(iter(db.log("t", md.partition).read(md.offset)))
    assert rec.key == b"k" and rec.value == b'{"a": 1}'


def test_errors(db):
    with db.producer() as producer:
        with pytest.raises(InvalidRecordError, match="str"):
            producer.send("t", "text")
        with pytest.raises(kqlite.UnknownTopicError):
            producer.send("missing", b"x")
        with pytest.raises(KqliteError):
            producer.send("t", b"x", partition=9)
        too_big = producer.send("t", b"x" * 2_000_000, partition=0)
        with pytest.raises(kqlite.RecordTooLarge):
            too_big.result()
    with pytest.raises(kqlite.LogClosedError):
        producer.send("t", b"late")


def test_sticky_partitioner_branches():
    import random
    from kqlite.db.partitioner import StickyPartitioner
    sticky = StickyPartitioner(random.Random(7))
    first = sticky.partition("t", 5, 400, 1000)               # the topic's first record
    assert [sticky.partition("t", 5, 400, 1000) for _ in range(2)] == [first, first]
    switched = sticky.partition("t", 5, 400, 1000)             # 1,200 bytes went to it
    assert switched != first and 0 <= switched < 5
    for _ in range(200):                                        # never the same one again
        before = sticky.partition("t", 5, 1000, 1000)
        assert sticky.partition("t", 5, 1000, 1000) != before
    assert sticky.partition("one", 1, 5000, 1000) == 0
    assert sticky.partition("one", 1, 5000, 1000) == 0         # nowhere else to go
    sticky._current["t"] = [4, 0]
    assert 0 <= sticky.partition("t", 2, 10, 1000) < 2         # the topic shrank


def test_a_standing_sender_thread_delivers_until_close(db):
    db.create_topic("standing")
    producer = db.producer(linger_ms=1)
    producer.start_sender()
    sender = producer._sender
    assert sender is not None and sender.is_alive()
    first = producer.send("standing", b"a")
    assert first.result(timeout=10).offset == 0
    # Nothing pending: the thread stays, and the next batch is delivered without a waiter.
    assert producer._sender is sender and sender.is_alive()
    second = producer.send("standing", b"b")
    for _ in range(1000):
        if second.done():
            break
        sender.join(0.01)
    assert second.done() and second.result().offset == 1
    producer.close()
    sender.join(10)
    assert not sender.is_alive()


def test_start_sender_needs_a_linger(db):
    with pytest.raises(kqlite.errors.ConfigError):
        db.producer(linger_ms=0).start_sender()


def test_a_topic_store_answers_a_cached_definition_without_reading(db):
    store = db.topics
    assert store.cached("later") is None
    db.create_topic("later")
    assert store.cached("later")["partitions"] == 1
    store.refresh("later")
    assert store.cached("later") is None          # forgotten: get() would read the file
    assert store.get("later")["partitions"] == 1
    assert store.cached("later") is not None
