"""The open logs of a Database: leases, and an LRU that bounds the descriptors they hold.

Theory of operation
-------------------
An open Log holds file descriptors: its two lock files, one per segment and, once
appended to, the active segment's two index files (five for a one-segment log; the
data dir's two lock files are opened once per process, whatever the number of logs). Thousands of partitions cannot all be open under the
usual limit of 1024 descriptors, so the manager keeps at most ``max_open`` logs open
and closes idle ones, least recently used first. A closed log reopens on its next
use with its data (closing is a clean shutdown, so reopening runs no recovery).

A log is only closed when nobody uses it. Users *lease* it::

    with manager.lease(("clicks", 0)) as log:
        log.append(...)

and a leased log is never evicted. (A caller that keeps a Log past its lease may find
it closed by an eviction: its reads then raise LogClosedError, never touch the closed
files; see kqlite/storage/log.py.) A *pinned* log (``Database.log`` hands logs to
callers that may keep them) is never evicted either; it stays open until the
manager closes. When more logs are leased or pinned than ``max_open``, the limit
is exceeded rather than waited for (a caller holding one lease while taking another
would deadlock), and idle logs are closed as soon as enough leases end.

Opening and closing run outside the manager's lock, so a slow open (crash
recovery) never delays leases of other logs; a lease of a log that is being opened
or closed waits for that to finish, so a partition never has two Log objects in
one manager.
"""

import contextlib
import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Iterator

from ..errors import ConfigError, LogClosedError

if TYPE_CHECKING:
    from ..storage.log import Log

__all__ = ["LogManager", "default_max_open_logs"]

log = logging.getLogger("kqlite")

_FDS_PER_LOG = 8          # a log's descriptors (5 with one segment), with room for more segments
_NO_LIMIT_FDS = 1 << 16   # what to plan for when the descriptor limit is unlimited
_WINDOWS_FDS = 512        # the C runtime's default number of open files


def default_max_open_logs():
    """The soft RLIMIT_NOFILE divided by 8 (at least 4): a one-segment log holds 5
    descriptors, so the logs take at most about five eighths of the limit, leaving room
    for sockets, sendfile regions and logs of a few segments. Logs with
    many segments hold one descriptor more per segment; lower ``max_open_logs`` for
    those, or raise the limit (``ulimit -n``)."""
    try:
        import resource
    except ImportError:
        soft = _WINDOWS_FDS
    else:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft <= 0:
            soft = _NO_LIMIT_FDS
    return max(4, soft // _FDS_PER_LOG)


class _Entry:
    __slots__ = ("log", "leases", "pinned", "dropped")

    def __init__(self):
        self.log = None       # None while the log is being opened
        self.leases = 1
        self.pinned = False
        self.dropped = False  # closed by drop() while leased


class LogManager:
    """Open logs by key, at most ``max_open`` of them idle-or-busy at once (see above).

    ``opener(key)`` opens the Log of ``key`` (raising for keys that do not exist).
    """

    def __init__(self, opener, max_open=None):
        self.max_open = default_max_open_logs() if max_open is None else max_open
        if not isinstance(self.max_open, int) or self.max_open < 1:
            raise ConfigError(f"max_open_logs must be a positive integer, not {max_open!r}")
        self._opener = opener
        self._cond = threading.Condition()
        self._open = OrderedDict()   # key -> _Entry, least recently used first
        self._closing = set()        # keys whose log is being closed
        self._closed = False

    # -- Leases -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(self, key) -> "Iterator[Log]":
        """``with manager.lease(key) as log``: the log, opened if needed, never closed by
        the manager until the block ends."""
        entry = self._acquire(key, True)
        try:
            yield entry.log
        finally:
            self._release(entry)

    @contextlib.contextmanager
    def lease_if_open(self, key):
        """Like :meth:`lease` but never opens: yields None when the log is not open."""
        entry = self._acquire(key, False)
        try:
            yield None if entry is None else entry.log
        finally:
            if entry is not None:
                self._release(entry)

    def pin(self, key) -> "Log":
        """The log of ``key``, kept open until the manager closes (or drops it)."""
        entry = self._acquire(key, True)
        entry.pinned = True
        self._release(entry)
        return entry.log

    def _acquire(self, key, open_missing):
        with self._cond:
            while True:
                if self._closed:
                    raise LogClosedError("the database is closed")
                entry = self._open.get(key)
                if entry is not None and entry.log is not None:
                    entry.leases += 1
                    self._open.move_to_end(key)
                    return entry
                if entry is None and key not in self._closing:
                    break
                self._cond.wait()
            if not open_missing:
                return None
            entry = self._open[key] = _Entry()
        try:
            opened = self._opener(key)
        except BaseException:
            with self._cond:
                del self._open[key]
                self._cond.notify_all()
            raise
        with self._cond:
            if self._closed or entry.dropped:
                self._open.pop(key, None)
                self._cond.notify_all()
                victims = [(key, opened)]
                gone = True
            else:
                entry.log = opened
                self._cond.notify_all()
                victims = self._take_victims()
                gone = False
        self._close_all(victims)
        if gone:
            raise LogClosedError(f"{key} was closed while it was being opened")
        return entry

    def _release(self, entry):
        with self._cond:
            entry.leases -= 1
            victims = self._take_victims() if entry.leases == 0 else []
        self._close_all(victims)

    def _take_victims(self):
        """Idle logs to close, least recently used first, to get back under max_open.
        Called with the lock held; the keys move to _closing."""
        excess = len(self._open) - self.max_open
        if excess <= 0:
            return []
        victims = []
        for key, entry in self._open.items():
            if excess <= 0:
                break
            if entry.leases == 0 and not entry.pinned and entry.log is not None:
                victims.append((key, entry.log))
                excess -= 1
        for key, _ in victims:
            del self._open[key]
            self._closing.add(key)
        return victims

    def _close_all(self, victims):
        """Close each log, even when one raises (an error is logged; anything else, such as
        KeyboardInterrupt, is raised after all are done)."""
        interrupted = None
        for key, lg in victims:
            try:
                lg.close()
            except Exception as exc:
                log.warning("closing the log %s failed: %s", lg.path, exc)
            except BaseException as exc:
                interrupted = interrupted or exc
            finally:
                with self._cond:
                    self._closing.discard(key)
                    self._cond.notify_all()
        if interrupted is not None:
            raise interrupted

    # -- Whole-manager operations -----------------------------------------------------------

    def open_keys(self):
        """The keys of the logs open now (least recently used first)."""
        with self._cond:
            return [k for k, e in self._open.items() if e.log is not None]

    def open_logs(self):
        """(key, log) of the logs open now: a snapshot, with no lease (a log may be closed
        at any moment after this returns, and its reads then raise LogClosedError; only
        read plain attributes of it)."""
        with self._cond:
            return [(k, e.log) for k, e in self._open.items() if e.log is not None]

    def __len__(self):
        with self._cond:
            return len(self._open)

    def drop(self, predicate):
        """Close the logs whose key satisfies ``predicate`` now, leased or not (their topic
        is being deleted); waits for such logs being opened or closed first."""
        with self._cond:
            while any(predicate(k) and (e.log is None) for k, e in self._open.items()) or \
                    any(predicate(k) for k in self._closing):
                self._cond.wait()
            victims = []
            for key in [k for k in self._open if predicate(k)]:
                entry = self._open.pop(key)
                entry.dropped = True
                victims.append((key, entry.log))
                self._closing.add(key)
        self._close_all(victims)

    def close(self):
        """Close every log, leased ones included; later leases raise LogClosedError."""
        with self._cond:
            self._closed = True
            while self._closing or any(e.log is None for e in self._open.values()):
                self._cond.wait()
            victims = list((k, e.log) for k, e in self._open.items())
            self._open.clear()
            self._closing.update(k for k, _ in victims)
        self._close_all(victims)
