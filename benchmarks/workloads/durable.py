"""Durable appends: every append returns only once its record is on disk.
One thread with an fsync per append, and 8 threads sharing one log, where kqlite's
group commit lets one fdatasync cover the records of every waiting thread."""

import os
import threading
import time

import kqlite

import peers
from common import run_threads, timed_loop, values

NAME = "durable"
DESCRIPTION = "fsync per append (1 thread) and group commit (8 threads)"

KQ = "kqlite"
THREADS = 8


def _threaded(ctx, case, system, make_append, seconds, pool):
    """THREADS threads call their append(value) until ``seconds`` pass."""
    counts = [0] * THREADS
    stop = [0.0]

    def body(i):
        append = make_append(i)
        n = 0
        k = i
        deadline = stop[0]
        while time.perf_counter() < deadline:
            append(pool[k % len(pool)])
            k += THREADS
            n += 1
        counts[i] = n

    started = time.perf_counter()
    stop[0] = started + seconds + 0.05
    run_threads(THREADS, body)
    elapsed = time.perf_counter() - started
    return ctx.add_rate(case, system, sum(counts), elapsed,
                        note=f"{THREADS} threads, {sum(counts)} records")


def run(ctx):
    pool = values(100, 1000)
    seconds = ctx.budget * 2

    with ctx.workdir("kq") as d:
        with kqlite.Log.open(os.path.join(d, "bench-0"), fsync="always") as log:
            it = iter(pool * 1000)
            n, t = timed_loop(lambda: log.append(next(it)), seconds)
            ctx.add_rate("fsync_per_append_1_thread", KQ, n, t, note='fsync="always"')
    singles = [
        ("sqlite3 (WAL, synchronous=FULL)", "sqlite3", lambda d: peers.Sqlite(d, durable=True)),
        ("lmdb (sync=True, txn per record)", "lmdb", lambda d: peers.Lmdb(d, durable=True)),
        ("raw framed file + fdatasync", "struct", lambda d: peers.Framed(d, durable=True)),
        ("persist-queue Queue (file)", "persistqueue", lambda d: peers.PersistQueue(d)),
    ]
    for system, module, factory in singles:
        if ctx.peer(module, "fsync_per_append_1_thread", system) is None:
            continue
        with ctx.workdir("peer") as d:
            store = factory(d)
            try:
                it = iter(pool * 1000)
                n, t = timed_loop(lambda: store.append_one(next(it)), seconds)
            finally:
                store.close()
        ctx.add_rate("fsync_per_append_1_thread", system, n, t)

    case = "group_commit_8_threads"
    with ctx.workdir("kq") as d:
        with kqlite.Log.open(os.path.join(d, "bench-0"), fsync="always") as log:
            _threaded(ctx, case, KQ, lambda i: log.append, seconds, pool)
            assert log.end_offset == ctx.results[-1]["n"]
    if ctx.peer("sqlite3", case, "sqlite3 (WAL, synchronous=FULL)") is not None:
        with ctx.workdir("peer") as d:
            first = peers.Sqlite(d, durable=True)
            conns = [first] + [peers.Sqlite(d, durable=True) for _ in range(THREADS - 1)]
            try:
                _threaded(ctx, case, "sqlite3 (WAL, synchronous=FULL)",
                          lambda i: conns[i].append_one, seconds, pool)
            finally:
                for c in conns:
                    c.close()
    if ctx.peer("lmdb", case, "lmdb (sync=True, txn per record)") is not None:
        with ctx.workdir("peer") as d:
            store = peers.Lmdb(d, durable=True)
            lock = threading.Lock()
            store.prepare(1_000_000)

            def make(i):
                def append(v):
                    with lock:   # keys are handed out in order
                        k = store._take(1)[0]
                    with store.env.begin(write=True) as txn:
                        txn.put(k, v)
                return append
            try:
                _threaded(ctx, case, "lmdb (sync=True, txn per record)", make, seconds, pool)
            finally:
                store.close()
