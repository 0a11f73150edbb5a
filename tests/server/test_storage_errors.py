"""A damaged segment under a running `kqlite serve`: a Fetch that reaches it gets
KAFKA_STORAGE_ERROR for that partition, the connection stays usable, the other
partitions still answer, and the broker logs the file and byte position."""

import glob
import os

import pytest

import kqlite
from broker_process import BrokerProcess, RawClient

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402


def fetch(client, topic, partition, offset):
    body = client.call(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": offset,
             "partition_max_bytes": 1 << 20}]}]})
    (part,) = body["responses"][0]["partitions"]
    return part


def test_fetch_from_a_damaged_closed_segment_fails_only_that_partition(tmp_path):
    data = str(tmp_path / "data")
    with kqlite.open(data) as db:
        db.create_topic("t", partitions=2, config={"segment.bytes": 500})
        for p in range(2):
            log = db.log("t", p)
            for i in range(0, 24, 2):
                log.append([b"value-%d" % i, b"value-%d" % (i + 1)])
        batch = len(db.log("t", 0).read_batches(0, max_bytes=1))
    first = sorted(glob.glob(os.path.join(data, "t-0", "*.log")))[0]
    with open(first, "r+b") as f:        # the third batch's length: the segment ends early
        f.seek(2 * batch + 8)
        f.write(b"\x7f")
    broker = BrokerProcess(data)
    try:
        client = RawClient(broker)
        before = fetch(client, "t", 0, 0)                  # the batches in front of it
        assert before["error_code"] == ErrorCode.NONE and len(before["records"]) == 2 * batch
        damaged = fetch(client, "t", 0, 4)
        assert damaged["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert not damaged["records"]
        assert fetch(client, "t", 0, 20)["error_code"] == ErrorCode.NONE  # a later segment
        assert fetch(client, "t", 1, 4)["error_code"] == ErrorCode.NONE
        assert client.metadata_ok()                                         # still connected
        client.close()
    finally:
        broker.stop()
    log_text = broker.stderr()
    assert "fetch t-0 at 4" in log_text and first in log_text, log_text
