"""Reads of one data set of N records of 100 B, appended in lists of 10,000 (batches of
about 1 MiB), written to every store: issue #16's read cases next to their peers.

* ``sequential_100B``: from the start into Python objects (kqlite Records, sqlite3
  rows, LMDB items, framed values); two more kqlite rows split the cost of a Record:
  the C part of decoding alone (no Python object) and the Python objects alone (value
  bytes and Records from what C found).
* ``batches_zero_copy``: kqlite's ``read_batches`` in bytes/s.
* ``random_100B``: one record at a random offset: ``Log.read_one`` and
  ``Log.read(o, max_records=1)`` (which walks record boundaries as read_one does)
  against sqlite3's select by id and LMDB's get (the general read, reads.read, which
  decodes the whole batch, is the time-boxed extra row).
* ``consumer_poll_100B``: the embedded consumer's poll loop, one group member.
"""

import os
import random
import struct
from itertools import repeat

import kqlite
from kqlite.storage import Isolation
from kqlite.storage.reads import read as general_read

import peers
from common import best_time, pread_file, settle, timed_loop, values

NAME = "read"
DESCRIPTION = "sequential read into records, zero-copy read_batches, random reads, poll loop"

KQ = "kqlite"
HIGH_WATERMARK = Isolation.HIGH_WATERMARK
_HEAD = struct.Struct(">qi")
_DELTA = struct.Struct(">i")
_BATCH = struct.Struct(">qiibIhiqqqhii")

STORES = [
    ("sqlite3 (select id, value)", "sqlite3", lambda d: peers.Sqlite(d)),
    ("lmdb (cursor)", "lmdb", lambda d: peers.Lmdb(d, multi=True)),
    ("raw framed file (1 MiB reads)", "struct", lambda d: peers.Framed(d)),
]


def _tries(ctx):
    """Tries of the sequential and random cases, kqlite's and the peers' alike: each takes
    a fraction of a second, and on a shared machine the best of more tries is steadier."""
    return ctx.repeats * 2


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
            t = best_time(_tries(ctx), seq, sync=False)
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

            read_one = log.read_one

            def rand(_):
                for o in picks:
                    read_one(o)
            rand(None)      # the first read of each batch marks it (read and checked whole)
            t = best_time(_tries(ctx), rand, sync=False)
            ctx.add_rate("random_100B", KQ, len(picks), t, note="log.read_one(o); ~1 MiB batches")
            # What a user writes to fetch one record: with a few max_records, read walks
            # record boundaries as read_one does (record_lookup.read_few) instead of
            # decoding the ~9,000 records of the batch (reads.read, time-boxed below).
            read = log.read

            def rand_read(_):
                for o in picks:
                    for _rec in read(o, max_records=1):
                        pass
            t = best_time(_tries(ctx), rand_read, sync=False)
            ctx.add_rate("random_100B", KQ + " read(o, 1)", len(picks), t,
                         note="for rec in log.read(o, max_records=1)")
            it = iter(picks * 100)
            count, t = timed_loop(
                lambda: next(general_read(log, next(it), 1, None, HIGH_WATERMARK)), ctx.budget)
            ctx.add_rate("random_100B", KQ + " general read(o, 1)", count, t,
                         note="reads.read: decodes the whole batch (time-boxed)")
            _record_cost(ctx, log, n)

    # The same records appended 100 at a time: batches of ~11 KiB.
    with ctx.workdir("kq-small") as d:
        path = os.path.join(d, "bench-0")
        small = pool[:100]
        with kqlite.Log.open(path) as log:
            for _ in range(n // len(small)):
                log.append(small)
            read_one = log.read_one

            def rand_small(_):
                for o in picks:
                    read_one(o)
            rand_small(None)
            t = best_time(_tries(ctx), rand_small, sync=False)
            ctx.add_rate("random_100B", KQ + " (100-record batches)", len(picks), t,
                         note="log.read_one(o); ~11 KiB batches")

    _consumer_poll(ctx, pool, rounds, n)

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
                t = best_time(_tries(ctx), lambda _: store.scan(), sync=False)
                ctx.add_rate("sequential_100B", system, n, t)
                get = store.get

                def rand(_):
                    for o in picks:
                        get(o)
                t = best_time(_tries(ctx), rand, sync=False)
                label = system.split(" (")[0] + {"sqlite3": " (select by id)",
                                                   "lmdb": " (txn.get)"}.get(module, " (pread)")
                ctx.add_rate("random_100B", label, len(picks), t)
            finally:
                store.close()


def _consumer_poll(ctx, pool, rounds, n):
    """One group member polls the whole topic, max_poll_records (500) at a time."""
    with ctx.workdir("db") as d:
        with kqlite.open(d, retention_check_interval_ms=0) as db:
            db.create_topic("t", partitions=1)
            log = db.log("t", 0)
            for _ in range(rounds):
                log.append(pool)
            settle()
            groups = iter(range(1 << 30))

            def poll(_):
                consumer = db.consumer("t", group=f"bench-{next(groups)}",
                                       enable_auto_commit=False)
                got = 0
                while got < n:
                    got += len(consumer.poll())
                consumer.close()
            poll(None)
            t = best_time(ctx.repeats, poll, sync=False)
            ctx.add_rate("consumer_poll_100B", KQ + " Consumer.poll", n, t,
                         note="one group member, max_poll_records=500")


def _record_cost(ctx, log, n):
    """Split the cost of a Record of the sequential read over the same batches: the C
    part of decoding (record positions and the values' struct format, no Python object)
    and the Python objects built from what C found (value bytes, Record tuples)."""
    import kqlite._native as native
    if native.c is None or native.IMPLEMENTATION != "c":
        return
    ffi, lib = native.c.ffi, native.c.lib
    batches, offset = [], 0
    while offset < n:
        data = log.read_batches(offset, 1 << 20)
        pos = 0
        while pos < len(data):
            f = _BATCH.unpack_from(data, pos)
            batches.append((data, pos + 61, pos + 12 + f[1], f[12], f[0], f[7]))
            pos += 12 + f[1]
        offset = batches[-1][4] + batches[-1][3]
    most = max(b[3] for b in batches)
    cols = ffi.new("int64_t[]", 7 * most + 1)
    hcols = ffi.new("int64_t[]", 4 * (most + 8))
    info = ffi.new("int64_t[6]")
    decode, fields_format = lib.kq_decode_records_at, lib.kq_fields_format
    fmt_cap = most * lib.KQ_FORMAT_FIELD_MAX
    fmt_buf = ffi.new("char[]", fmt_cap)

    def c_only(_):
        for data, start, end, count, base, ts in batches:
            decode(data, start, end, count, base, ts, cols, hcols, most + 8, info)
            fields_format(cols, count, 0, start, fmt_buf, fmt_cap)
    t = best_time(ctx.repeats, c_only, sync=False)
    ctx.add_rate("sequential_100B", KQ + ": C decode only", n, t,
                 note="the C part of decode_records per batch: no Python object")
    decoded = []
    for data, start, end, count, base, ts in batches:
        decode(data, start, end, count, base, ts, cols, hcols, most + 8, info)
        cap = count * lib.KQ_FORMAT_FIELD_MAX
        fmt = ffi.new("char[]", cap)
        length = lib.kq_fields_format(cols, count, 0, start, fmt, cap)
        decoded.append((data, start, ffi.buffer(fmt, length)[:], base, ts, count))
    new, record, compile_format = tuple.__new__, kqlite.Record, struct.Struct

    def objects(_):
        # What decode_records does in Python once C has found the fields: the value
        # bytes (one struct unpack), the Record tuples, iterated as a reader does.
        for data, start, fmt, base, ts, count in decoded:
            values = compile_format(fmt).unpack_from(data, start)
            for _rec in map(new, repeat(record, count), zip(
                    range(base, base + count), repeat(ts, count), repeat(None, count),
                    values, repeat((), count))):
                pass
    t = best_time(ctx.repeats, objects, sync=False)
    ctx.add_rate("sequential_100B", KQ + ": Python objects only", n, t,
                 note="value bytes + Record tuples from decoded positions, iterated")
