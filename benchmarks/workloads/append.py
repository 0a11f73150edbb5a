"""Append throughput: N records of 100 B and 1 KiB, in lists of 10,000 (batched) and
one record per call. kqlite and every peer get the same values, without fsync
(kqlite's default durability: in the page cache when the call returns).

``api_100B`` puts the Kafka-style API beside the log beneath it, same values, same run
(issue 28): ``Log.append`` of one record and of lists, ``Producer.send`` with its
defaults, ``linger_ms=0`` and ``linger_ms=5`` (each timed to its last record appended:
``flush()`` included), and reading them back with ``for record in consumer`` and
``Consumer.batches()`` (one group member, ``max_poll_records=500``).
"""

import kqlite

import peers
from common import best_time, settle, timed_loop, values

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


def _producer(ctx, case, pool, total, batch):
    """The api_100B rows: the log's two append calls, the producer and the consumer."""
    cycle = (pool * (total // len(pool) + 1))[:total]
    lists = [cycle[i:i + batch] for i in range(0, total, batch)]
    topics = iter(range(1 << 30))

    with ctx.workdir("api") as d, kqlite.open(d, retention_check_interval_ms=0) as db:
        def fresh():
            name = f"t{next(topics)}"
            db.create_topic(name, partitions=1)
            return name

        def appended(rows):
            def setup():
                return db.log(fresh(), 0)

            def run(log):
                append = log.append
                for row in rows:
                    append(row)
            return best_time(ctx.repeats, run, setup, limit=ctx.limit)

        ctx.add_rate(case, KQ + " Log.append(one record)", total, appended(cycle),
                     note="append(value) per record")
        ctx.add_rate(case, KQ + " Log.append(list)", total, appended(lists),
                     note=f"append(list of {batch})")
        for label, config in (("defaults", {}), ("linger_ms=0", {"linger_ms": 0}),
                              ("linger_ms=5", {"linger_ms": 5})):
            def setup(config=config):
                topic = fresh()
                db.log(topic, 0)        # opened, as the Log.append rows' logs are
                return topic, db.producer(**config)

            def run(state):
                topic, producer = state
                send = producer.send
                for value in cycle:
                    send(topic, value)
                producer.flush()

            def teardown(state):
                state[1].close()
            t = best_time(ctx.repeats, run, setup, teardown, limit=ctx.limit)
            ctx.add_rate(case, f"{KQ} Producer.send ({label})", total, t,
                         note="send(topic, value) per record, then flush()")

        topic = fresh()
        log = db.log(topic, 0)
        for row in lists:
            log.append(row)
        settle()
        groups = iter(range(1 << 30))

        def consumer():
            return db.consumer(topic, group=f"bench-{next(groups)}", enable_auto_commit=False)

        def iterate(c):
            got = 0
            for _record in c:
                got += 1
                if got == total:
                    break

        def lists_of(c):
            got = 0
            for records in c.batches():
                got += len(records)
                if got == total:
                    break
        readers = [("for record in consumer", iterate)]
        if hasattr(kqlite.Consumer, "batches"):
            readers.append(("Consumer.batches()", lists_of))
        for label, read in readers:
            t = best_time(ctx.repeats, read, consumer, lambda c: c.close(), sync=False)
            ctx.add_rate(case, f"{KQ} {label}", total, t,
                         note="one group member, max_poll_records=500")


def run(ctx):
    batch = ctx.pick(2_000, 10_000)
    _batched(ctx, "batched_100B", 100, ctx.pick(20_000, 1_000_000, 4_000_000), batch)
    _batched(ctx, "batched_1KiB", 1024, ctx.pick(8_000, 256_000, 1_000_000), batch)
    _single(ctx, "single_100B", 100, ctx.pick(1_000, 20_000, 100_000))
    _single(ctx, "single_1KiB", 1024, ctx.pick(1_000, 20_000, 100_000))
    _producer(ctx, "api_100B", values(100, 1000), ctx.pick(2_000, 100_000, 300_000), batch)
