"""Group commit's rendezvous, the twin of csrc/rounds.c (contract in kqlite/_native).

One per Log. ``writing(delta)`` counts the threads between the start of an append
that will sync and the end of its write. ``enter(gather_ns)`` returns False once
a round that was running at the call has ended (the caller re-checks whether it
covered its records), or True when the caller is to lead a round now: before
that it waits, at most ``gather_ns`` nanoseconds, for the writers to finish and
for as many threads as the last round covered to join this one.
The leader runs the round and then calls ``leave()``, which wakes the waiters.
"""

import threading
import time


class Rounds:
    __slots__ = ("_ended", "_gather", "_leading", "_gathering", "_writers", "_waiting",
                 "_last_size", "_rounds_ended")

    def __init__(self):
        lock = threading.Lock()
        self._ended = threading.Condition(lock)
        self._gather = threading.Condition(lock)
        self._leading = False
        self._gathering = False
        self._writers = 0
        self._waiting = 0
        self._last_size = 1
        self._rounds_ended = 0

    def writing(self, delta):
        with self._ended:
            self._writers += delta
            if self._gathering and not self._writers:
                self._gather.notify()

    def _gathered(self):
        return not self._writers and self._waiting + 1 >= self._last_size

    def enter(self, gather_ns):
        with self._ended:
            if self._leading:
                seen = self._rounds_ended
                self._waiting += 1
                if self._gathering:
                    self._gather.notify()       # one more joiner: the leader may start
                try:
                    while self._rounds_ended == seen:
                        self._ended.wait()
                finally:
                    self._waiting -= 1
                return False
            self._leading = True
            if gather_ns > 0 and not self._gathered():
                deadline = time.monotonic() + gather_ns / 1e9
                self._gathering = True
                try:
                    while not self._gathered():
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._gather.wait(left)
                finally:
                    self._gathering = False
            self._last_size = self._waiting + 1
            return True

    def leave(self):
        with self._ended:
            self._leading = False
            self._rounds_ended += 1
            if self._waiting:
                self._ended.notify_all()
