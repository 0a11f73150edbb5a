"""A measurement, printed and never asserted: how long a second client waits for
ApiVersions while the broker serves a Fetch of 60,000 one-record batches. (Run with
``-s`` to see it.) The test itself checks only that the Fetch returns every batch."""

import time

from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode

BATCHES = 60_000


def test_api_versions_latency_during_a_large_fetch(tmp_path):
    broker = BrokerThread(tmp_path / "data")
    try:
        db = broker.broker.db
        db.create_topic("big", 1)
        with db.leased_log("big", 0) as log:
            log.append_batches(build_batch([b"x"]) * BATCHES)
        fetcher, other = RawClient(broker), RawClient(broker)
        other.call(ApiKey.API_VERSIONS, 2, {})
        fetcher.send(ApiKey.FETCH, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                                       "max_bytes": 0x7FFFFFFF, "isolation_level": 0, "topics": [
                                           {"topic": "big", "partitions": [
                                               {"partition": 0, "fetch_offset": 0,
                                                "partition_max_bytes": 0x7FFFFFFF}]}]})
        started = time.perf_counter()
        while not any(c.busy for c in broker.broker._connections):   # serving the Fetch
            time.sleep(0.0005)
        sent = time.perf_counter()
        other.call(ApiKey.API_VERSIONS, 2, {})
        latency = time.perf_counter() - sent
        (part,) = fetcher.receive(ApiKey.FETCH, 4)["responses"][0]["partitions"]
        fetch_time = time.perf_counter() - started
        print(f"\nApiVersions answered in {latency * 1000:.1f} ms while a Fetch of {BATCHES} "
              f"batches took {fetch_time * 1000:.0f} ms")
        assert part["error_code"] == ErrorCode.NONE
        assert len(part["records"]) == BATCHES * len(build_batch([b"x"]))
        fetcher.close()
        other.close()
    finally:
        broker.stop()
