"""Machine limits: page-cache write and read bandwidth, fdatasync rate, and the
sequential disk write rate with an fdatasync at the end. Every kqlite target that
is "a share of what the machine can do" divides by one of these."""

import os

from common import best_time, timed_loop

NAME = "machine"
DESCRIPTION = "page-cache write/read bandwidth, fdatasync rate, sequential write + fdatasync"

CHUNK = 1 << 20


def _write_file(path, total, chunk_data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = total
        while left > 0:
            left -= os.write(fd, chunk_data)
        return fd
    except BaseException:
        os.close(fd)
        raise


def run(ctx):
    total = ctx.pick(16 << 20, 256 << 20, 1 << 30)
    chunk_data = os.urandom(CHUNK)
    with ctx.workdir("files") as d:
        path = os.path.join(d, "data")

        def write(_):
            os.close(_write_file(path, total, chunk_data))

        def remove(_):
            os.unlink(path)

        # A fresh file each try, as a log segment is: write() of 1 MiB pieces, no fsync.
        t = best_time(ctx.repeats, write, teardown=remove)
        ctx.add_rate("page_cache_write", "machine", total, t, "B/s",
                     note=f"{total >> 20} MiB in 1 MiB write()s, fresh file")

        os.close(_write_file(path, total, chunk_data))
        fd = os.open(path, os.O_RDONLY)
        try:
            def read(_):
                pos = 0
                while True:
                    data = os.pread(fd, CHUNK, pos)
                    if not data:
                        break
                    pos += len(data)
            read(None)  # make sure it is all cached
            t = best_time(ctx.repeats, read, sync=False)
            ctx.add_rate("page_cache_read", "machine", total, t, "B/s",
                         note="1 MiB pread()s of a cached file")
        finally:
            os.close(fd)
            os.unlink(path)

        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            tiny = b"x" * 100

            def step():
                os.write(fd, tiny)
                os.fdatasync(fd)
            n, t = timed_loop(step, ctx.budget * 2)
            ctx.add_rate("fdatasync", "machine", n, t, "ops/s",
                         note="100-byte append + fdatasync, one thread")
        finally:
            os.close(fd)
            os.unlink(path)

        size = ctx.pick(8 << 20, 128 << 20, 512 << 20)

        def durable_write(_):
            fd = _write_file(path, size, chunk_data)
            os.fdatasync(fd)
            os.close(fd)
        t = best_time(ctx.repeats, durable_write, teardown=remove)
        ctx.add_rate("seq_write_fdatasync", "machine", size, t, "B/s",
                     note=f"{size >> 20} MiB written then one fdatasync")
