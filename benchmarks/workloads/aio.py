"""asyncio: one-record durable sends from 100 coroutines, kqlite.aio against aiosqlite,
in the same run (issue 32).

``kqlite.aio``: a topic with ``fsync="always"``; 100 coroutines each ``await
producer.send(topic, value=...)`` one 100-byte record after another. A send returns once
its record is appended and an fdatasync of the log covering it has finished: durable
against power loss. The sends of all coroutines meet in the producer's batches (linger
5 ms, the default) and share their fdatasyncs.

``aiosqlite``: one connection (aiosqlite runs it in one thread), WAL with
``synchronous=FULL``, autocommit; 100 coroutines each ``await conn.execute("INSERT ...")``
one 100-byte row after another: each INSERT is its own transaction, committed (and the
WAL fsynced) before the await returns: durable against power loss as well.

Both figures are records per second. Beside them, a ticker coroutine sleeping 1 ms at a
time measures the event loop's worst delay during each run (``ticker_worst_delay``,
seconds, with its 99th percentile in the note): what another coroutine waits while the
durable writes run. On a loaded machine the worst delay is mostly the scheduler's (the
loop's thread preempted); the loop itself never waits on a file, a lock or an fsync
(tests/aio/test_aio_group_commit.py).

``burst_1000_sends`` is issue 32's "Must show" as a figure: 1,000 concurrent ``await
producer.send()`` calls on a topic with ``fsync="always"``, started at once (one
``asyncio.gather``), with the 1 ms ticker beside them; a round's figure is the ticker's
worst delay, the reported one the median over the rounds (the worst round in the note,
with the log's fdatasyncs per send). Target: at most 5 ms. What the loop pays per send
is what delays the ticker here: the 1,000 sends' first steps run in one turn of the loop.
"""

import asyncio
import os
import time

import kqlite.aio

from common import settle

NAME = "aio"
DESCRIPTION = "asyncio: durable one-record sends from 100 coroutines, kqlite.aio vs aiosqlite"

COROUTINES = 100
VALUE_SIZE = 100
TICK = 0.001
KQ = "kqlite.aio (fsync=always)"
BURST_KQ = "kqlite.aio ticker worst delay"
SQLITE = "aiosqlite (WAL, synchronous=FULL, autocommit)"


async def _ticker(stop, delays):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(TICK)
        delays.append(loop.time() - before - TICK)


async def _measure(write, per_coroutine):
    """Run COROUTINES coroutines of ``per_coroutine`` awaited writes each, with the ticker;
    (seconds, worst ticker delay, its 99th percentile)."""
    stop, delays = asyncio.Event(), []
    ticker = asyncio.create_task(_ticker(stop, delays))

    async def writer():
        for _ in range(per_coroutine):
            await write()

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(COROUTINES)))
    seconds = time.perf_counter() - started
    stop.set()
    await ticker
    delays.sort()
    if not delays:
        return seconds, 0.0, 0.0
    return seconds, delays[-1], delays[int(len(delays) * 0.99)]


async def _kqlite(path, value, per_coroutine):
    async with kqlite.aio.open(path, retention_check_interval_ms=0) as db:
        await db.create_topic("bench", config={"fsync": "always"})
        async with db.producer() as producer:
            await producer.send("bench", value=value)          # untimed: open, lease, thread

            async def write():
                await producer.send("bench", value=value)
            return await _measure(write, per_coroutine)


BURST = 1000


async def _burst(path, rounds):
    """[worst ticker delay of each round] of ``rounds`` bursts of BURST sends."""
    worst = []
    async with kqlite.aio.open(path, retention_check_interval_ms=0) as db:
        await db.create_topic("burst", config={"fsync": "always"})
        async with db.producer() as producer:
            await producer.send("burst", value=b"first")      # untimed: open, lease, threads
            for _ in range(rounds):
                stop, delays = asyncio.Event(), []
                ticker = asyncio.create_task(_ticker(stop, delays))
                await asyncio.sleep(TICK * 3)
                await asyncio.gather(*(producer.send("burst", value=b"v%04d" % i)
                                       for i in range(BURST)))
                stop.set()
                await ticker
                worst.append(max(delays))
    return worst


async def _aiosqlite(aiosqlite, path, value, per_coroutine):
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        await conn.execute("CREATE TABLE bench (id INTEGER PRIMARY KEY, value BLOB)")

        async def write():
            await conn.execute("INSERT INTO bench (value) VALUES (?)", (value,))
        return await _measure(write, per_coroutine)


def run(ctx):
    value = os.urandom(VALUE_SIZE)
    per_kq = ctx.pick(20, 300, 1000)
    per_sqlite = ctx.pick(3, 20, 60)
    with ctx.workdir("kqlite") as d:
        settle()
        seconds, worst, p99 = asyncio.run(_kqlite(os.path.join(d, "data"), value, per_kq))
    count = per_kq * COROUTINES
    ctx.add_rate("send_100_coroutines", KQ, count, seconds,
                 note=f"{COROUTINES} coroutines, {count} durable one-record sends")
    ctx.add("ticker_worst_delay", KQ, worst, "s",
            note=f"1 ms ticker during the sends; p99 {p99 * 1000:.2f} ms")
    rounds = ctx.pick(3, 9, 21)
    with ctx.workdir("burst") as d:
        settle()
        worst = sorted(asyncio.run(_burst(os.path.join(d, "data"), rounds)))
    ctx.add("burst_1000_sends", BURST_KQ, worst[len(worst) // 2], "s",
            note=f"median of {rounds} rounds' worst 1 ms-ticker delay during {BURST} "
                 f"concurrent durable sends; worst round {worst[-1] * 1000:.2f} ms")
    aiosqlite = ctx.peer("aiosqlite", "send_100_coroutines", SQLITE)
    if aiosqlite is None:
        return
    with ctx.workdir("aiosqlite") as d:
        settle()
        seconds, worst, p99 = asyncio.run(_aiosqlite(aiosqlite, os.path.join(d, "bench.db"), value,
                                                per_sqlite))
    count = per_sqlite * COROUTINES
    ctx.add_rate("send_100_coroutines", SQLITE, count, seconds,
                 note=f"{COROUTINES} coroutines, {count} inserts, a commit each")
    ctx.add("ticker_worst_delay", SQLITE, worst, "s",
            note=f"1 ms ticker during the inserts; p99 {p99 * 1000:.2f} ms")
