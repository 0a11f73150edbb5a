"""Append throughput: N records of 100 B and 1 KiB, in lists of 10,000 (batched) and
one record per call. kqlite and every peer get the same values, without fsync
(kqlite's default durability: in the page cache when the call returns)."""

import kqlite

import peers
from common import best_time, timed_loop, values

NAME = "append"
DESCRIPTION = "append N records of 100 B / 1 KiB: batched lists and one at a time"

KQ = "kqlite"


def _batched(ctx, case, size, total, batch):
    pool = values(size, batch)
    rounds = max(1, total // batch)
    n = rounds * batch

    def kq_setup():
        ctx_dir = ctx.workdir("kq")
        path = ctx_dir.__enter__()
        return ctx_dir, kqlite.Log.open(f"{path}/bench-0")

    def kq_run(state):
        append = state[1].append
        for _ in range(rounds):
            append(pool)

    def kq_teardown(state):
        state[1].close()
        state[0].__exit__(None, None, None)

    t = best_time(ctx.repeats, kq_run, kq_setup, kq_teardown)
    ctx.add_rate(case, KQ, n, t, note=f"{rounds} x append(list of {batch})")
    if size >= 1024:
        ctx.add_rate(case, KQ + " (payload bytes)", n * size, t, "B/s",
                     note="value bytes per second")
    for system, module, factory in peers.BATCHED:
        if ctx.peer(module, case, system) is None:
            continue

        def setup(factory=factory):
            d = ctx.workdir("peer")
            store = factory(d.__enter__())
            if hasattr(store, "prepare"):
                store.prepare(n)
            return d, store

        def run(state):
            append = state[1].append_batch
            for _ in range(rounds):
                append(pool)
            if hasattr(state[1], "finish"):
                state[1].finish()

        def teardown(state):
            state[1].close()
            state[0].__exit__(None, None, None)

        t = best_time(ctx.repeats, run, setup, teardown, limit=ctx.limit)
        ctx.add_rate(case, system, n, t, note=f"{rounds} x {batch}")


def _single(ctx, case, size, total):
    pool = values(size, 1000)
    cycle = (pool * (total // len(pool) + 1))[:total]

    def kq_setup():
        d = ctx.workdir("kq")
        return d, kqlite.Log.open(f"{d.__enter__()}/bench-0")

    def kq_run(state):
        append = state[1].append
        for v in cycle:
            append(v)

    def teardown(state):
        state[1].close()
        state[0].__exit__(None, None, None)

    t = best_time(ctx.repeats, kq_run, kq_setup, teardown, limit=ctx.limit)
    ctx.add_rate(case, KQ, total, t, note="append(value) per record")
    for system, module, factory in peers.SINGLE:
        if ctx.peer(module, case, system) is None:
            continue
        with ctx.workdir("peer") as d:
            store = factory(d)
            try:
                if hasattr(store, "prepare"):
                    store.prepare(total)
                it = iter(cycle)
                append = store.append_one
                n, t = timed_loop(lambda: append(next(it)), ctx.budget, total)
                if hasattr(store, "finish"):
                    store.finish()
            finally:
                store.close()
        ctx.add_rate(case, system, n, t, note=f"{n} records")


def run(ctx):
    batch = ctx.pick(2_000, 10_000)
    _batched(ctx, "batched_100B", 100, ctx.pick(20_000, 1_000_000, 4_000_000), batch)
    _batched(ctx, "batched_1KiB", 1024, ctx.pick(8_000, 256_000, 1_000_000), batch)
    _single(ctx, "single_100B", 100, ctx.pick(1_000, 20_000, 100_000))
    _single(ctx, "single_1KiB", 1024, ctx.pick(1_000, 20_000, 100_000))
