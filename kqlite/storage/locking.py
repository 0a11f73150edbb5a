"""Advisory file locks that make one log safe for many threads and processes.

Two lock files live in each partition directory (kqlite's own; Kafka ignores them):

``.kqlite-state``  exclusive lock held for the duration of one write (append, roll,
                   retention, truncation). The file's bytes are the shared state
                   (see state.py) so that a process learns what others wrote.
``.kqlite-users``  shared lock held by every open Log for its whole life, so that an
                   opener can tell whether it is alone (and may run crash recovery)
                   and a closer whether it is last (and may mark a clean shutdown).

Locks are ``flock`` locks: the kernel drops them when a process dies, so a writer
killed while holding one never wedges the log. A Log may keep the write lock between
its writes; a taker that finds it busy asks for it through the shared page
(lock_handoff.py explains the handoff). On POSIX they are taken with
``fcntl.flock`` directly (portalocker's flag validation costed a quarter of a
one-record append); elsewhere through portalocker.
"""

import time

import portalocker

from .lock_handoff import CAN_WAIT, NAP, count_turn, post_want, wait_for_holder, wake_takers
from .state import WANT_AT

from ..errors import LogLockedError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

__all__ = ["FileLock"]

if fcntl is not None:
    _EX, _SH, _NB = fcntl.LOCK_EX, fcntl.LOCK_SH, fcntl.LOCK_NB
    _BUSY = (BlockingIOError,)

    def _lock(fd, flags):
        fcntl.flock(fd, flags)

    def _unlock(fd):
        fcntl.flock(fd, fcntl.LOCK_UN)
else:
    _EX, _SH, _NB = portalocker.LOCK_EX, portalocker.LOCK_SH, portalocker.LOCK_NB
    _BUSY = (portalocker.AlreadyLocked, portalocker.LockException, BlockingIOError)

    def _lock(fd, flags):
        portalocker.lock(fd, flags)

    def _unlock(fd):
        portalocker.unlock(fd)


class FileLock:
    """flock on an already-open File (anything with ``fileno()``). With ``mapped`` (the
    shared page of state.py) a taker that has to wait posts its want there, so that a
    holder keeping the lock between writes lets it go."""

    __slots__ = ("file", "held", "mapped")

    def __init__(self, file, mapped=None):
        self.file = file
        self.held = None
        self.mapped = mapped

    def try_lock(self, exclusive=True):
        try:
            _lock(self.file.fileno(), (_EX if exclusive else _SH) | _NB)
        except _BUSY:
            return False
        self.held = "ex" if exclusive else "sh"
        if exclusive and self.mapped is not None:
            count_turn(self.mapped)
        return True

    def lock(self, exclusive=True, timeout=None, what="log"):
        """Take the lock, polling until ``timeout`` seconds (None waits forever)."""
        if self.try_lock(exclusive):
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        mapped = self.mapped
        if mapped is not None and CAN_WAIT:
            self._sleep_until_free(exclusive, deadline, timeout, what)
            return
        delay = 0.00005
        # A holder keeping the lock hands it over within a few ms once asked: retry
        # often enough to be there when it does.
        longest = 0.0005 if mapped is not None else 0.005
        while True:
            if mapped is not None:
                post_want(mapped)
            time.sleep(delay)
            if self.try_lock(exclusive):
                return
            if deadline is not None and time.monotonic() >= deadline:
                self._give_up(timeout, what)
            delay = min(delay * 2, longest)

    def _sleep_until_free(self, exclusive, deadline, timeout, what):
        # The want goes up before the try whose failure sends us to sleep, and the holder
        # unlocks before it reads the want and wakes us: a wake cannot fall between the
        # failed try and the sleep unnoticed (lock_handoff.py).
        mapped = self.mapped
        while True:
            post_want(mapped)
            if self.try_lock(exclusive):
                return
            nap = NAP
            if deadline is not None:
                nap = min(nap, deadline - time.monotonic())
                if nap <= 0:
                    self._give_up(timeout, what)
            wait_for_holder(mapped, nap)

    def _give_up(self, timeout, what):
        raise LogLockedError(
            f"{what} is locked by another writer; gave up after {timeout:.3g} s "
            f"({self.file.path})")

    def unlock(self):
        if self.held is not None:
            _unlock(self.file.fileno())
            self.held = None
            mapped = self.mapped
            if mapped is not None and mapped[WANT_AT]:
                wake_takers(mapped)     # somebody sleeps on the want word (lock_handoff.py)
