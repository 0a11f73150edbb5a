"""No request blocks the event loop on storage: while one client's request is held
inside a storage call (a segment read, an fsync, a topic-file fsync), other clients
are answered; a /metrics scrape waiting for a log another thread holds does not hold
them up either; and concurrent fsync=always produces share fsyncs (group commit).

Each test holds the storage call at a gate of the file-system seam, so "while the
first request is blocked" is a state the test reaches and checks, not a race.
"""

import asyncio
import sys
import time

import pytest

from broker_process import RawClient
from broker_thread import BrokerThread, GatedFS, segment_of

from kqlite.format.batch import build_batch, parse_header
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.metrics import read_storage


def produce_body(topic, partition, records, acks=1):
    return {"acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def fetch_body(topic, partition, offset, max_bytes=1 << 20):
    return {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "topics": [
        {"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                         "partition_max_bytes": max_bytes}]}]}


def produced(response):
    (part,) = response["responses"][0]["partition_responses"]
    assert part["error_code"] == ErrorCode.NONE, part
    return part["base_offset"]


def fetched(response):
    (part,) = response["responses"][0]["partitions"]
    assert part["error_code"] == ErrorCode.NONE, part
    return part["records"]


def batch_count(records):
    count, pos = 0, 0
    while pos < len(records):
        pos += parse_header(records, pos).size
        count += 1
    return count


def answers_meanwhile(broker, topic):
    """A second client's ApiVersions, Metadata and Produce to ``topic``-0 are answered."""
    other = RawClient(broker)
    try:
        assert other.call(ApiKey.API_VERSIONS, 2, {})["error_code"] == ErrorCode.NONE
        meta = other.call(ApiKey.METADATA, 9,
                          {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert meta["topics"][0]["error_code"] == ErrorCode.NONE
        produced(other.call(ApiKey.PRODUCE, 7,
                            produce_body(topic, 0, build_batch([b"meanwhile"]))))
    finally:
        other.close()


def wait_until_a_thread_runs(function, timeout=30):
    """Return once some thread has ``function`` on its stack."""
    deadline = time.monotonic() + timeout
    while True:
        for frame in sys._current_frames().values():
            while frame is not None:
                if frame.f_code is function.__code__:
                    return
                frame = frame.f_back
        assert time.monotonic() < deadline, f"no thread entered {function.__name__}"
        time.sleep(0.005)


@pytest.fixture
def gated(tmp_path):
    fs = GatedFS()
    broker = BrokerThread(tmp_path / "data", fs=fs)
    yield broker, fs
    broker.stop()


def test_a_fetch_blocked_reading_a_segment_does_not_hold_up_other_clients(gated):
    broker, fs = gated
    db = broker.broker.db
    db.create_topic("big", 1)
    db.create_topic("other", 1)
    reader = RawClient(broker)
    for i in range(50):
        produced(reader.call(ApiKey.PRODUCE, 7, produce_body("big", 0, build_batch([b"v%d" % i]))))
    assert batch_count(fetched(reader.call(ApiKey.FETCH, 11,
                                           fetch_body("big", 0, 49)))) == 1  # log open
    gate = fs.gate("pread", segment_of("big", 0))
    try:
        reader.send(ApiKey.FETCH, 11, fetch_body("big", 0, 0))
        gate.wait_entered()
        answers_meanwhile(broker, "other")
        assert not reader.has_response()      # its fetch is still held in storage
    finally:
        gate.release()
    assert batch_count(fetched(reader.receive(ApiKey.FETCH, 11))) == 50
    reader.close()


def test_a_produce_blocked_in_fsync_does_not_hold_up_other_clients(gated):
    broker, fs = gated
    db = broker.broker.db
    db.create_topic("durable", 1, {"fsync": "always"})
    db.create_topic("other", 1)
    writer = RawClient(broker)
    produced(writer.call(ApiKey.PRODUCE, 7, produce_body("durable", 0, build_batch([b"first"]))))
    gate = fs.gate("sync", segment_of("durable", 0))
    try:
        writer.send(ApiKey.PRODUCE, 7, produce_body("durable", 0, build_batch([b"second"])))
        gate.wait_entered()
        answers_meanwhile(broker, "other")
        assert not writer.has_response()      # acknowledged only after its fsync
    finally:
        gate.release()
    assert produced(writer.receive(ApiKey.PRODUCE, 7)) == 1
    writer.close()


def test_a_metrics_scrape_waiting_for_a_held_log_does_not_hold_up_other_clients(gated):
    # A produce held in its segment write keeps the Log's lock in its storage thread; the
    # scrape's read of that log's end offset waits for the lock in a storage thread of
    # its own, and reports the end the held append leaves once it is released.
    broker, fs = gated
    db = broker.broker.db
    db.create_topic("held", 1)
    db.create_topic("other", 1)
    writer = RawClient(broker)
    produced(writer.call(0, 7, produce_body("held", 0, build_batch([b"first"]))))  # log open
    gate = fs.gate("pwrite", segment_of("held", 0))
    try:
        writer.send(0, 7, produce_body("held", 0, build_batch([b"second"])))
        gate.wait_entered()
        scrape = asyncio.run_coroutine_threadsafe(broker.broker.metrics.scrape(), broker.loop)
        wait_until_a_thread_runs(read_storage)
        answers_meanwhile(broker, "other")
        assert not scrape.done()              # still waiting for the held log's lock
    finally:
        gate.release()
    assert produced(writer.receive(0, 7)) == 1
    text = scrape.result(30)
    assert 'kqlite_log_end_offset{topic="held",partition="0"} 2' in text
    writer.close()


def test_metadata_auto_creating_a_topic_does_not_hold_up_other_clients(gated):
    broker, fs = gated
    broker.broker.db.create_topic("other", 1)
    asker = RawClient(broker)
    gate = fs.gate("fsync_dir", lambda path: path.rstrip("/").endswith("topics"))
    try:
        asker.send(ApiKey.METADATA, 9, {"topics": [{"name": "made-on-demand"}],
                                        "allow_auto_topic_creation": True})
        gate.wait_entered()
        answers_meanwhile(broker, "other")
        assert not asker.has_response()
    finally:
        gate.release()
    (topic,) = asker.receive(ApiKey.METADATA, 9)["topics"]
    assert topic["error_code"] == ErrorCode.NONE and len(topic["partitions"]) == 1
    asker.close()


def test_concurrent_fsync_always_produces_share_fsyncs(gated):
    broker, fs = gated
    broker.broker.db.create_topic("gc", 1, {"fsync": "always"})
    first = RawClient(broker)
    produced(first.call(ApiKey.PRODUCE, 7, produce_body("gc", 0, build_batch([b"warm-up"]))))
    segment = segment_of("gc", 0)
    writes_before = fs.count("pwrite", segment)
    syncs_before = fs.count("sync", segment)
    clients = [RawClient(broker) for _ in range(8)]
    gate = fs.gate("sync", segment)
    try:
        for i, c in enumerate(clients):
            c.send(ApiKey.PRODUCE, 7, produce_body("gc", 0, build_batch([b"r%d" % i])))
        gate.wait_entered()
        # The first append's fsync is held; the other seven append meanwhile and queue
        # behind it. Wait until all eight batches are written (a state, not a duration).
        deadline = time.monotonic() + 30
        while fs.count("pwrite", segment) < writes_before + 8:
            assert time.monotonic() < deadline, "the eight appends did not all run"
            time.sleep(0.005)
        assert not any(c.has_response() for c in clients)
    finally:
        gate.release()
    offsets = sorted(produced(c.receive(ApiKey.PRODUCE, 7)) for c in clients)
    assert offsets == list(range(1, 9))
    syncs = fs.count("sync", segment) - syncs_before
    print(f"\n8 concurrent fsync=always produces took {syncs} fsync(s) of the segment")
    assert 1 <= syncs <= 3
    for c in clients + [first]:
        c.close()
