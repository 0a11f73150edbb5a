"""Recovery after kill -9: a child process appends (no flush, so the recovery point
stays at 0) and is SIGKILLed; the parent times ``Log.open``, which validates the
CRC-32C of every batch after the recovery point and rebuilds the indexes. The
lower bound is reading the same bytes and computing their CRC-32C."""

import multiprocessing
import os
import signal
import time

import kqlite

from common import best_time, pread_file, settle, values

NAME = "recovery"
DESCRIPTION = "Log.open after the writer was killed with SIGKILL"

KQ = "kqlite"


def _writer(path, rounds, batch):
    pool = values(1024, batch)
    log = kqlite.Log.open(path)
    for _ in range(rounds):
        log.append(pool)
    os.kill(os.getpid(), signal.SIGKILL)


def run(ctx):
    size = ctx.pick(16 << 20, 256 << 20, 1 << 30)
    batch = 1000
    rounds = max(1, size // (batch * 1024))
    n = rounds * batch
    case = "open_after_kill_9"
    mp = multiprocessing.get_context("fork")

    with ctx.workdir("kq") as d:
        path = os.path.join(d, "bench-0")

        def crash():
            p = mp.Process(target=_writer, args=(path, rounds, batch))
            p.start()
            p.join()
            if p.exitcode != -signal.SIGKILL:
                raise RuntimeError(f"writer exited with {p.exitcode}, expected SIGKILL")
            settle()
            return path

        def reopen(p):
            started = time.perf_counter()
            log = kqlite.Log.open(p)
            reopen.seconds = time.perf_counter() - started
            reopen.log = log

        def check(_):
            log = reopen.log
            try:
                if log.end_offset != n:
                    raise AssertionError(f"recovered {log.end_offset} records, wrote {n}")
                reopen.bytes = log.size
            finally:
                log.close()
            # The next try starts from a crash again: forget the clean shutdown.
            for name in os.listdir(path):
                os.remove(os.path.join(path, name))

        t = best_time(ctx.repeats, reopen, crash, check, sync=False, limit=ctx.limit)
        ctx.add(case, KQ, t, "s", n=n, seconds=t,
                note=f"{reopen.bytes / (1 << 20):.0f} MiB validated, "
                     f"{reopen.bytes / t / 1e9:.2f} GB/s")

        # Lower bound: read and CRC the same number of bytes (page cache, C CRC).
        import kqlite._native as native
        data_path = os.path.join(d, "lower-bound")
        chunk = os.urandom(1 << 20)
        with open(data_path, "wb") as f:
            for _ in range(max(1, reopen.bytes >> 20)):
                f.write(chunk)

        def read_crc(_):
            pread_file(data_path, native.crc32c)
        t = best_time(ctx.repeats, read_crc, sync=False)
        ctx.add(case, "pread + crc32c of as many bytes", t, "s",
                seconds=t, note=f"lower bound (CRC in {native.IMPLEMENTATION})")
