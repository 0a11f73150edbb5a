"""A broker over 2,000 partitions under ``ulimit -n 1024`` (with --soak; the default run
keeps the proportion at a quarter of the size, 500 under 256): partitions hold no open log
between requests (each storage call leases its log), and a Fetch of every partition at
once holds a bounded number of segment descriptors until its response is sent.

Slow by nature: the Database keeps an eighth of that limit in logs open, so every
request here opens and closes logs in turn (a close is a clean shutdown, with fsyncs).
"""

import asyncio

import pytest

import kqlite
from broker_process import BrokerProcess, RawClient

from kqlite.format.batch import build_batch, parse_header
from kqlite.protocol import ApiKey, ErrorCode, FileRegion
from kqlite.server.replica_manager import FetchPartition, ReplicaManager
from kqlite.server.storage_io import StorageExecutor

def produce_everywhere(client, value, partitions):
    body = client.call(ApiKey.PRODUCE, 7, {"acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": "wide", "partition_data": [{"index": p, "records": build_batch([value])}
                                                         for p in range(partitions)]}]})
    return body["responses"][0]["partition_responses"]


def fetch_everywhere(client, offset, partitions):
    body = client.call(ApiKey.FETCH, 11, {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 64 << 20,
                                          "topics": [{"topic": "wide", "partitions": [
                                              {"partition": p, "fetch_offset": offset,
                                               "partition_max_bytes": 1 << 20}
                                              for p in range(partitions)]}]})
    return body["responses"][0]["partitions"]


def test_reads_past_the_region_budget_return_bytes_and_every_region_is_given_back(tmp_path):
    async def main(db):
        io = StorageExecutor(2)
        replicas = ReplicaManager(db, io)
        replicas.regions.limit = 2
        try:
            for p in range(5):
                partition = await replicas.get("t", p)
                await partition.append(build_batch([b"v%d" % p]), acks=1, timeout_ms=0)
            results = await replicas.fetch_messages(
                [FetchPartition("t", p, 0, 1 << 20) for p in range(5)], max_bytes=1 << 20,
                min_bytes=1, max_wait_ms=0)
            kinds = [type(r.records) for r in results]
            held = replicas.regions.held
            for r in results:
                r.release()
            return kinds, held, replicas.regions.held
        finally:
            io.shutdown()

    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as db:
        db.create_topic("t", 5)
        kinds, held, after = asyncio.run(main(db))
    assert kinds == [FileRegion, FileRegion, bytes, bytes, bytes]
    assert (held, after) == (2, 0)


@pytest.mark.slow
def test_partitions_beyond_the_descriptor_limit(tmp_path, soak):
    limit, partitions = (1024, 2000) if soak else (256, 500)
    data = tmp_path / "data"
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        db.create_topic("wide", partitions)
    broker = BrokerProcess(data, max_open_files=limit)
    try:
        client = RawClient(broker, timeout=300)
        answers = produce_everywhere(client, b"value", partitions)
        assert [(a["error_code"], a["base_offset"]) for a in answers] == \
            [(ErrorCode.NONE, 0)] * partitions
        parts = fetch_everywhere(client, 0, partitions)
        assert [p["error_code"] for p in parts] == [ErrorCode.NONE] * partitions
        assert all(parse_header(p["records"]).base_offset == 0 for p in parts)
        meta = client.call(ApiKey.METADATA, 9, {"topics": [{"name": "wide"}],
                                                "allow_auto_topic_creation": False})
        assert len(meta["topics"][0]["partitions"]) == partitions
        client.close()
    finally:
        code = broker.stop()
    assert code == 0, broker.stderr()
    assert "Too many open files" not in broker.stderr()
