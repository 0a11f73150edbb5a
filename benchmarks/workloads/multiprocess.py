"""Several processes appending to the same log at once (4 processes): lists of
1,000 records and one record per call. kqlite serializes appends with a file lock
and keeps offsets dense; sqlite3 (WAL) does the same job with its own locking."""

import multiprocessing
import os
import time

import kqlite

import peers
from common import values

NAME = "multiprocess"
DESCRIPTION = "4 processes appending to one log (batched and one at a time)"

KQ = "kqlite"
PROCS = 4


def _child(kind, path, calls, batch, barrier, done):
    pool = values(100, batch)
    if kind == "kqlite":
        store = kqlite.Log.open(path)
        append_batch, append_one = store.append, store.append
    else:
        store = peers.Sqlite(path)
        append_batch, append_one = store.append_batch, store.append_one
    barrier.wait()
    if batch > 1:
        for _ in range(calls):
            append_batch(pool)
    else:
        for i in range(calls):
            append_one(pool[i % len(pool)])
    done.put(time.perf_counter())
    store.close()


def _measure(ctx, case, system, kind, path, calls, batch):
    mp = multiprocessing.get_context("fork")
    barrier = mp.Barrier(PROCS + 1)
    done = mp.Queue()
    procs = [mp.Process(target=_child, args=(kind, path, calls, batch, barrier, done))
             for _ in range(PROCS)]
    for p in procs:
        p.start()
    barrier.wait()
    started = time.perf_counter()
    ends = [done.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"{system} child exited with {p.exitcode}")
    elapsed = max(ends) - started
    n = PROCS * calls * batch
    return ctx.add_rate(case, system, n, elapsed, note=f"{PROCS} procs x {calls} x {batch}")


def run(ctx):
    cases = [("append_4_procs_batched", ctx.pick(5, 100, 400), 1000),
             ("append_4_procs_single", ctx.pick(200, 5_000, 20_000), 1)]
    for case, calls, batch in cases:
        with ctx.workdir("kq") as d:
            path = os.path.join(d, "bench-0")
            kqlite.Log.open(path).close()
            _measure(ctx, case, KQ, "kqlite", path, calls, batch)
            with kqlite.Log.open(path) as log:
                expected = PROCS * calls * batch
                if log.end_offset != expected:
                    raise AssertionError(f"{log.end_offset} records, expected {expected}")
        with ctx.workdir("peer") as d:
            peers.Sqlite(d).close()
            label = "sqlite3 (WAL, " + ("txn per batch)" if batch > 1 else "commit per row)")
            # The single-record case runs sqlite3 for a tenth of the calls: it is slower.
            _measure(ctx, case, label, "sqlite", d, calls if batch > 1 else max(1, calls // 10),
                     batch)
