"""Durable appends: every append returns only once its record is on disk.
One thread with an fsync per append, and 8 threads sharing one log, where kqlite's
group commit lets one fdatasync cover the records of every waiting thread.

The broker case: ``kqlite serve`` with a topic whose ``flush.messages=1`` makes every
produce request's append return after an fdatasync, at a fixed offered rate of
20,000 msgs/s of 100 B to one partition from several confluent-kafka producers
(``acks=1``; each producer is one connection, so its requests reach the broker one
at a time, as in Kafka, and the producers' requests overlap). p50 and p99 of
scheduled send to acknowledgement, next to the same broker and topic without
fsync: the point is that the durable latency stays bounded.
"""

import os
import threading
import time

import kqlite

import peers
from common import run_threads, settle, timed_loop, values
from producing import produce_paced

NAME = "durable"
DESCRIPTION = ("fsync per append (1 thread), group commit (8 threads), broker produce with "
               "flush.messages=1")

KQ = "kqlite"
THREADS = 8
OFFERED_RATE = 20_000       # msgs/s in the broker case (the figure)
PRODUCERS = 4
VALUE_SIZE = 100
BROKER_FSYNC = "kqlite serve, flush.messages=1 (fsync per append)"
BROKER_NO_FSYNC = "kqlite serve, no fsync"


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

    settle()
    started = time.perf_counter()
    stop[0] = started + seconds + 0.05
    run_threads(THREADS, body)
    elapsed = time.perf_counter() - started
    return ctx.add_rate(case, system, sum(counts), elapsed,
                        note=f"{THREADS} threads, {sum(counts)} records")


def run(ctx):
    run_embedded(ctx)
    run_broker(ctx)


def run_embedded(ctx):
    pool = values(100, 1000)
    seconds = ctx.budget * 2

    with ctx.workdir("kq") as d:
        with kqlite.Log.open(os.path.join(d, "bench-0"), fsync="always") as log:
            it = iter(pool * 1000)
            # Each durable case starts with no dirty pages: the kernel's writeback of
            # an earlier workload's data slows every fdatasync it overlaps, and would
            # land on whichever system happens to run first.
            settle()
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
                settle()
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


def run_broker(ctx):
    """The broker case (see the module docstring)."""
    ck = ctx.peer("confluent_kafka", "broker_produce_20k_p99", BROKER_FSYNC)
    if ck is None:
        return
    from confluent_kafka.admin import AdminClient, NewTopic
    from workloads.cluster import _Serve, _free_port, _nearest_rank
    seconds = ctx.pick(0.5, 8.0, 20.0)
    value = os.urandom(VALUE_SIZE)
    with ctx.workdir("broker") as d:
        broker = _Serve(os.path.join(d, "data"), _free_port()).start().wait_listening()
        try:
            admin = AdminClient({"bootstrap.servers": broker.address})
            for system, config in ((BROKER_NO_FSYNC, {}),
                                   (BROKER_FSYNC, {"flush.messages": "1"})):
                topic = f"durable-{len(config)}-{time.monotonic_ns()}"
                for f in admin.create_topics([NewTopic(topic, 1, 1, config=config)],
                                             request_timeout=60).values():
                    f.result(timeout=90)
                ctx.log(f"  {system}: {OFFERED_RATE} msgs/s from {PRODUCERS} producers "
                        f"for {seconds:.0f} s")
                latencies, offered_for = _offer(ck, broker.address, topic, value, seconds)
                note = (f"offered {OFFERED_RATE} msgs/s for {offered_for:.1f} s from "
                        f"{PRODUCERS} producers, acks=1, one partition")
                for q, case in ((0.50, "broker_produce_20k_p50"),
                                (0.99, "broker_produce_20k_p99")):
                    ctx.add(case, system, _nearest_rank(latencies, q), "s", n=len(latencies),
                            seconds=offered_for, note=note)
        finally:
            broker.stop()


def _offer(ck, bootstrap, topic, value, seconds):
    """Offer OFFERED_RATE msgs/s, round robin over PRODUCERS producers, for ``seconds``;
    returns the sorted latencies (scheduled send to delivery report) and the time taken."""
    conf = {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1,
            "compression.type": "none", "queue.buffering.max.messages": 1 << 20}
    producers = [ck.Producer(conf) for _ in range(PRODUCERS)]
    for p in producers:              # connections and metadata before the clock starts
        p.produce(topic, value)
        p.flush(60)
    return produce_paced(producers, topic, value, OFFERED_RATE, seconds, system=topic)
