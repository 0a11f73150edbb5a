"""Retention of a large log: ``enforce_retention()`` deleting almost every segment
of a log of many 1 MiB segments (retention.bytes), against deleting the same rows
from sqlite3 and against removing the same number of files with os.remove."""

import os

import kqlite

import peers
from common import best_time, values

NAME = "retention"
DESCRIPTION = "enforce_retention deleting many segments"

KQ = "kqlite"


def run(ctx):
    total_mib = ctx.pick(16, 256, 1024)
    keep = 2 << 20
    batch = 256
    pool = values(1024, batch)
    rounds = total_mib * (1 << 20) // (batch * 1024)
    rows = rounds * batch
    case = "delete_old_segments"

    def setup():
        d = ctx.workdir("kq")
        path = os.path.join(d.__enter__(), "bench-0")
        log = kqlite.Log.open(path, segment_bytes=1 << 20, retention_bytes=keep)
        for _ in range(rounds):
            log.append(pool)
        return d, log

    def enforce(state):
        state[1].deleted = state[1].enforce_retention()

    def teardown(state):
        deleted = len(state[1].deleted)
        state[1].close()
        state[0].__exit__(None, None, None)
        teardown.deleted = deleted

    t = best_time(ctx.repeats, enforce, setup, teardown, limit=ctx.limit)
    segments = teardown.deleted
    ctx.add(case, KQ, t, "s", n=segments, seconds=t,
            note=f"{segments} of {total_mib} MiB in 1 MiB segments deleted")

    with ctx.workdir("files") as d:
        chunk = os.urandom(1 << 20)

        def make_files():
            names = []
            for i in range(segments):
                name = os.path.join(d, f"{i:020d}.log")
                with open(name, "wb") as f:
                    f.write(chunk)
                names.append(name)
            return names

        def remove(names):
            for name in names:
                os.remove(name)
        t = best_time(ctx.repeats, remove, make_files)
        ctx.add(case, "os.remove of as many 1 MiB files", t, "s", n=segments, seconds=t)

    if ctx.peer("sqlite3", case, "sqlite3 (DELETE + wal_checkpoint)") is not None:
        cutoff = rows - keep // 1024

        def sq_setup():
            d = ctx.workdir("peer")
            store = peers.Sqlite(d.__enter__())
            for _ in range(rounds):
                store.append_batch(pool)
            return d, store

        def sq_teardown(state):
            state[1].close()
            state[0].__exit__(None, None, None)

        t = best_time(1, lambda s: s[1].delete_before(cutoff), sq_setup, sq_teardown)
        ctx.add(case, "sqlite3 (DELETE + wal_checkpoint)", t, "s", n=cutoff, seconds=t,
                note=f"{cutoff} of {rows} rows of 1 KiB")
