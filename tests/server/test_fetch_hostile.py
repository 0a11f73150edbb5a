"""Fetch under hostile and unlucky requests: a partition named thousands of times, many
unknown partitions, connections closed mid-response or while a fetch waits, error
responses a consumer must be able to parse, and work linear in what a fetch returns.

Descriptors are counted in the broker process (/proc/PID/fd); work is counted as reads
of the segment file through the file-system seam, never timed.
"""

import os
import socket
import time
import uuid

import pytest

import kqlite
from broker_process import BrokerProcess, RawClient, unique
from broker_thread import BrokerThread, GatedFS, segment_of

from kqlite.format.batch import build_batch, decode_batch
from kqlite.protocol import ApiKey, ErrorCode, encode_request

BIG = 1 << 20


def fetch_body(topics, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20):
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 0, "topics": topics,
            "forgotten_topics_data": []}


def part(index, offset=0, max_bytes=BIG):
    return {"partition": index, "fetch_offset": offset, "partition_max_bytes": max_bytes}


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(pid, baseline, timeout=10):
    """The broker's descriptor count once it is back to ``baseline`` (or the last seen)."""
    deadline = time.monotonic() + timeout
    count = descriptors(pid)
    while count > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
        count = descriptors(pid)
    return count


@pytest.fixture(scope="module")
def loaded_broker(tmp_path_factory):
    """A broker child whose topic ``big`` holds 2,000 batches of 1 KiB values."""
    data = tmp_path_factory.mktemp("hostile") / "data"
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        db.create_topic("big", 2)
        for p in (0, 1):
            with db.leased_log("big", p) as log:
                log.append_batches(b"".join(build_batch([b"x" * 1024], base_offset=i)
                                            for i in range(2000)))
    broker = BrokerProcess(data)
    yield broker
    broker.stop()


def baseline_of(broker):
    client = RawClient(broker)
    client.call(ApiKey.FETCH, 11, fetch_body([{"topic": "big", "partitions": [part(0), part(1)]}]))
    client.close()
    return settle(broker.proc.pid, 0, timeout=0.5)


def test_a_partition_named_25000_times_is_read_once_and_leaves_no_descriptor(loaded_broker):
    baseline = baseline_of(loaded_broker)
    client = RawClient(loaded_broker, timeout=120)
    body = client.call(ApiKey.FETCH, 11, fetch_body(
        [{"topic": "big", "partitions": [part(0, offset=5)] * 24_999 + [part(0, offset=7)]}]))
    assert client.metadata_ok()
    client.close()
    assert settle(loaded_broker.proc.pid, baseline) <= baseline
    # Kafka's request is a map: one answer, at its first place, with the last values.
    (topic,) = body["responses"]
    (answer,) = topic["partitions"]
    assert answer["error_code"] == ErrorCode.NONE
    _header, records = decode_batch(answer["records"])
    assert records[0].offset == 7


def test_duplicates_across_topic_entries_collapse_in_first_place(loaded_broker):
    client = RawClient(loaded_broker)
    body = client.call(ApiKey.FETCH, 11, fetch_body([
        {"topic": "big", "partitions": [part(1, offset=3), part(0, offset=1)]},
        {"topic": "nope", "partitions": [part(0)]},
        {"topic": "big", "partitions": [part(1, offset=9)]}]))
    client.close()
    shape = [(t["topic"], [p["partition_index"] for p in t["partitions"]])
             for t in body["responses"]]
    assert shape == [("big", [1, 0]), ("nope", [0])]
    first = body["responses"][0]["partitions"][0]
    assert decode_batch(first["records"])[1][0].offset == 9


def test_closing_mid_response_leaves_no_descriptor(loaded_broker):
    baseline = baseline_of(loaded_broker)
    pid = loaded_broker.proc.pid
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", loaded_broker.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(encode_request(ApiKey.FETCH, 11, 1, "hostile", fetch_body(
            [{"topic": "big", "partitions": [part(0), part(1)]}])))
        assert sock.recv(1024)            # the response has started
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        sock.close()                       # RST in the middle of the sendfile
    assert settle(pid, baseline) <= baseline
    client = RawClient(loaded_broker)
    assert client.metadata_ok()
    client.close()


def test_a_fetch_waiting_in_the_purgatory_holds_no_descriptor(loaded_broker):
    baseline = baseline_of(loaded_broker)
    pid = loaded_broker.proc.pid
    waiting = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", loaded_broker.port))
        # At the log end: nothing to return, so each waits out its 1.5 s.
        sock.sendall(encode_request(ApiKey.FETCH, 11, 1, "hostile", fetch_body(
            [{"topic": "big", "partitions": [part(0, offset=2000), part(1, offset=2000)]}],
            max_wait_ms=1500, min_bytes=1)))
        waiting.append(sock)
    time.sleep(0.3)
    assert descriptors(pid) <= baseline + len(waiting)     # their sockets, nothing more
    for sock in waiting[:10]:
        sock.close()                    # closed while waiting
    for sock in waiting[10:]:
        sock.settimeout(10)
        head = sock.recv(4)             # the expired wait answers
        assert len(head) == 4
        sock.close()
    assert settle(pid, baseline) <= baseline


def test_an_error_carries_empty_records_not_null(loaded_broker):
    client = RawClient(loaded_broker)
    for version in (4, 11, 12):
        body = client.call(ApiKey.FETCH, version, fetch_body([
            {"topic": "big", "partitions": [part(0, offset=10**9), part(7)]},
            {"topic": unique("missing"), "partitions": [part(0)]}]))
        codes = [(p["error_code"], p["records"]) for t in body["responses"]
                 for p in t["partitions"]]
        assert codes == [(ErrorCode.OFFSET_OUT_OF_RANGE, b""),
                         (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, b""),
                         (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, b"")]
    body = client.call(ApiKey.FETCH, 13, fetch_body([{"topic_id": uuid.uuid4(),
                                                      "partitions": [part(0)]}]))
    (p,) = body["responses"][0]["partitions"]
    assert (p["error_code"], p["records"]) == (ErrorCode.UNKNOWN_TOPIC_ID, b"")
    client.close()


def test_thousands_of_unknown_partitions_cost_one_lookup(tmp_path):
    with BrokerThread(tmp_path / "data") as broker:
        broker.broker.db.create_topic("small", 1)
        calls = []
        real_run = broker.broker.io.run

        async def counting_run(fn, *args, **kwargs):
            calls.append(getattr(fn, "__name__", repr(fn)))
            return await real_run(fn, *args, **kwargs)
        broker.broker.io.run = counting_run
        client = RawClient(broker)
        topics = [{"topic": "small", "partitions": [part(i) for i in range(1, 5001)]}] + \
            [{"topic": f"ghost-{i}", "partitions": [part(0)]} for i in range(2000)]
        body = client.call(ApiKey.FETCH, 11, fetch_body(topics))
        client.close()
    codes = {p["error_code"] for t in body["responses"] for p in t["partitions"]}
    assert codes == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert sum(len(t["partitions"]) for t in body["responses"]) == 7000
    assert len(calls) <= 2, calls


def segment_reads(n_batches, tmp_path):
    """Segment reads a consumer makes fetching ``n_batches`` one-record batches, about a
    dozen per fetch, from the start to the end."""
    fs = GatedFS()
    with BrokerThread(tmp_path / f"data-{n_batches}", fs=fs) as broker:
        db = broker.broker.db
        db.create_topic("many", 1)
        with db.leased_log("many", 0) as log:
            log.append_batches(build_batch([b"x"]) * n_batches)
        client = RawClient(broker)
        before = fs.count("pread", segment_of("many", 0))
        offset, fetches = 0, 0
        while offset < n_batches:
            body = client.call(ApiKey.FETCH, 11, fetch_body(
                [{"topic": "many", "partitions": [part(0, offset, max_bytes=1000)]}]))
            (p,) = body["responses"][0]["partitions"]
            assert p["error_code"] == ErrorCode.NONE
            data = bytes(p["records"])
            pos = 0
            while pos < len(data):
                header, _records = decode_batch(data, pos)
                offset = header.last_offset + 1
                pos += header.size
            fetches += 1
        client.close()
        return fs.count("pread", segment_of("many", 0)) - before, fetches


def test_fetch_work_is_linear_in_what_it_returns(tmp_path):
    reads_small, fetches_small = segment_reads(6_000, tmp_path)
    reads_large, fetches_large = segment_reads(12_000, tmp_path)
    # Twice the batches: twice the fetches and twice the reads, not four times.
    assert fetches_large <= 2 * fetches_small + 1
    assert reads_large <= 2.2 * reads_small
    # A bounded number of reads per fetch, whatever the position in the segment.
    assert reads_large <= 4 * fetches_large


# -- A consumer out of range resets its position (librdkafka) ---------------------------------

def produce_values(broker, topic, values):
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for v in values:
        producer.produce(topic, value=v, partition=0)
    assert producer.flush(30) == 0


def first_records(broker, topic, n, *, assign_at=None, commit_at=None, reset="earliest"):
    ck = pytest.importorskip("confluent_kafka")
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": unique("oor"),
            "auto.offset.reset": reset, "enable.auto.commit": False}
    consumer = ck.Consumer(conf)
    try:
        if commit_at is not None:
            consumer.commit(offsets=[ck.TopicPartition(topic, 0, commit_at)],
                            asynchronous=False)
            consumer.subscribe([topic])
        else:
            consumer.assign([ck.TopicPartition(topic, 0, assign_at)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


def test_librdkafka_resets_a_committed_offset_past_the_log_end(broker):
    topic = unique("oor-end")
    produce_values(broker, topic, [b"r%d" % i for i in range(10)])
    got = first_records(broker, topic, 10, commit_at=1000)
    assert got == [(i, b"r%d" % i) for i in range(10)]


def test_librdkafka_resets_an_offset_below_the_log_start(broker):
    topic = unique("oor-start")
    produce_values(broker, topic, [b"r%d" % i for i in range(10)])
    client = RawClient(broker)
    body = client.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 5000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "offset": 6}]}]})
    client.close()
    assert body["topics"][0]["partitions"][0]["low_watermark"] == 6
    assert first_records(broker, topic, 4, assign_at=2) == [(i, b"r%d" % i)
                                                             for i in range(6, 10)]


def test_librdkafka_resets_to_latest_and_receives_what_comes_next(broker):
    topic = unique("oor-latest")
    produce_values(broker, topic, [b"old"])
    ck = pytest.importorskip("confluent_kafka")
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("oor"),
                            "auto.offset.reset": "latest", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 500)])
    try:
        got, sent = [], 0
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.value()))
            else:
                # Whenever the reset to the end happens, a later record follows it.
                produce_values(broker, topic, [b"new%d" % sent])
                sent += 1
    finally:
        consumer.close()
    assert got and got[0][1].startswith(b"new") and got[0][0] == 1 + int(got[0][1][3:])
