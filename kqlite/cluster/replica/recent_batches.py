"""The batches a cluster leader appended last, kept in memory so that its followers'
parked fetches are answered without a storage read.

Theory of operation
-------------------
An ``acks=all`` append is answered once every follower of the ISR has fetched past it,
and each follower's next fetch is usually parked at the leader already, waiting for
exactly these batches. Reading them back from the segment is a storage-thread round
trip per woken fetch (a hand-off there and one back to the loop) on the critical path
of every ``acks=all`` append. So the leader keeps the bytes its appends wrote
(``AppendInfo.written``: base offsets and leader epoch as they lie on disk), a
contiguous run of whole batches, at most ``limit`` bytes, and a follower fetch that
starts at one of its batch boundaries is answered from it (ReplicatedPartition.read_recent).

What makes a run safe to serve:

- it is kept under the partition's role generation: a role change (a new leadership, a
  follower's truncation) starts a new generation, and a run of another one is never
  served;
- it is served only while its end is the log end the loop last observed: any write it
  does not hold (a transaction marker, a mirror's copy) moves the log end past it, and
  the next append that does not start at the run's end starts a new run;
- only whole batches are served, from a batch boundary up to that log end, as a storage
  read under the same limits would return them (``max_bytes``; at least one batch for
  the first partition of a Fetch with data, none that does not fit for the others).

Appends land from storage threads and the application's threads, reads happen on the
event loop: a thread lock guards the run (held for list operations only, never across a
write). Memory is bounded three ways: ``limit`` per led partition; a
:class:`MemoryBudget` shared by every partition of the broker (a partition whose append
does not fit keeps nothing, and its followers read storage); and, in steady state, what
the followers have not fetched yet: the leader drops what lies below its high
watermark (every ISR follower has it; a follower out of the ISR reads storage). So a
broker leading thousands of partitions with a slow follower still in their ISR holds at
most the budget, not a run per partition.
"""

import collections
import threading

__all__ = ["RecentBatches", "MemoryBudget", "DEFAULT_LIMIT", "DEFAULT_BUDGET"]

# Enough for the in-flight appends of a busy partition; a larger batch is not kept.
DEFAULT_LIMIT = 1 << 20
# What one broker keeps over all the partitions it leads.
DEFAULT_BUDGET = 64 << 20


class MemoryBudget:
    """Bytes the runs of one broker may hold together."""

    def __init__(self, limit=DEFAULT_BUDGET):
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, size):
        """Reserve ``size`` bytes; False when they do not fit."""
        with self._lock:
            if self.held + size > self.limit:
                return False
            self.held += size
            return True

    def give_back(self, size):
        with self._lock:
            self.held -= size


class RecentBatches:
    """The run of batches a leader appended last (see the module docstring); ``budget``,
    the broker's MemoryBudget (default: one of ``limit`` bytes for this run alone)."""

    def __init__(self, limit=DEFAULT_LIMIT, budget=None):
        self.limit = limit
        self._budget = budget if budget is not None else MemoryBudget(limit)
        self._lock = threading.Lock()
        self._generation = None
        self._batches = collections.deque()     # (base offset, bytes), in offset order
        self._end = -1                          # the offset after the run's last batch
        self._size = 0
        self._closed = False

    def add(self, generation, base, end, data):
        """An append of ``generation`` wrote ``data`` at offsets [``base``, ``end``)."""
        size = len(data)
        with self._lock:
            if self._closed:        # an append landing after its partition was dropped
                return
            if generation != self._generation or base != self._end or size > self.limit:
                self._drop_all()
                self._generation = generation
            while self._batches and self._size + size > self.limit:
                self._drop_first()
            if size > self.limit or not self._budget.take(size):
                # Not kept: the run ends here, and the next append starts a new one.
                self._drop_all()
                self._end = -1
                return
            self._batches.append((base, data))
            self._size += size
            self._end = end

    def discard_below(self, offset):
        """Forget the batches that end at or below ``offset``."""
        with self._lock:
            batches = self._batches
            while len(batches) > 1 and batches[1][0] <= offset:
                self._drop_first()
            if batches and self._end <= offset:
                self._drop_first()

    def clear(self):
        with self._lock:
            self._drop_all()
            self._generation, self._end = None, -1

    def close(self):
        """Give everything back to the budget, for good: the partition is gone."""
        with self._lock:
            self._closed = True
            self._drop_all()
            self._generation, self._end = None, -1

    def _drop_first(self):
        size = len(self._batches.popleft()[1])
        self._size -= size
        self._budget.give_back(size)

    def _drop_all(self):
        self._batches.clear()
        self._budget.give_back(self._size)
        self._size = 0

    def read(self, generation, offset, end, max_bytes, min_one):
        """The whole batches from ``offset`` (a batch boundary) up to ``end`` (the log end
        the caller observed) as bytes, within ``max_bytes`` (the first batch whatever its
        size when ``min_one``); None when the run cannot answer that read."""
        with self._lock:
            if generation != self._generation or end != self._end:
                return None
            batches = self._batches
            at = len(batches) - 1
            while at >= 0 and batches[at][0] > offset:
                at -= 1
            if at < 0 or batches[at][0] != offset:
                return None
            chunks, total = [], 0
            for i in range(at, len(batches)):
                data = batches[i][1]
                if total + len(data) > max_bytes and (total or not min_one):
                    break
                chunks.append(data)
                total += len(data)
        return b"".join(chunks)

    @property
    def size(self):
        """Bytes held now."""
        return self._size
