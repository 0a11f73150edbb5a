"""The embedded consumer's defaults and its fetch buffer.

A new group starts at the beginning (auto_offset_reset="earliest" by default, unlike
Kafka's clients); iterating stops after consumer_timeout_ms without records; polls
that take a few records at a time from large batches return exactly the log's
records, through seeks, commits and deserializers."""

import time

import pytest

import kqlite


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        database.create_topic("t", partitions=2)
        yield database


def test_first_program_sends_then_iterates_and_stops(db):
    producer = db.producer()
    for i in range(5):
        producer.send("t", b"v%d" % i, partition=0)
    producer.close()
    consumer = db.consumer(["t"], group="new", consumer_timeout_ms=200)
    started = time.monotonic()
    got = [msg.value for msg in consumer]           # ends: nothing more arrives
    assert got == [b"v%d" % i for i in range(5)]
    assert time.monotonic() - started >= 0.2
    consumer.close()
    assert db.offsets.committed("new") == {("t", 0): 5, ("t", 1): 0}


def test_iteration_of_an_empty_topic_ends_after_the_timeout(db):
    consumer = db.consumer(["t"], group="idle", consumer_timeout_ms=50)
    started = time.monotonic()
    assert list(consumer) == []
    assert time.monotonic() - started >= 0.05
    consumer.close()


def test_latest_is_still_available(db):
    with db.producer() as p:
        p.send("t", b"old", partition=1)
    consumer = db.consumer(["t"], group="late", auto_offset_reset="latest",
                           consumer_timeout_ms=50)
    assert list(consumer) == []
    with db.producer() as p:
        p.send("t", b"new", partition=1)
    assert [m.value for m in consumer] == [b"new"]
    consumer.close()


def test_small_polls_over_large_batches_seeks_and_commits(db):
    log = db.log("t", 0)
    log.append([b"a%05d" % i for i in range(3000)])
    log.append([b"b%05d" % i for i in range(3000)])
    expected = [r.value for r in log.read(0)]
    consumer = db.consumer(["t"], group="g", enable_auto_commit=False)
    got = []
    while len(got) < 1000:
        got.extend(m.value for m in consumer.poll(max_records=7))
    assert got == expected[:len(got)]
    consumer.commit()
    assert db.offsets.committed("g")[("t", 0)] == len(got)
    consumer.seek(("t", 0), 2990)                   # inside what the buffer holds
    again = consumer.poll(max_records=20)
    assert [m.offset for m in again] == list(range(2990, 3010))
    assert [m.value for m in again] == expected[2990:3010]
    consumer.seek(("t", 0), 10)
    assert [m.offset for m in consumer.poll(max_records=3)] == [10, 11, 12]
    rest = []
    while True:
        batch = consumer.poll(max_records=500)
        if not batch:
            break
        rest.extend(batch)
    assert [m.value for m in rest] == expected[13:]
    assert {m.topic for m in rest} == {"t"} and {m.partition for m in rest} == {0}
    consumer.close()


def test_deserializers_and_record_fields(db):
    log = db.log("t", 1)
    log.append([kqlite.Record(key=b"k%d" % i, value=b"%d" % i, headers=[("h", b"x")],
                              timestamp=1_700_000_000_000 + i) for i in range(20)])
    consumer = db.consumer(assign=[("t", 1)], key_deserializer=bytes.decode,
                           value_deserializer=int)
    got = consumer.poll(max_records=8) + consumer.poll(max_records=100)
    assert [(m.offset, m.key, m.value, m.timestamp, m.headers) for m in got] == [
        (i, "k%d" % i, i, 1_700_000_000_000 + i, (("h", b"x"),)) for i in range(20)]
    plain = db.consumer(assign=[("t", 1)])
    first = plain.poll(max_records=1)[0]
    assert first == ("t", 1, 0, 1_700_000_000_000, b"k0", b"0", (("h", b"x"),))
    assert (first.topic, first.partition, first.key) == ("t", 1, b"k0")
