"""Delayed operations without sockets: the purgatory itself, delayed produces against a
high watermark that does (or does not) advance, and delayed fetches woken by their own
partitions -- including appends made through another Database on the same data dir."""

import asyncio

import pytest

import kqlite
from kqlite.format.batch import build_batch
from kqlite.protocol import ErrorCode
from kqlite.server.local_partition import LocalPartition
from kqlite.storage import NO_VERIFICATION, Isolation
from kqlite.storage.isolation import read_limit
from kqlite.server.purgatory import DelayedFetch, DelayedOperation, DelayedProduce, Purgatory
from kqlite.server.replica_manager import FetchPartition, ReplicaManager
from kqlite.server.storage_io import StorageExecutor

FOREVER_MS = 600_000   # timeouts the tests never reach: completion must come from a change


class Flag(DelayedOperation):
    def __init__(self, timeout_ms, ready=False):
        super().__init__(timeout_ms)
        self.ready = ready
        self.tries = 0
        self.expirations = 0

    def try_complete(self):
        self.tries += 1
        return self.ready

    def on_expiration(self):
        self.expirations += 1


class FakePartition:
    """What delayed operations read of a partition: its key, positions and state."""

    def __init__(self, key, high_watermark=0):
        self.key = key
        self.is_deleted = False
        self.log_start_offset = 0
        self.high_watermark = self.last_stable_offset = high_watermark
        self.log_end_offset = high_watermark

    def check_enough_replicas_reach_offset(self, offset):
        if self.is_deleted:
            return True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return self.high_watermark >= offset, ErrorCode.NONE

    def fetch_position(self, isolation):
        return self.log_start_offset, read_limit(
            isolation, log_end=self.log_end_offset, high_watermark=self.high_watermark,
            last_stable_offset=self.last_stable_offset)


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


# -- Purgatory --------------------------------------------------------------------------------

def test_an_operation_that_can_complete_at_once_is_never_watched():
    async def main():
        purgatory = Purgatory("test")
        op = Flag(FOREVER_MS, ready=True)
        assert await purgatory.wait(op, ["a"]) is True
        assert op.completed and not op.expired and purgatory.watched_keys() == []
    asyncio.run(main())


def test_only_a_check_of_a_watched_key_completes_an_operation():
    async def main():
        purgatory = Purgatory("test")
        op = Flag(FOREVER_MS)
        waiting = asyncio.ensure_future(purgatory.wait(op, ["a", "b"]))
        await settle()
        assert sorted(purgatory.watched_keys()) == ["a", "b"] and len(purgatory) == 1
        op.ready = True
        assert purgatory.check_and_complete("c") == 0
        await settle()
        assert not waiting.done()
        assert purgatory.check_and_complete("b") == 1
        assert await waiting is True
        assert op.completed and purgatory.watched_keys() == []
        assert purgatory.check_and_complete("a") == 0    # completes once
    asyncio.run(main())


def test_an_operation_expires_after_its_timeout_and_is_unwatched():
    async def main():
        purgatory = Purgatory("test")
        op = Flag(20)
        assert await purgatory.wait(op, ["a"]) is False
        assert op.expired and not op.completed and op.expirations == 1
        assert purgatory.watched_keys() == [] and len(purgatory) == 0
    asyncio.run(main())


def test_a_cancelled_waiter_leaves_nothing_watched():
    async def main():
        purgatory = Purgatory("test")
        waiting = asyncio.ensure_future(purgatory.wait(Flag(FOREVER_MS), ["a"]))
        await settle()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert purgatory.watched_keys() == []
    asyncio.run(main())


def test_expire_all_answers_every_waiting_operation():
    async def main():
        purgatory = Purgatory("test")
        ops = [Flag(FOREVER_MS) for _ in range(3)]
        waiting = [asyncio.ensure_future(purgatory.wait(op, [i % 2])) for i, op in
                   enumerate(ops)]
        await settle()
        purgatory.expire_all()
        assert await asyncio.gather(*waiting) == [False, False, False]
        assert all(op.expirations == 1 for op in ops) and purgatory.watched_keys() == []
    asyncio.run(main())


# -- Delayed produce (acks=-1) ----------------------------------------------------------------

def test_a_delayed_produce_times_out_while_the_high_watermark_stays_below_it():
    async def main():
        purgatory = Purgatory("produce")
        partition = FakePartition(("t", 0), high_watermark=5)
        op = DelayedProduce(partition, required_offset=8, timeout_ms=30)
        assert await purgatory.wait(op, [partition.key]) is False
        assert op.error_code == ErrorCode.REQUEST_TIMED_OUT
    asyncio.run(main())


def test_a_delayed_produce_completes_when_the_high_watermark_reaches_it():
    async def main():
        purgatory = Purgatory("produce")
        partition = FakePartition(("t", 0), high_watermark=5)
        op = DelayedProduce(partition, required_offset=8, timeout_ms=FOREVER_MS)
        waiting = asyncio.ensure_future(purgatory.wait(op, [partition.key]))
        await settle()
        partition.high_watermark = 7            # not yet: offset 7 is not committed
        purgatory.check_and_complete(partition.key)
        await settle()
        assert not waiting.done()
        partition.high_watermark = 8
        purgatory.check_and_complete(partition.key)
        assert await waiting is True and op.error_code == ErrorCode.NONE
    asyncio.run(main())


def test_a_delayed_produce_on_a_deleted_partition_answers_its_error():
    async def main():
        purgatory = Purgatory("produce")
        partition = FakePartition(("t", 0), high_watermark=0)
        op = DelayedProduce(partition, required_offset=1, timeout_ms=FOREVER_MS)
        waiting = asyncio.ensure_future(purgatory.wait(op, [partition.key]))
        await settle()
        partition.is_deleted = True
        purgatory.check_and_complete(partition.key)
        assert await waiting is True
        assert op.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    asyncio.run(main())


def _local_partition(tmp_path, purgatory, io, pin_high_watermark=None):
    db = kqlite.open(tmp_path / "data")
    db.create_topic("t", 1)

    class Partition(LocalPartition):
        def observe(self, positions):
            if pin_high_watermark is not None and positions is not None:
                positions = positions._replace(high_watermark=pin_high_watermark,
                                               last_stable_offset=pin_high_watermark)
            super().observe(positions)

    partition = Partition(db, io, "t", 0, broker_id=0, leader_epoch=0,
                          delayed_produce=purgatory, on_change=lambda p:
                          purgatory.check_and_complete(p.key))
    return db, partition


class RecordingPurgatory(Purgatory):
    def __init__(self, name):
        super().__init__(name)
        self.seen = []

    async def wait(self, op, keys):
        self.seen.append(op)
        return await super().wait(op, keys)


def test_acks_all_on_one_node_completes_through_the_purgatory_at_once(tmp_path):
    async def main():
        io = StorageExecutor(2)
        purgatory = RecordingPurgatory("produce")
        db, partition = _local_partition(tmp_path, purgatory, io)
        try:
            first = await partition.append(build_batch([b"a", b"b"]), acks=-1,
                                           timeout_ms=FOREVER_MS)
            second = await partition.append(build_batch([b"c"]), acks=1, timeout_ms=0)
        finally:
            io.shutdown()
            db.close()
        assert (first.error_code, first.base_offset, first.last_offset) == (0, 0, 1)
        assert second.base_offset == 2
        (op,) = purgatory.seen                  # acks=1 does not wait
        assert isinstance(op, DelayedProduce) and op.required_offset == 2 and op.completed
    asyncio.run(main())


def test_acks_all_times_out_when_the_high_watermark_does_not_advance(tmp_path):
    async def main():
        io = StorageExecutor(2)
        purgatory = Purgatory("produce")
        db, partition = _local_partition(tmp_path, purgatory, io, pin_high_watermark=0)
        try:
            result = await partition.append(build_batch([b"a"]), acks=-1, timeout_ms=30)
        finally:
            io.shutdown()
            db.close()
        assert result.error_code == ErrorCode.REQUEST_TIMED_OUT and result.base_offset == -1
        assert purgatory.watched_keys() == []
    asyncio.run(main())


# -- Delayed fetch ----------------------------------------------------------------------------

def test_a_delayed_fetch_completes_only_on_a_change_of_its_own_partitions():
    async def main():
        purgatory = Purgatory("fetch")
        mine, other = FakePartition(("t", 0), 3), FakePartition(("t", 1), 3)
        iso = Isolation.HIGH_WATERMARK
        op = DelayedFetch([(mine, iso, mine.fetch_position(iso))], FOREVER_MS)
        waiting = asyncio.ensure_future(purgatory.wait(op, [mine.key]))
        await settle()
        other.high_watermark = 4
        purgatory.check_and_complete(other.key)
        mine.log_end_offset = 4                  # appended but not committed: not fetchable
        purgatory.check_and_complete(mine.key)
        await settle()
        assert not waiting.done()
        mine.high_watermark = 4
        purgatory.check_and_complete(mine.key)
        assert await waiting is True
    asyncio.run(main())


def test_a_delayed_fetch_waits_against_its_isolations_limit():
    """Kafka's DelayedFetch: a follower's fetch wakes when the log end moves, a
    read_committed one only when the last stable offset does (a transaction may hold it
    below a moving high watermark)."""
    async def main():
        purgatory = Purgatory("fetch")
        follower, committed = FakePartition(("t", 0), 3), FakePartition(("t", 1), 3)
        ops = {}
        for p, iso in ((follower, Isolation.LOG_END), (committed, Isolation.COMMITTED)):
            ops[p.key] = asyncio.ensure_future(purgatory.wait(
                DelayedFetch([(p, iso, p.fetch_position(iso))], FOREVER_MS), [p.key]))
        await settle()
        follower.log_end_offset = 5
        committed.log_end_offset = committed.high_watermark = 5
        for p in (follower, committed):
            purgatory.check_and_complete(p.key)
        await settle()
        assert ops[follower.key].done() and not ops[committed.key].done()
        committed.last_stable_offset = 5
        purgatory.check_and_complete(committed.key)
        assert await ops[committed.key] is True
    asyncio.run(main())


@pytest.fixture
def manager(tmp_path):
    db = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    db.create_topic("t", 2)
    io = StorageExecutor(4)
    yield db, io
    io.shutdown()
    db.close()


def fetch_one(manager, partition, offset):
    return manager.fetch_messages([FetchPartition("t", partition, offset, 1 << 20)],
                                  max_bytes=1 << 20, min_bytes=1, max_wait_ms=FOREVER_MS)


def test_a_waiting_fetch_is_woken_by_an_append_to_its_partition_not_another(manager):
    db, io = manager

    async def main():
        replicas = ReplicaManager(db, io)
        replicas.start()
        try:
            waiting = asyncio.ensure_future(fetch_one(replicas, 0, 0))
            while not replicas.delayed_fetch.watched_keys():
                await asyncio.sleep(0.001)
            assert replicas.delayed_fetch.watched_keys() == [("t", 0)]
            other = await replicas.get("t", 1)
            assert (await other.append(build_batch([b"elsewhere"]), acks=1,
                                       timeout_ms=0)).error_code == 0
            await settle()
            assert not waiting.done()
            mine = await replicas.get("t", 0)
            await mine.append(build_batch([b"here"]), acks=1, timeout_ms=0)
            (result,) = await asyncio.wait_for(waiting, 30)
            assert result.error_code == 0 and result.size > 0 and result.high_watermark == 1
            result.release()
        finally:
            await replicas.stop()
    asyncio.run(main())


def test_a_waiting_fetch_sees_an_append_made_by_another_database(manager, tmp_path):
    db, io = manager

    async def main():
        replicas = ReplicaManager(db, io, other_writers_check_ms=10)
        replicas.start()
        try:
            waiting = asyncio.ensure_future(fetch_one(replicas, 0, 0))
            while not replicas.delayed_fetch.watched_keys():
                await asyncio.sleep(0.001)
            with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as writer:
                await asyncio.to_thread(writer.log("t", 0).append, [b"from elsewhere"])
            (result,) = await asyncio.wait_for(waiting, 30)
            assert result.error_code == 0 and result.size > 0
            result.release()
        finally:
            await replicas.stop()
    asyncio.run(main())


def test_a_waiting_fetch_answers_when_its_topic_is_deleted(manager):
    db, io = manager

    async def main():
        replicas = ReplicaManager(db, io)
        replicas.start()
        try:
            waiting = asyncio.ensure_future(fetch_one(replicas, 0, 0))
            while not replicas.delayed_fetch.watched_keys():
                await asyncio.sleep(0.001)
            await replicas.delete_topic("t")
            (result,) = await asyncio.wait_for(waiting, 30)
            assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        finally:
            await replicas.stop()
    asyncio.run(main())


# -- watch(): a callback instead of a waiting coroutine (the in-process append's) ------------

def test_a_watched_operation_that_can_complete_now_calls_back_at_once():
    async def main():
        purgatory, called = Purgatory("produce"), []
        purgatory.watch(Flag(FOREVER_MS, ready=True), [("t", 0)], called.append)
        assert called == [True] and len(purgatory) == 0
    asyncio.run(main())


def test_a_watched_operation_calls_back_inside_the_check_that_completes_it():
    async def main():
        purgatory, called = Purgatory("produce"), []
        op = Flag(FOREVER_MS)
        purgatory.watch(op, [("t", 0), ("t", 1)], called.append)
        assert called == [] and len(purgatory) == 1
        op.ready = True
        assert purgatory.check_and_complete(("t", 0)) == 1
        # No loop iteration between the check and the callback; unwatched under both keys.
        assert called == [True] and purgatory.watched_keys() == []
        assert purgatory.check_and_complete(("t", 1)) == 0 and called == [True]
    asyncio.run(main())


def test_a_watched_operation_calls_back_when_its_timeout_passes():
    async def main():
        purgatory, called = Purgatory("produce"), []
        op = Flag(10)
        purgatory.watch(op, [("t", 0)], called.append)
        await asyncio.sleep(0.05)
        assert called == [False] and op.expired and op.expirations == 1
        assert len(purgatory) == 0
        purgatory.watch(Flag(0), [("t", 0)], called.append)
        assert called == [False, False]
        stopping = Flag(FOREVER_MS)
        purgatory.watch(stopping, [("t", 0)], called.append)
        purgatory.expire_all()
        assert called == [False, False, False] and len(purgatory) == 0
    asyncio.run(main())


def test_a_waiting_read_committed_fetch_is_answered_by_the_marker_not_the_records(manager):
    """Kafka's DelayedFetch under read_committed: the transaction's records move the high
    watermark but not the last stable offset, so the fetch keeps waiting; the commit
    marker moves the LSO, which answers it (with the records, however long it may wait)."""
    db, io = manager

    async def main():
        replicas = ReplicaManager(db, io)
        replicas.start()
        try:
            mine = await replicas.get("t", 0)
            txn = build_batch([b"t1", b"t2"], producer_id=7, producer_epoch=0,
                              base_sequence=0, transactional=True)
            assert (await mine.append(txn, acks=1, timeout_ms=0,
                                      verification_guard=NO_VERIFICATION)).error_code == 0
            waiting = asyncio.ensure_future(replicas.fetch_messages(
                [FetchPartition("t", 0, 0, 1 << 20)], max_bytes=1 << 20, min_bytes=1,
                max_wait_ms=FOREVER_MS, isolation=Isolation.COMMITTED, zero_copy=False))
            while not replicas.delayed_fetch.watched_keys():
                await asyncio.sleep(0.001)
            (op,) = replicas.delayed_fetch._watchers[("t", 0)]
            more = build_batch([b"t3"], producer_id=7, producer_epoch=0, base_sequence=2,
                               transactional=True)
            assert (await mine.append(more, acks=1, timeout_ms=0)).error_code == 0
            await settle()
            assert (mine.high_watermark, mine.last_stable_offset) == (3, 0)
            assert not waiting.done() and not op.done
            assert (await mine.append_marker(7, 0, 0, True, timeout_ms=0)).error_code == 0
            (result,) = await asyncio.wait_for(waiting, 30)
            assert op.completed and not op.expired      # the LSO's move, not the timeout
            assert result.error_code == 0 and result.last_stable_offset == 4
            assert result.size > 0 and result.aborted_transactions == []
        finally:
            await replicas.stop()
    asyncio.run(main())
