"""Delayed operations (Kafka's purgatory): requests that wait for a partition to change.

Theory of operation: a request that cannot be answered yet -- a Produce with acks=-1
whose records the high watermark has not reached, a Fetch that has fewer than
``min_bytes`` to return -- becomes a :class:`DelayedOperation` with a timeout. It is
tried once at once; if it cannot complete, it is *watched* under the keys of the
partitions it depends on (``(topic, partition)``). Whatever changes a partition (an
append, a high-watermark advance, a deletion, an append by another process noticed by
the broker's check) calls :meth:`Purgatory.check_and_complete` with that partition's
key, which retries only the operations watching it. An operation completes the first
time ``try_complete()`` says so, or expires when its timeout passes; either way it is
removed from every key it watched, and the waiting coroutine learns which happened.
A caller that is no coroutine (the in-process broker's append, answering a thread that
waits on it) calls :meth:`~Purgatory.watch` instead: its callback runs within the check
that completes the operation, not one or two loop iterations later as a coroutine
resumes.

Everything here runs on the event loop thread, so a check and the completion it
triggers cannot interleave with another; storage is never touched (operations decide
from the state the partitions last observed).
"""

import asyncio

from ..protocol import ErrorCode

__all__ = ["DelayedOperation", "Purgatory", "DelayedProduce", "DelayedFetch"]


class DelayedOperation:
    """A request waiting for a condition; subclasses define :meth:`try_complete`."""

    def __init__(self, timeout_ms):
        self.timeout_ms = timeout_ms
        self.completed = False   # try_complete() said yes (before the timeout)
        self.expired = False     # the timeout passed first
        self._future = None
        self._callback = None    # watch()'s, with the keys and the timer to undo
        self._keys = ()
        self._timer = None

    def _waiting(self):
        return not self.done and (self._callback is not None or (
            self._future is not None and not self._future.done()))

    @property
    def done(self):
        return self.completed or self.expired

    def try_complete(self):
        """True when the operation can complete now (called on every watched change)."""
        raise NotImplementedError

    def on_expiration(self):
        """Called once when the timeout passes before completion."""


class Purgatory:
    """Delayed operations of one kind, watched by partition key."""

    def __init__(self, name):
        self.name = name
        self._watchers = {}      # key -> {operation: None}, insertion-ordered

    async def wait(self, op, keys):
        """Complete ``op`` now if it can, else watch it under ``keys`` until it completes
        (returns True) or its timeout passes (returns False)."""
        if op.try_complete():
            op.completed = True
            return True
        if op.timeout_ms <= 0:
            op.expired = True
            op.on_expiration()
            return False
        loop = asyncio.get_running_loop()
        op._future = loop.create_future()
        keys = list(dict.fromkeys(keys))
        for key in keys:
            self._watchers.setdefault(key, {})[op] = None
        timer = loop.call_later(op.timeout_ms / 1000.0, self._expire, op)
        try:
            return await op._future
        finally:
            timer.cancel()
            self._unwatch(op, keys)

    def watch(self, op, keys, on_done):
        """:meth:`wait` for a caller that is no coroutine: ``on_done(completed)`` is called
        on the loop (this method too runs there) at once when ``op`` can complete now,
        else from the check that completes it or from its timeout."""
        if op.try_complete():
            op.completed = True
            on_done(True)
            return
        if op.timeout_ms <= 0:
            op.expired = True
            op.on_expiration()
            on_done(False)
            return
        op._callback = on_done
        op._keys = list(dict.fromkeys(keys))
        for key in op._keys:
            self._watchers.setdefault(key, {})[op] = None
        op._timer = asyncio.get_running_loop().call_later(op.timeout_ms / 1000.0,
                                                          self._expire, op)

    def check_and_complete(self, key):
        """Retry the operations watching ``key``; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op._waiting():
                continue
            if op.try_complete():
                op.completed = True
                self._finish(op, True)
                completed += 1
        return completed

    def _finish(self, op, completed):
        if op._callback is None:
            op._future.set_result(completed)
            return
        on_done, op._callback = op._callback, None
        op._timer.cancel()
        self._unwatch(op, op._keys)
        on_done(completed)

    def expire_all(self):
        """Answer every waiting operation now as expired (the broker is stopping)."""
        for ops in list(self._watchers.values()):
            for op in list(ops):
                self._expire(op)

    def watched_keys(self):
        """The keys some operation is waiting on."""
        return list(self._watchers)

    def __len__(self):
        return len({op for ops in self._watchers.values() for op in ops})

    def _expire(self, op):
        if not op._waiting():
            return
        op.expired = True
        op.on_expiration()
        self._finish(op, False)

    def _unwatch(self, op, keys):
        for key in keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del self._watchers[key]


class DelayedProduce(DelayedOperation):
    """acks=-1: the records up to ``required_offset`` (exclusive) must be committed, that
    is below the partition's high watermark (Kafka's DelayedProduce). ``error_code`` is
    the answer once it is done: NONE, the partition's error, or REQUEST_TIMED_OUT."""

    def __init__(self, partition, required_offset, timeout_ms):
        super().__init__(timeout_ms)
        self.partition = partition
        self.required_offset = required_offset
        self.error_code = ErrorCode.NONE

    def try_complete(self):
        reached, code = self.partition.check_enough_replicas_reach_offset(self.required_offset)
        if reached:
            self.error_code = code
        return reached

    def on_expiration(self):
        self.error_code = ErrorCode.REQUEST_TIMED_OUT


class DelayedFetch(DelayedOperation):
    """A fetch with less than ``min_bytes`` to return: it completes as soon as any of its
    partitions differs from what its last read saw (new records became fetchable, the
    log start moved, the partition went away), and the fetch then reads again.

    ``seen`` is ``[(partition, isolation, position)]`` with ``position`` the
    ``partition.fetch_position(isolation)`` its read returned."""

    def __init__(self, seen, timeout_ms):
        super().__init__(timeout_ms)
        self.seen = seen

    def try_complete(self):
        return any(p.is_deleted or p.fetch_position(isolation) != position
                   for p, isolation, position in self.seen)
