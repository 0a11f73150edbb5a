"""Reads of one data set of N records of 100 B written to every store: sequential
reads from the start into Python objects (kqlite Records, sqlite3 rows, LMDB
items, framed values), kqlite's zero-copy ``read_batches`` in bytes/s, and reads
of single records at random positions."""

import os
import random
import struct

import kqlite

import peers
from common import best_time, pread_file, settle, timed_loop, values

NAME = "read"
DESCRIPTION = "sequential read into records, zero-copy read_batches, random reads"

KQ = "kqlite"
_HEAD = struct.Struct(">qi")
_DELTA = struct.Struct(">i")

STORES = [
    ("sqlite3 (select id, value)", "sqlite3", lambda d: peers.Sqlite(d)),
    ("lmdb (cursor)", "lmdb", lambda d: peers.Lmdb(d, multi=True)),
    ("raw framed file (1 MiB reads)", "struct", lambda d: peers.Framed(d)),
]


def next_offset(data):
    """The offset after the last batch in ``data`` (what a consumer of raw batches does)."""
    pos, end, last = 0, len(data), None
    while pos < end:
        base, length = _HEAD.unpack_from(data, pos)
        last = base + _DELTA.unpack_from(data, pos + 23)[0]
        pos += 12 + length
    return last + 1


def run(ctx):
    batch = ctx.pick(2_000, 10_000)
    total = ctx.pick(20_000, 1_000_000, 4_000_000)
    rounds = max(1, total // batch)
    n = rounds * batch
    pool = values(100, batch)
    rng = random.Random(7)
    picks = [rng.randrange(n) for _ in range(ctx.pick(2_000, 20_000, 50_000))]

    with ctx.workdir("kq") as d:
        path = os.path.join(d, "bench-0")
        with kqlite.Log.open(path) as log:
            for _ in range(rounds):
                log.append(pool)
        settle()
        with kqlite.Log.open(path) as log:
            def seq(_):
                count = 0
                for _rec in log.read(0):
                    count += 1
                assert count == n, count
            seq(None)   # warm the page cache
            t = best_time(ctx.repeats, seq, sync=False)
            ctx.add_rate("sequential_100B", KQ, n, t, note="for rec in log.read(0)")

            end = log.end_offset

            def batches(_):
                offset, got = 0, 0
                read_batches = log.read_batches
                while offset < end:
                    data = read_batches(offset, 1 << 20)
                    got += len(data)
                    offset = next_offset(data)
                batches.bytes = got
            batches(None)
            t = best_time(ctx.repeats, batches, sync=False)
            ctx.add_rate("batches_zero_copy", KQ + " read_batches", batches.bytes, t, "B/s",
                         note="read_batches(offset, 1 MiB) to the end")
            segs = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".log")]

            def pread_files(_):
                for name in segs:
                    pread_file(name)
            t = best_time(ctx.repeats, pread_files, sync=False)
            ctx.add_rate("batches_zero_copy", "os.pread of the same segment files",
                         batches.bytes, t, "B/s", note="1 MiB preads: the page-cache bound")

            # A read decodes the whole batch holding its offset: with appends of 10,000
            # records a batch holds ~9,000, so this is time-boxed.
            it = iter(picks * 100)
            read = log.read
            count, t = timed_loop(lambda: next(read(next(it), max_records=1)), ctx.budget)
            ctx.add_rate("random_100B", KQ, count, t,
                         note="log.read(o, max_records=1); ~1 MiB batches")

    # The same records appended 100 at a time: batches of ~11 KiB.
    with ctx.workdir("kq-small") as d:
        path = os.path.join(d, "bench-0")
        small = pool[:100]
        with kqlite.Log.open(path) as log:
            for _ in range(n // len(small)):
                log.append(small)
            it = iter(picks * 100)
            read = log.read
            count, t = timed_loop(lambda: next(read(next(it), max_records=1)), ctx.budget)
            ctx.add_rate("random_100B", KQ + " (100-record batches)", count, t,
                         note="log.read(o, max_records=1); ~11 KiB batches")

    for system, module, factory in STORES:
        if ctx.peer(module, "sequential_100B", system) is None:
            continue
        with ctx.workdir("peer") as d:
            store = factory(d)
            try:
                if hasattr(store, "prepare"):
                    store.prepare(n)
                for _ in range(rounds):
                    store.append_batch(pool)
                if hasattr(store, "index"):
                    store.index()
                settle()
                store.scan()
                t = best_time(ctx.repeats, lambda _: store.scan(), sync=False)
                ctx.add_rate("sequential_100B", system, n, t)
                get = store.get

                def rand(_):
                    for o in picks:
                        get(o)
                t = best_time(ctx.repeats, rand, sync=False)
                label = system.split(" (")[0] + {"sqlite3": " (select by id)",
                                                   "lmdb": " (txn.get)"}.get(module, " (pread)")
                ctx.add_rate("random_100B", label, len(picks), t)
            finally:
                store.close()
