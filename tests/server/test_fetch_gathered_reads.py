"""A Fetch over many partitions of this broker reads them all in one storage-thread call
(replica_manager.py's ``_read_in_order``), with the rules of one call per partition: request
order, the first partition with data returning a batch whatever ``max_bytes`` says and the
later ones only what still fits, every region counted against the budget and given back.
A follower's Fetch is first announced to each of its partitions (follower_fetch_arrived,
where a cluster leader hears the follower's position) before any is read."""

import asyncio

import kqlite
from kqlite.storage import reads as storage_reads
from kqlite.format.batch import build_batch
from kqlite.protocol import ErrorCode, FileRegion
from kqlite.server.replica_manager import FetchPartition, ReplicaManager
from kqlite.server.storage_io import StorageExecutor

PARTITIONS = 16


class CountingExecutor(StorageExecutor):
    """A storage executor that names each function it runs."""

    def __init__(self):
        super().__init__(2)
        self.calls = []

    async def run(self, fn, *args, **kwargs):
        self.calls.append(fn.__name__)
        return await super().run(fn, *args, **kwargs)


def fetch(tmp_path, fetches, max_bytes, batches=None):
    """(results as (error, records type, size, high watermark), storage calls of the
    fetch, regions held while the results are unsent, regions held after they are
    released). ``batches``: one batch appended to each partition of the topic (default
    PARTITIONS batches of 100-odd bytes)."""
    if batches is None:
        batches = [build_batch([b"v%d" % p * 100]) for p in range(PARTITIONS)]

    async def main(db):
        io = CountingExecutor()
        replicas = ReplicaManager(db, io)
        try:
            for p, batch in enumerate(batches):
                partition = await replicas.get("t", p)
                await partition.append(batch, acks=1, timeout_ms=0)
            io.calls.clear()
            results = await replicas.fetch_messages(fetches, max_bytes=max_bytes,
                                                    min_bytes=1, max_wait_ms=0)
            calls, held = list(io.calls), replicas.regions.held
            seen = [(r.error_code, type(r.records), r.size, r.high_watermark)
                    for r in results]
            for r in results:
                r.release()
            return seen, calls, held, replicas.regions.held
        finally:
            io.shutdown()

    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as db:
        db.create_topic("t", len(batches))
        return asyncio.run(main(db))


def test_a_fetch_of_sixteen_partitions_reads_them_in_one_storage_call(tmp_path):
    seen, calls, held, after = fetch(
        tmp_path, [FetchPartition("t", p, 0, 1 << 20) for p in range(PARTITIONS)], 1 << 20)
    assert calls == ["_read_in_order"]
    assert [(code, kind) for code, kind, _, _ in seen] == [(ErrorCode.NONE, FileRegion)] * 16
    assert all(size > 0 for _, _, size, _ in seen)
    assert (held, after) == (PARTITIONS, 0)


def test_partitions_past_max_bytes_come_back_empty_and_give_their_regions_back(tmp_path):
    seen, calls, held, after = fetch(
        tmp_path, [FetchPartition("t", p, 0, 1 << 20) for p in (3, 1, 2)], 1)
    assert calls == ["_read_in_order"]
    first, *rest = seen
    assert first[0] == ErrorCode.NONE and first[1] is FileRegion and first[2] > 1
    assert [size for _, _, size, _ in rest] == [0, 0]
    assert (held, after) == (1, 0)


def test_an_unknown_partition_and_a_newer_epoch_answer_beside_the_gathered_reads(tmp_path):
    seen, calls, held, after = fetch(
        tmp_path, [FetchPartition("t", 0, 0, 1 << 20), FetchPartition("t", 99, 0, 1 << 20),
                   FetchPartition("t", 1, 0, 1 << 20, current_leader_epoch=5)], 1 << 20)
    assert [code for code, _, _, _ in seen] == [ErrorCode.NONE,
                                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              ErrorCode.UNKNOWN_LEADER_EPOCH]
    assert calls[-1] == "_read_in_order" and seen[0][2] > 0
    assert (held, after) == (1, 0)


def test_once_max_bytes_is_spent_later_partitions_report_positions_without_a_lookup(
        tmp_path, monkeypatch):
    # Kafka's readFromLocalLog: "Once we read from a non-empty partition, we stop
    # ignoring request and partition level size limits"; with no room left the later
    # partitions read nothing, yet answer their offsets.
    looked_up = []
    extent = storage_reads._extent

    def counting_extent(lg, offset, max_bytes, *args, **kwargs):
        looked_up.append(max_bytes)
        return extent(lg, offset, max_bytes, *args, **kwargs)
    monkeypatch.setattr(storage_reads, "_extent", counting_extent)
    seen, _calls, _held, _after = fetch(
        tmp_path, [FetchPartition("t", p, 0, 1 << 20) for p in range(3)], 1,
        batches=[build_batch([b"v" * 500])] * 3)
    assert looked_up == [1]
    assert seen[0][0] == ErrorCode.NONE and seen[0][2] > 1
    assert [(code, size, hw) for code, _, size, hw in seen[1:]] == [
        (ErrorCode.NONE, 0, 1), (ErrorCode.NONE, 0, 1)]


def test_a_later_partition_whose_first_batch_does_not_fit_returns_nothing(tmp_path):
    small, large = build_batch([b"s" * 100]), build_batch([b"l" * 5000])
    seen, _calls, _held, _after = fetch(
        tmp_path, [FetchPartition("t", p, 0, 1 << 20) for p in range(3)], len(small) * 3,
        batches=[small, large, small])
    assert [size for _, _, size, _ in seen] == [len(small), 0, len(small)]


def test_each_partition_hears_a_follower_fetch_before_any_partition_is_read(tmp_path):
    async def main(db):
        io = StorageExecutor(2)
        replicas = ReplicaManager(db, io)
        events = []
        try:
            for p in range(3):
                partition = await replicas.get("t", p)
                partition.follower_fetch_arrived = (
                    lambda offset, replica, *rest, p=p: events.append(("heard", p, offset,
                                                                       replica)))
                storage_read = partition.read_in_storage
                partition.read_in_storage = (
                    lambda *args, p=p, read=storage_read, **kwargs: events.append(("read", p))
                    or read(*args, **kwargs))
            results = await replicas.fetch_messages(
                [FetchPartition("t", p, 0, 1 << 20) for p in range(3)], max_bytes=1 << 20,
                min_bytes=0, max_wait_ms=0, replica_id=1)
            for r in results:
                r.release()
            assert events == [("heard", p, 0, 1) for p in range(3)] + [
                ("read", p) for p in range(3)]
            events.clear()
            await replicas.fetch_messages([FetchPartition("t", 0, 0, 1 << 20)],
                                          max_bytes=1 << 20, min_bytes=0, max_wait_ms=0)
            assert events == [("read", 0)]       # a consumer's fetch is no follower's
        finally:
            io.shutdown()

    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as db:
        db.create_topic("t", 3)
        asyncio.run(main(db))
