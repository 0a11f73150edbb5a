"""kqlite.aio's API: the data dir, the consumer and its commits, transactions, a log's
appends and reads, under asyncio and uvloop (the C pass only: nothing here depends on the
C helpers)."""

import asyncio

import pytest

import kqlite
import kqlite.aio
from kqlite.aio import write_outcome

LOOPS = ["asyncio", "uvloop"]


def _run(loop, coro):
    if loop == "asyncio":
        return asyncio.run(coro)
    return pytest.importorskip("uvloop").run(coro)


@pytest.mark.parametrize("loop", LOOPS)
def test_records_sent_are_consumed_and_commit_covers_what_was_yielded(tmp_path, loop):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t", partitions=2)
            async with db.producer() as producer:
                sent = [await producer.send("t", value=b"v%d" % i, key=b"k%d" % (i % 5))
                        for i in range(40)]
            assert {m.partition for m in sent} == {0, 1}
            async with db.consumer("t", group="g", enable_auto_commit=False,
                                   max_poll_records=7) as consumer:
                seen = []
                async for record in consumer:
                    seen.append(record)
                    if len(seen) == 10:
                        break
                # Records of a poll not yielded yet are not committed.
                await consumer.commit()
                committed = {tp: await consumer.committed(tp) for tp in [("t", 0), ("t", 1)]}
            return sent, seen, committed

    sent, seen, committed = _run(loop, main())
    by_partition = {}
    for r in seen:
        by_partition.setdefault(r.partition, []).append(r.offset)
    for p, offsets in by_partition.items():
        assert committed[("t", p)] == max(offsets) + 1
    with kqlite.open(tmp_path) as db:
        with db.consumer("t", group="g", consumer_timeout_ms=200) as rest:
            later = list(rest)
    got = {(r.partition, r.offset) for r in seen} | {(r.partition, r.offset) for r in later}
    assert got == {(m.partition, m.offset) for m in sent}
    assert len(seen) + len(later) == len(sent)      # nothing consumed twice


def test_iteration_ends_after_consumer_timeout_and_on_close(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            consumer = await db.consumer("t", consumer_timeout_ms=50)
            assert [r async for r in consumer] == []
            await consumer.close()
            assert [r async for r in consumer] == []
    asyncio.run(main())


def test_a_cancelled_poll_loses_no_records(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            consumer = await db.consumer("t", group="g")
            waiting = asyncio.ensure_future(consumer.__anext__())
            await asyncio.sleep(0.02)                 # a poll waits in the thread
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            # The poll goes on in its thread: what it finds is kept for the next reads.
            async with db.producer(linger_ms=0) as producer:
                for i in range(5):
                    await producer.send("t", value=b"%d" % i)
            # Whatever that poll fetched was not yielded: a commit does not cover it.
            await consumer.commit()
            assert await consumer.committed(("t", 0)) in (None, 0)
            values = []
            async for record in consumer:
                values.append(record.value)
                if len(values) == 5:
                    break
            await consumer.close()
            return values
    assert asyncio.run(main()) == [b"0", b"1", b"2", b"3", b"4"]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_transaction_commits_at_the_end_of_its_block_and_aborts_on_an_exception(
        tmp_path, loop):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            async with db.transaction() as tx:
                kept = await tx.send("t", value=b"kept")
                await tx.commit_offsets("g", {("t", 0): 1})
            with pytest.raises(RuntimeError):
                async with db.transaction() as tx:
                    await tx.send("t", value=b"dropped")
                    raise RuntimeError("rolled back")
            assert tx.ended
            explicit = await db.transaction()
            await explicit.send("t", value=b"aborted")
            await explicit.abort()
            async with db.consumer("t", isolation_level="read_committed",
                                   consumer_timeout_ms=200) as consumer:
                values = [r.value async for r in consumer]
            return kept.result(), values

    kept, values = _run(loop, main())
    assert kept.offset == 0
    assert values == [b"kept"]
    with kqlite.open(tmp_path) as db:
        assert db.offsets.committed("g")[("t", 0)] == 1


def test_a_cancelled_transaction_body_aborts_it(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            started = asyncio.Event()

            async def body():
                async with db.transaction() as tx:
                    await tx.send("t", value=b"never")
                    started.set()
                    await asyncio.sleep(10)

            task = asyncio.ensure_future(body())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with db.consumer("t", isolation_level="read_committed",
                                   consumer_timeout_ms=100) as consumer:
                return [r.value async for r in consumer]
    assert asyncio.run(main()) == []


@pytest.mark.parametrize("loop", LOOPS)
def test_log_appends_and_async_reads(tmp_path, loop):
    async def main():
        async with kqlite.aio.Log.open(tmp_path / "l", fsync="always") as log:
            firsts = await asyncio.gather(*(log.append([b"a%d" % i, b"b%d" % i])
                                            for i in range(50)))
            everything = [r async for r in log.read()]
            some = [r.offset async for r in log.read(10, max_records=3)]
            one = await log.read_one(7)
            return firsts, everything, some, one, await log.end_offset()

    firsts, everything, some, one, end = _run(loop, main())
    assert sorted(firsts) == list(range(0, 100, 2))
    assert [r.offset for r in everything] == list(range(100))
    pairs = {r.value: r.offset for r in everything}
    for i in range(50):
        assert pairs[b"b%d" % i] == pairs[b"a%d" % i] + 1     # each append is whole
    assert some == [10, 11, 12]
    assert one.offset == 7 and end == 100


def test_a_database_log_reads_what_the_producer_sent(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            producer = db.producer(linger_ms=1)
            metas = await asyncio.gather(*(producer.send("t", value=b"%d" % i)
                                           for i in range(300)))
            await producer.close()
            log = await db.log("t", 0)
            return metas, [r.value async for r in log.read(0)]
    # The first sends wait for the sender thread and the topic's definition: the ones
    # behind them wait their turn, so records keep the order of the calls.
    metas, values = asyncio.run(main())
    assert [m.offset for m in metas] == list(range(300))
    assert values == [b"%d" % i for i in range(300)]


def test_a_send_cancelled_after_the_hand_off_tells_its_outcome(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            producer = db.producer(linger_ms=50)
            await producer.send("t", value=b"first")
            task = asyncio.ensure_future(producer.send("t", value=b"second"))
            await asyncio.sleep(0)                  # handed over, lingering
            task.cancel()
            with pytest.raises(asyncio.CancelledError) as cancelled:
                await task
            metadata = await write_outcome(cancelled.value)
            timed_out = None
            try:
                await asyncio.wait_for(producer.send("t", value=b"third"), 0.001)
            except asyncio.TimeoutError as exc:
                timed_out = await write_outcome(exc)
            if hasattr(asyncio, "timeout"):                 # Python 3.11
                try:
                    async with asyncio.timeout(0.001):
                        await producer.send("t", value=b"fourth")
                except TimeoutError as exc:
                    assert (await write_outcome(exc)).offset == 3
            # Cancelled before its first step: nothing was handed over.
            never = asyncio.ensure_future(producer.send("t", value=b"never"))
            never.cancel()
            with pytest.raises(asyncio.CancelledError) as cancelled:
                await never
            assert write_outcome(cancelled.value) is None
            await producer.close()
            return metadata, timed_out
    metadata, timed_out = asyncio.run(main())
    assert metadata.offset == 1 and timed_out.offset == 2


def test_a_send_cancelled_between_its_result_and_its_wake_up_still_tells_its_outcome(tmp_path):
    """The task's cancellation cancels the future send awaits at once and resumes the task
    a turn later; here the results arrive in that turn, before the task asks for its
    outcome: the drain keeps the result for it."""
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            async with db.producer(linger_ms=0) as producer:
                await producer.send("t", value=b"first")
                handoff = producer._handoff
                task = asyncio.ensure_future(producer.send("t", value=b"second"))
                drain, kept = handoff._drain, []

                def cancel_then_drain():
                    task.cancel()
                    drain()
                    kept.append(len(handoff._unclaimed))
                handoff._drain = cancel_then_drain
                with pytest.raises(asyncio.CancelledError) as cancelled:
                    await task
                assert kept[0] == 1                 # kept by the drain, for the sender
                assert len(handoff._unclaimed) == 0 and handoff._rescued == {}
                return await write_outcome(cancelled.value)
    assert asyncio.run(main()).offset == 1


def test_send_nowait_hands_over_once_the_producer_has_sent_to_the_topic(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            async with db.producer(linger_ms=0) as producer:
                with pytest.raises(RuntimeError, match="first send"):
                    producer.send_nowait("t", value=b"too early")
                await producer.send("t", value=b"first")
                futures = [producer.send_nowait("t", value=b"v%d" % i) for i in range(3)]
                return [m.offset for m in await asyncio.gather(*futures)]
    assert asyncio.run(main()) == [1, 2, 3]


def test_a_send_the_producer_refuses_fails_alone(tmp_path):
    """An error of the threaded Producer's send (here: no such partition) is that record's;
    the records handed over with it are sent."""
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            async with db.producer() as producer:
                await producer.send("t", value=b"first")
                return await asyncio.gather(producer.send("t", value=b"a"),
                                            producer.send("t", value=b"b", partition=7),
                                            producer.send("t", value=b"c"),
                                            return_exceptions=True)
    a, refused, c = asyncio.run(main())
    assert (a.offset, c.offset) == (1, 2)
    assert isinstance(refused, kqlite.KqliteError) and "no partition 7" in str(refused)


def test_a_send_after_close_is_refused(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            await db.create_topic("t")
            producer = db.producer()
            await producer.send("t", value=b"first")
            await producer.close()
            with pytest.raises(kqlite.errors.LogClosedError):
                await producer.send("t", value=b"late")
    asyncio.run(main())


def test_an_unknown_topic_is_refused_without_sending(tmp_path):
    async def main():
        async with kqlite.aio.open(tmp_path) as db:
            async with db.producer() as producer:
                with pytest.raises(kqlite.UnknownTopicError):
                    await producer.send("missing", value=b"x")
    asyncio.run(main())


def test_open_as_await_and_as_context_manager(tmp_path):
    async def main():
        db = await kqlite.aio.open(tmp_path, auto_create_topics=True)
        async with db.producer() as producer:
            await producer.send("auto", value=b"x")
        topics = await db.list_topics()
        await db.close()
        return topics
    assert asyncio.run(main()) == ["auto"]


def test_what_a_cancelled_open_opened_is_closed(tmp_path, monkeypatch):
    closed = []
    real_close = kqlite.Log.close

    def close(log):
        closed.append(log)
        real_close(log)

    monkeypatch.setattr(kqlite.Log, "close", close)

    async def main():
        opening = asyncio.ensure_future(kqlite.aio.Log.open(tmp_path / "l"))
        await asyncio.sleep(0)                   # the open runs in its thread
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        for _ in range(200):
            if closed:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert len(closed) == 1
