"""One round of fsyncs over several partitions' logs, issued in parallel.

Theory of operation
-------------------
A transaction's commit makes every partition it wrote durable before it logs its
decision (transaction.py). One after another those fsyncs would cost their sum; issued
at once from a few threads (an fsync holds no GIL) they cost about the slowest one, which
on most devices is what one fsync costs, since the device flushes its write cache once
for all of them. That is the *one round*: the first log is flushed by the calling
thread, the others by a small pool of threads the Database makes on first use and stops
when it closes.

Each log is flushed under a lease (log_manager.py), so no eviction closes it midway;
the first error (a failed fsync fails its log: LogFailedError) is raised once every
flush has ended.
"""

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["SyncPool"]

_THREADS = 4


class SyncPool:
    """Flushes logs of one Database (``database``) in parallel; see the module docstring."""

    def __init__(self, database):
        self.db = database
        self._lock = threading.Lock()
        self._pool = None

    def _executor(self):
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="kqlite-sync")
            return self._pool

    def sync(self, keys):
        """Make everything appended so far to the logs of ``keys`` ((topic, partition)s)
        durable, in one round."""
        keys = sorted(set(keys))
        if not keys:
            return
        with contextlib.ExitStack() as leases:
            logs = [leases.enter_context(self.db.leased_log(t, p)) for t, p in keys]
            others = [self._executor().submit(lg.flush) for lg in logs[1:]]
            first_error = None
            try:
                logs[0].flush()
            except BaseException as exc:  # noqa: BLE001 -- raised once the others ended
                first_error = exc
            for future in others:
                try:
                    future.result()
                except BaseException as exc:  # noqa: BLE001 -- the first one is raised
                    first_error = first_error or exc
            if first_error is not None:
                raise first_error

    def close(self):
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
