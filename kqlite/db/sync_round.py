"""One round of fsyncs over several partitions' logs, issued in parallel.

Theory of operation
-------------------
A transaction's commit makes every partition it wrote durable, and its decision record
(transaction.py). One after another those fsyncs would cost their sum; issued at once
from a few threads (an fsync holds no GIL) they cost about the slowest one, which on most
devices is what one fsync costs, since the device flushes its write cache once for all of
them. That is the *one round*: a small pool of threads, which the Database makes on first
use and stops when it closes, starts each log's fsync as soon as the commit's last append
to it is done (:meth:`SyncPool.begin`), so the fsyncs run while the commit appends to the
next partitions; the last log is flushed by the calling thread, which then waits for the
others.

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
        sync_round = self.begin()
        for key in keys[1:]:
            sync_round.add(key)
        sync_round.finish(keys[0])

    def begin(self, lease=None):
        """A round whose fsyncs start as logs are added (:meth:`Round.add`, once the last
        append to each is done) while the caller goes on with other work;
        :meth:`Round.finish` waits for them. ``lease`` (default ``db.leased_log``) gives
        each log: a transaction passes the one it holds leased."""
        return Round(self, lease)

    def close(self):
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class Round:
    """One round of :class:`SyncPool` (see :meth:`SyncPool.begin`)."""

    def __init__(self, pool, lease=None):
        self._pool = pool
        self._lease = lease or pool.db.leased_log
        self._leases = contextlib.ExitStack()
        self._futures = []
        self._done = False

    def add(self, key):
        """Start the fsync of the log of ``key`` ((topic, partition)) in a pool thread."""
        log_ = self._leases.enter_context(self._lease(*key))
        self._futures.append(self._pool._executor().submit(log_.flush))

    def finish(self, key=None):
        """fsync the log of ``key`` (if any) in this thread, then wait for the others;
        the first error is raised once every fsync ended."""
        self._done = True
        first_error = None
        try:
            if key is not None:
                with self._lease(*key) as log_:
                    log_.flush()
        except BaseException as exc:  # noqa: BLE001 -- raised once the others ended
            first_error = exc
        for future in self._futures:
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001 -- the first one is raised
                first_error = first_error or exc
        self._leases.close()
        if first_error is not None:
            raise first_error

    def abandon(self):
        """After a failure elsewhere: wait for the fsyncs started and let the logs go,
        raising nothing (the failure is the one to report)."""
        if self._done:
            return
        self._done = True
        for future in self._futures:
            future.exception()
        self._leases.close()
