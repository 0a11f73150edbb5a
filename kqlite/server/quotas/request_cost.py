"""What a request costs the broker: the time it took, for the request quota
(``request_percentage``), and the throttle it earned.

Theory of operation. Kafka charges a request the time its network and request-handler
threads spent on it: waiting in a purgatory or for a rebalance costs nothing. kqlite's
equivalent is the time its handler ran on the event loop plus the time its calls ran in
storage threads:

- :func:`timed` drives the handler's coroutine itself, adding up the wall time of each
  step it takes on the event loop (from one ``await`` that suspends to the next), so time
  spent suspended is never counted;
- while the handler runs, :data:`CURRENT` holds its :class:`RequestCost`; the storage
  executor (storage_io.py) adds the wall time of each call it runs for the request, in its
  thread (I/O waits included, as Kafka's request-handler threads block on the disk).

Steps of tasks a handler starts (``asyncio.gather`` of several partitions) are not seen
by :func:`timed`; their storage calls are, through :data:`CURRENT`, which tasks inherit.

A handler that must decide on throttling itself (Fetch, whose throttled answer is empty)
records the request's time so far and leaves its verdict in the cost
(``request_recorded``, ``throttle_ms``, ``throttled_by``), so that it is not recorded twice.
"""

import contextvars
import time

__all__ = ["RequestCost", "CURRENT", "timed", "charge_storage"]


class RequestCost:
    """Seconds of one request (on the event loop, in storage threads), and the throttle a
    handler decided on already."""
    __slots__ = ("loop_seconds", "storage_seconds", "request_recorded", "throttle_ms",
                 "throttled_by")

    def __init__(self):
        self.loop_seconds = 0.0
        self.storage_seconds = 0.0
        self.request_recorded = False
        self.throttle_ms = 0
        self.throttled_by = None

    @property
    def seconds(self):
        return self.loop_seconds + self.storage_seconds


CURRENT = contextvars.ContextVar("kqlite_request_cost", default=None)


def charge_storage(spent, seconds):
    """Add ``seconds`` of a storage call to ``spent`` (a RequestCost, or None)."""
    if spent is not None:
        spent.storage_seconds += seconds


class timed:
    """``await timed(coro, spent)``: run ``coro``, adding the time of its steps on the
    event loop to ``spent.loop_seconds``."""
    __slots__ = ("_coro", "_spent")

    def __init__(self, coro, spent):
        self._coro = coro
        self._spent = spent

    def __await__(self):
        coro, spent = self._coro, self._spent
        clock = time.perf_counter
        send, throw = coro.send, coro.throw
        value, error = None, None
        while True:
            started = clock()
            try:
                yielded = send(value) if error is None else throw(error)
            except StopIteration as stop:
                spent.loop_seconds += clock() - started
                return stop.value
            except BaseException:
                spent.loop_seconds += clock() - started
                raise
            spent.loop_seconds += clock() - started
            try:
                value, error = (yield yielded), None
            except BaseException as exc:      # cancellation, passed on to the coroutine
                value, error = None, exc
