"""``queued.max.request.bytes``: the bytes of requests received and not yet answered.

Kafka's SocketServer takes a request's buffer from a memory pool of that size once it
has read the 4-byte length prefix, and while the pool cannot give it, it stops reading
from that socket ("mutes" it) until memory is released. Here a connection reserves the
frame's size after reading its length prefix and before reading its body, and gives it
back once the request is answered (or the connection ends), so the bytes that requests
in flight hold are bounded by the cap, whatever the number of connections. Each
connection handles one request at a time, so it holds at most one reservation.

The pool is strict (Kafka's is not: it lets one allocation overdraw a non-empty pool):
``in_use`` never exceeds ``capacity``, and the capacity must be at least
``socket.request.max.bytes`` so that every acceptable request fits, as Kafka requires.
Waiters are served in arrival order, so a large request is not starved by small ones.
Kafka's default is unlimited (-1); kqlite's is ``DEFAULT_QUEUED_MAX_REQUEST_BYTES`` or
the request size limit if that is larger.

What is outside the pool is small and bounded per connection: the 4-byte prefix and the
stream reader's buffer (64 KiB, paused at twice that), as Kafka's socket buffers are.
"""

import asyncio
import collections

__all__ = ["RequestMemory", "DEFAULT_QUEUED_MAX_REQUEST_BYTES"]

DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024


class RequestMemory:
    """A byte budget shared by every connection (event loop only)."""

    def __init__(self, capacity, max_request_size):
        if capacity is None:
            capacity = max(DEFAULT_QUEUED_MAX_REQUEST_BYTES, max_request_size)
        if not isinstance(capacity, int) or capacity < max_request_size:
            raise ValueError(f"queued.max.request.bytes ({capacity!r}) must be an integer "
                             f"of at least socket.request.max.bytes ({max_request_size})")
        self.capacity = capacity
        self.in_use = 0
        self.peak = 0            # the most ever in use: the bound a test checks
        self.waits = 0           # reservations that had to wait (a metric)
        self._waiters = collections.deque()    # (size, future), first come first served

    @property
    def waiting(self):
        """Connections waiting for memory now (not reading their socket)."""
        return len(self._waiters)

    async def acquire(self, size):
        """Reserve ``size`` bytes, waiting while they would take ``in_use`` over the
        capacity; returns ``size``. Cancelled while waiting, it reserves nothing."""
        if not self._waiters and self.in_use + size <= self.capacity:
            self._take(size)
            return size
        self.waits += 1
        future = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(size)          # granted just as we were cancelled
            else:
                self._waiters.remove(entry)
                self._grant()               # a large head leaving may let others in
            raise
        return size

    def release(self, size):
        if size:
            self.in_use -= size
            self._grant()

    def _take(self, size):
        self.in_use += size
        if self.in_use > self.peak:
            self.peak = self.in_use

    def _grant(self):
        while self._waiters:
            size, future = self._waiters[0]
            if self.in_use + size > self.capacity:
                return
            self._waiters.popleft()
            self._take(size)
            future.set_result(None)
