"""One round of fsyncs over several partitions' logs, issued in parallel.

Theory of operation
-------------------
A transaction's commit makes every partition it wrote durable, and its decision record
(transaction.py). One after another those fsyncs would cost their sum; issued at once
from a few threads (an fsync holds no GIL) they cost about the slowest one, which on most
devices is what one fsync costs, since the device flushes its write cache once for all of
them. That is the *one round*: the commit adds each log once its last append to it is
done (:meth:`Round.add`), then :meth:`Round.finish` leads a forced round of every log
(storage/group_commit.py ``Forced``), in the order of their keys, and runs their fsyncs
at once: the first in the calling thread, the others in a small pool of threads, which
the Database makes on first use and stops when it closes. Only the fsyncs themselves run
in the pool: the bookkeeping before and after them needs the GIL, and done in the pool
threads it made each of them wait for the others' (and for the appends of the calling
thread, when an fsync started as soon as its log was added), so that the fsyncs ran one
after another instead of at once.

Each log is flushed under a lease (log_manager.py), so no eviction closes it midway;
the first error (a failed fsync fails its log: LogFailedError) is raised once every
flush has ended.
"""

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

from ..storage.group_commit import Forced

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
        sync_round = self.begin()
        for key in keys:
            sync_round.add(key)
        sync_round.finish()

    def begin(self, lease=None):
        """A round of the logs :meth:`Round.add` names, which :meth:`Round.finish` makes
        durable. ``lease`` (default ``db.leased_log``) gives each log: a transaction
        passes the one it holds leased."""
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
        self._logs = {}         # (topic, partition) -> its Log, leased until the round ends
        self._done = False

    def add(self, key):
        """Make the log of ``key`` ((topic, partition)) part of the round: the last append
        to it is done."""
        if key not in self._logs:
            self._logs[key] = self._leases.enter_context(self._lease(*key))

    def finish(self, key=None):
        """Add ``key`` (if any), then fsync every log of the round at once; the first
        error is raised once every fsync ended."""
        self._done = True
        first_error = None
        try:
            if key is not None:
                self.add(key)
            forced = []
            try:
                for k in sorted(self._logs):    # one order for every thread (group_commit)
                    one = Forced(self._logs[k])
                    one.begin()
                    forced.append(one)
            except BaseException as exc:  # noqa: BLE001 -- raised once the others ended
                first_error = exc
                for one in forced:
                    one.cancel()
                forced = []
            errors = self._sync_all(forced)
            for one, error in zip(forced, errors):
                try:
                    one.end(error)
                except BaseException as exc:  # noqa: BLE001 -- the first one is raised
                    first_error = first_error or exc
        finally:
            self._leases.close()
        if first_error is not None:
            raise first_error

    def _sync_all(self, forced):
        """Run the fsyncs of the begun rounds ``forced`` at once; what each raised."""
        errors = [None] * len(forced)
        if not forced:
            return errors
        executor = self._pool._executor() if len(forced) > 1 else None
        futures = [(i, executor.submit(forced[i].sync_files)) for i in range(1, len(forced))]
        try:
            forced[0].sync_files()
        except BaseException as exc:  # noqa: BLE001 -- ended with its round
            errors[0] = exc
        for i, future in futures:
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001 -- ended with its round
                errors[i] = exc
        return errors

    def abandon(self):
        """After a failure elsewhere: let the logs go, syncing nothing (the failure is
        the one to report)."""
        if self._done:
            return
        self._done = True
        self._leases.close()
