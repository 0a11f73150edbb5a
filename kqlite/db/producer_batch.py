"""A producer's batch of one partition and the futures of its records.

Theory of operation
-------------------
Kafka's RecordAccumulator keeps, per partition, the batch records are added to (a
ProducerBatch); ``send`` returns a FutureRecordMetadata that holds only that batch's
shared result (ProduceRequestResult), the record's index in it and its timestamp. The
batch is appended as a whole, and its one outcome (a base offset, or an error)
answers every record in it. :class:`ProducerBatch` and :class:`RecordFuture` are
those two here, so that what ``send`` pays per record is three list appends and a
three-field object, and what the append pays per batch is one store of the outcome:

* the batch keeps its records as columns (values, timestamps; keys and headers only
  once a record has one), which Log.append takes as they are: a list of values with
  one timestamp when nothing else varies (the log's C-level path), one Record for a
  batch of one, Records otherwise;
* a RecordFuture is a ``concurrent.futures.Future`` (``result``, ``exception``,
  ``done``, ``add_done_callback``; ``concurrent.futures.wait`` and ``as_completed``
  work on it) whose state is its batch's: nothing is written per record when the
  batch completes. ``wait`` and ``as_completed`` read a Future's private fields
  (``_condition``, ``_state``, ``_waiters``) directly; a RecordFuture answers them
  from its batch, and a future that gets waiters or callbacks is remembered by the
  batch, which notifies exactly those when it completes (Future.set_result's order:
  state, waiters, notify_all, then callbacks outside the lock);
* ``cancel`` returns False, as Kafka's FutureRecordMetadata.cancel does: a record
  handed to the producer is sent.

Every batch of a producer shares the producer's condition (an RLock underneath:
``wait`` acquires each future's ``_condition`` in turn, the same one many times).
"""

import logging
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from itertools import repeat

from ..format.record import Record

__all__ = ["AppendedRecord", "ProducerBatch", "RecordFuture", "RecordMetadata"]

log = logging.getLogger("kqlite")

_new = tuple.__new__


class RecordMetadata(NamedTuple):
    """Where a sent record was appended: its topic, partition, offset and timestamp
    (milliseconds; the append time on a LogAppendTime topic)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ProducerBatch:
    """The records sent to one partition since its last batch was closed (Kafka's
    ProducerBatch), and, once appended, the outcome they share."""

    __slots__ = ("topic", "partition", "created", "values", "stamps", "keys", "headers",
                 "size", "done", "base", "error", "watched", "condition", "wait_for")

    def __init__(self, topic, partition, created, condition, wait_for):
        self.topic = topic
        self.partition = partition
        self.created = created          # time.monotonic() of the first record
        self.values = []
        self.stamps = []
        self.keys = None                # a column once a record has a key
        self.headers = None             # a column once a record has headers
        self.size = 0                   # estimated bytes, for batch_size
        self.done = False
        self.base = self.error = self.watched = None   # watched: futures with waiters
        self.condition = condition
        self.wait_for = wait_for        # wait_for(batch, timeout): the producer's delivery

    def add(self, value, key, headers, timestamp, size):
        """Add one record (the caller holds the condition); returns its index."""
        values = self.values
        index = len(values)
        values.append(value)
        self.stamps.append(timestamp)
        if key is not None or self.keys is not None:
            if self.keys is None:
                self.keys = [None] * index
            self.keys.append(key)
        if headers or self.headers is not None:
            if self.headers is None:
                self.headers = [()] * index
            self.headers.append(headers or ())
        self.size += size
        return index

    def append_to(self, log, codec):
        """Append the batch to ``log`` in the cheapest form that writes the same bytes as
        its Records would (tests/embedded/test_producer_paths.py compares them); returns
        the first offset."""
        values, stamps = self.values, self.stamps
        if self.keys is None and self.headers is None:
            if len(values) == 1:
                return log.append(values[0], timestamp=stamps[0], codec=codec)
            if stamps.count(stamps[0]) == len(stamps):
                return log.append(values, timestamp=stamps[0], codec=codec)
        keys = self.keys or repeat(None)
        headers = self.headers or repeat(())
        records = [_new(Record, (None, ts, k, v, h))
                   for v, k, h, ts in zip(values, keys, headers, stamps)]
        return log.append(records[0] if len(records) == 1 else records, codec=codec)

    def complete(self, base, error):
        """Record the outcome: every future of the batch resolves at once."""
        with self.condition:
            self.base = base
            self.error = error
            self.done = True
            watched = self.watched
            if watched is not None:
                for future in watched:
                    for waiter in future.__dict__.get("_waiters", ()):
                        if error is None:
                            waiter.add_result(future)
                        else:
                            waiter.add_exception(future)
            self.condition.notify_all()
        if watched is not None:
            for future in watched:
                for callback in future.__dict__.get("_done_callbacks", ()):
                    try:
                        callback(future)
                    except Exception:
                        log.exception("exception calling callback for %r", future)

    def watch(self, future):
        """``future`` now has waiters or callbacks (the caller holds the condition)."""
        if self.watched is None:
            self.watched = []
        if future not in self.watched:
            self.watched.append(future)


class AppendedRecord:
    """The outcome of one record appended alone (``send`` with linger_ms=0 when no other
    thread was delivering to its partition): what a RecordFuture reads of a delivered
    ProducerBatch, and nothing else."""

    __slots__ = ("topic", "partition", "base", "error", "condition", "wait_for")
    done = True
    watched = None

    def __init__(self, topic, partition, base, error, condition, wait_for):
        self.topic = topic
        self.partition = partition
        self.base = base
        self.error = error
        self.condition = condition
        self.wait_for = wait_for

    def watch(self, future):
        """Done before anyone could wait: concurrent.futures.wait and as_completed see
        FINISHED first, and nothing is left to notify."""


class RecordFuture(Future[RecordMetadata]):
    """The future of one sent record: its batch, its index in it and its timestamp
    (Kafka's FutureRecordMetadata). Its result is a RecordMetadata."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch, index, timestamp):
        # Future.__init__ is not called: the state lives in the batch (see above).
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    if not TYPE_CHECKING:     # (no attribute of a RecordFuture is Any to a type checker)
        def __getattr__(self, name):
            return self._future_field(name)

    def _future_field(self, name):
        # Only the Future fields that the functions of concurrent.futures read directly
        # come here (attributes found normally never do).
        batch = self._batch
        if name == "_condition":
            return batch.condition
        if name == "_state":
            return FINISHED if batch.done else PENDING
        if name == "_result":
            return self._metadata() if batch.done and batch.error is None else None
        if name == "_exception":
            return batch.error
        if name in ("_waiters", "_done_callbacks"):
            # First use, under _condition (wait, as_completed and add_done_callback hold it).
            made = []
            self.__dict__[name] = made
            batch.watch(self)
            return made
        raise AttributeError(name)

    def _metadata(self) -> RecordMetadata:
        batch = self._batch
        return RecordMetadata(batch.topic, batch.partition, batch.base + self._index,
                              self._timestamp)

    def done(self) -> bool:
        return bool(self._batch.done)

    def running(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def result(self, timeout: Optional[float] = None) -> RecordMetadata:
        """The RecordMetadata once the record is appended (and durable as the topic's flush
        policy says); raises what the append raised, or TimeoutError."""
        batch = self._batch
        if not batch.done:
            batch.wait_for(batch, timeout)
        if batch.error is not None:
            raise batch.error
        return self._metadata()

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        batch = self._batch
        if not batch.done:
            batch.wait_for(batch, timeout)
        return batch.error

    def add_done_callback(self, fn: "Callable[[Future[RecordMetadata]], object]") -> None:
        batch = self._batch
        with batch.condition:
            if not batch.done:
                self._done_callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            log.exception("exception calling callback for %r", self)

    def set_running_or_notify_cancel(self):
        raise RuntimeError("a RecordFuture is resolved by its producer")

    def set_result(self, result):
        raise RuntimeError("a RecordFuture is resolved by its producer")

    def set_exception(self, exception):
        raise RuntimeError("a RecordFuture is resolved by its producer")
