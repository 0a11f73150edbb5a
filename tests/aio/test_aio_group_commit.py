"""Concurrent ``await producer.send()`` calls share appends and fsyncs, and the event loop
never waits on the disk meanwhile (issue 32, "Must show": an asyncio test).

What is asserted is structural: the fdatasyncs of the topic's log, counted through the
file-system seam, are at most a tenth of the sends; and the loop's thread makes no call
through the seam, no flock, no fsync and no sleep (tests/aio/aio_probe.py), from the open of
the data dir to its close. A ticker coroutine's worst delay while the sends run is
measured and printed, not asserted (timings never decide a test; the aio workload of
benchmarks/ reports it too).
"""

import asyncio
import threading

import pytest

import kqlite.aio

from aio_probe import WatchedFS, watch_blocking_calls

SENDS = 1000
TICK = 0.001


async def _ticker(stop, delays):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(TICK)
        delays.append(loop.time() - before - TICK)


async def _sends_with_ticker(path, fs):
    fs.loop_thread = threading.get_ident()
    async with kqlite.aio.open(path, fs=fs) as db:
        await db.create_topic("t", config={"fsync": "always"})
        async with db.producer() as producer:
            await producer.send("t", value=b"first")       # the log is open and leased
            syncs_before = fs.log_syncs
            stop, delays = asyncio.Event(), []
            ticker = asyncio.create_task(_ticker(stop, delays))
            await asyncio.sleep(TICK * 3)
            metas = await asyncio.gather(*(producer.send("t", value=b"v%04d" % i)
                                           for i in range(SENDS)))
            stop.set()
            await ticker
            syncs = fs.log_syncs - syncs_before
    return metas, syncs, delays


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_thousand_durable_sends_share_fsyncs_off_the_loop(tmp_path, monkeypatch, loop):
    fs = WatchedFS()
    watch_blocking_calls(monkeypatch, fs)
    run = asyncio.run if loop == "asyncio" else pytest.importorskip("uvloop").run
    metas, syncs, delays = run(_sends_with_ticker(tmp_path / "data", fs))
    assert sorted(m.offset for m in metas) == list(range(1, SENDS + 1))
    assert 1 <= syncs <= SENDS // 10, syncs
    assert fs.on_loop == [], fs.on_loop[:10]
    print(f"\n{loop}: {SENDS} sends, {syncs} fdatasyncs of the log, ticker worst delay "
          f"{max(delays) * 1000:.2f} ms over {len(delays)} ticks")
    with kqlite.open(tmp_path / "data") as db:
        with db.leased_log("t", 0) as log:
            values = [r.value for r in log.read(1)]
    assert values == [b"v%04d" % i for i in range(SENDS)]


def test_consumer_transaction_and_log_calls_stay_off_the_loop(tmp_path, monkeypatch):
    fs = WatchedFS()
    watch_blocking_calls(monkeypatch, fs)

    async def main():
        fs.loop_thread = threading.get_ident()
        async with kqlite.aio.open(tmp_path / "data", fs=fs) as db:
            await db.create_topic("t")
            async with db.transaction() as tx:
                await tx.send("t", value=b"in a transaction")
                await tx.commit_offsets("g", {("t", 0): 0})
            async with db.producer(linger_ms=0) as producer:
                await producer.send("t", value=b"sent")
            async with db.consumer("t", group="g", consumer_timeout_ms=100) as consumer:
                values = [bytes(r.value) async for r in consumer]
                await consumer.commit()
                await consumer.position(("t", 0))
            log = await db.log("t", 0)
            read = [bytes(r.value) async for r in log.read(0)]
        async with kqlite.aio.Log.open(tmp_path / "log", fs=fs, fsync="always") as own:
            await own.append([b"a", b"b"])
            await own.flush()
        return values, read

    values, read = asyncio.run(main())
    assert values == read == [b"in a transaction", b"sent"]
    assert fs.on_loop == [], fs.on_loop[:10]
