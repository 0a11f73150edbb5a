"""The broker's storage threads: every blocking storage call runs here, off the event loop.

Theory of operation: the event loop thread owns sockets, the codec, sendfile and all
broker state (partitions, purgatories); it never reads or writes a file, waits for a
file lock or fsyncs. A coroutine that needs the disk hands a plain function to
:meth:`StorageExecutor.run`, which runs it in one of ``num.io.threads`` threads (Kafka's
request-handler pool, default 8) and resumes the coroutine with the result. ``Log`` is
thread-safe (a thread lock plus flock), so several threads may work on one partition at
once; that is also what lets concurrent ``fsync=always`` appends share one fdatasync
(``Log._sync_to``: an append whose records an earlier fsync already covered returns at
once).

A coroutine may be cancelled while its function is still running (its connection
closed); the function then finishes in its thread regardless, and a result that holds
resources (a fetch's duplicated file descriptor) is handed to ``on_abandon`` so it is
released rather than leaked.

Running out of disk space or descriptors in these calls is reported through ``alarms``
(exhaustion.py): once per episode, not once per request. A call made for a request the
request quota measures is charged to it (quotas/request_cost.py).
"""

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from .exhaustion import ResourceAlarms
from .quotas import request_cost

__all__ = ["StorageExecutor", "DEFAULT_IO_THREADS"]

DEFAULT_IO_THREADS = 8   # Kafka's num.io.threads

log = logging.getLogger("kqlite.server")


class StorageExecutor:
    """A pool of threads for blocking storage calls (Kafka's ``num.io.threads``)."""

    def __init__(self, threads=DEFAULT_IO_THREADS):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"num.io.threads must be a positive integer, not {threads!r}")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kqlite-io")
        self.alarms = ResourceAlarms()

    async def run(self, fn, *args, on_abandon=None, **kwargs):
        """``fn(*args, **kwargs)`` in a storage thread; returns its result or raises its
        exception. ``on_abandon(result)`` releases the result of a call whose caller was
        cancelled before it finished."""
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **kwargs)
        cost = request_cost.CURRENT.get()
        if cost is not None:      # a request quota charges the request this call's time
            call = functools.partial(_charged, cost, call)
        future = loop.run_in_executor(self._pool, call)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if on_abandon is not None:
                future.add_done_callback(functools.partial(_abandoned, on_abandon))
            raise

    def shutdown(self, wait=True):
        """Stop taking work; with ``wait``, return once the running calls have finished."""
        self._pool.shutdown(wait=wait)


def _abandoned(release, future):
    if future.cancelled() or future.exception() is not None:
        return
    try:
        release(future.result())
    except Exception:
        log.exception("releasing the result of an abandoned storage call failed")


def _charged(cost, call):
    started = time.perf_counter()
    try:
        return call()
    finally:
        request_cost.charge_storage(cost, time.perf_counter() - started)
