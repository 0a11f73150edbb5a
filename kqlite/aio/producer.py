"""The asyncio producer: ``await producer.send(...)`` over the threaded Producer.

Theory of operation
-------------------
kqlite's :class:`~kqlite.db.producer.Producer` already does what an asyncio producer
needs; this module only hands records to it and moves their results to the loop:

* ``send``, on the loop, only puts its record and a future in a list (one uncontended
  lock, about a microsecond with the coroutine's own step): 1,000 concurrent sends cost
  the loop a few milliseconds, so another coroutine is not held up while they start.
  The first send of a producer starts its threads, and the first send to a topic whose
  definition is not cached reads it, in a thread; sends after such a send wait for it
  (an ``asyncio.Lock``, first come, first served) so that records keep call order.
* A hand-off thread of the producer takes the list a burst at a time and hands each
  record, in order, to the threaded Producer, whose lock is never held across file I/O
  (an error of ``Producer.send`` is that record's); every 64 records it lets the loop's
  thread have the interpreter, which would otherwise wait for it up to the switch
  interval (5 ms) when the loop wakes meanwhile. The Producer's sender thread appends
  the batch after ``linger_ms`` (Kafka's linger; ``0`` here means "as soon as the sender
  thread sees it"), so the records of concurrent ``await send()`` calls share one
  append and, with ``fsync="always"``, one fdatasync; several partitions' appends share
  group-commit rounds as threaded appends do (kqlite/storage/group_commit.py).
* A record's result arrives in the sender thread once its batch is appended and as
  durable as the topic's flush policy makes an append; :class:`_Handoff` gathers the
  results of a burst and wakes the loop once for all of them.
* Cancellation: a record in the list is handed over, and sent (Kafka's producer cannot
  take one back either). A ``send`` cancelled before the hand-off (while a thread starts
  or the topic's definition is read) sent nothing, and :func:`~kqlite.aio.write_outcome`
  of its CancelledError is None; cancelled after it, ``write_outcome`` gives the record's
  metadata (appended) or the append's error (not appended). The task's cancellation
  cancels the future ``send`` awaits; the record's result then goes to an outcome future
  made at the cancellation (``_Handoff.rescue``): no second future per send
  (``asyncio.shield``) for the common case that is never cancelled.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
import weakref
from asyncio import CancelledError, get_running_loop
from types import TracebackType
from typing import Any, Iterable, Optional, Union

from ..db.database import Database as SyncDatabase
from ..errors import LogClosedError
from ..db.producer import DEFAULT_LINGER_MS, Producer as SyncProducer
from ..db.producer_batch import RecordMetadata
from .handoff import _OUTCOME, in_thread, outcome_of

__all__ = ["Producer", "RecordMetadata"]

# linger_ms=0 asks for no lingering; the sender thread then delivers a batch as soon as it
# sees it (a linger of one nanosecond), while the loop goes on adding to the next one.
_NO_LINGER_MS = 1e-6

# The hand-off thread lets the loop's thread run every so many records of a burst: else
# the loop, woken meanwhile, waits for the interpreter up to its switch interval (5 ms).
_YIELD_EVERY = 64
_yield_interpreter = functools.partial(time.sleep, 0)

Headers = Iterable[tuple[str, Optional[bytes]]]


# One record handed over: send's arguments and the loop's future of its metadata.
_Entry = tuple[str, Any, Any, Optional[int], Optional[Headers], Optional[int],
               "asyncio.Future[RecordMetadata]"]
# What became of a record: its RecordFuture (resolved) or the error send raised.
_Done = Union[concurrent.futures.Future[RecordMetadata], BaseException]


class _Handoff:
    """The records of one loop on their way to the threaded Producer, and their results on
    their way back. The loop only appends to a list (``hand``); a hand-off thread sends
    the list's records to the Producer (``_send_all``), one burst per wake-up; the sender
    thread gathers results (``_post``) and wakes the loop once per burst (``_drain``).
    A future the loop cancelled gives its result to the outcome ``rescue`` made for it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, producer: SyncProducer,
                 thread: concurrent.futures.ThreadPoolExecutor) -> None:
        self.loop = loop
        self._producer = producer
        self._thread = thread
        self._lock = threading.Lock()
        self._incoming: list[_Entry] = []
        self._sending = False           # a _send_all is queued or running
        self._ready: list[tuple[asyncio.Future[RecordMetadata], _Done]] = []
        self._rescued: dict[asyncio.Future[RecordMetadata], asyncio.Future[RecordMetadata]] = {}
        # Results of cancelled futures nobody asked for yet (gone with their future).
        self._unclaimed: weakref.WeakKeyDictionary[asyncio.Future[RecordMetadata], _Done] = \
            weakref.WeakKeyDictionary()

    def hand(self, entry: _Entry) -> None:
        """On the loop: queue one record (in call order) for the hand-off thread."""
        with self._lock:
            self._incoming.append(entry)
            if self._sending:
                return
            self._sending = True
        try:
            self._thread.submit(self._send_all)
        except RuntimeError:
            # The producer is closed (its hand-off thread with it), as the Producer is.
            with self._lock:
                entries, self._incoming = self._incoming, []
                self._sending = False
            for entry in entries:
                self._post(entry[-1], LogClosedError("producer is closed"))

    def _send_all(self) -> None:
        # The hand-off thread: send each burst in order, until none is left.
        send = self._producer.send
        post = self._post
        while True:
            with self._lock:
                entries, self._incoming = self._incoming, []
                if not entries:
                    self._sending = False
                    return
            for n, (topic, value, key, partition, headers, timestamp, fut) in \
                    enumerate(entries, 1):
                if not n % _YIELD_EVERY:
                    _yield_interpreter()
                try:
                    record = send(topic, value, key, partition, headers, timestamp)
                except Exception as exc:        # this record's error, not the burst's
                    post(fut, exc)
                    continue
                record.add_done_callback(functools.partial(post, fut))

    def _post(self, fut: asyncio.Future[RecordMetadata], done: _Done) -> None:
        with self._lock:
            self._ready.append((fut, done))
            first = len(self._ready) == 1
        if first:
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:
                pass               # the loop is closed: nobody waits for these any more

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for fut, done in ready:
            if fut.done():
                if not fut.cancelled():
                    continue
                rescued = self._rescued.pop(fut, None)
                if rescued is None:
                    # Cancelled, and its sender not yet resumed to ask for the outcome.
                    self._unclaimed[fut] = done
                    continue
                fut = rescued
            _settle(fut, done)

    def rescue(self, fut: asyncio.Future[RecordMetadata]) -> asyncio.Future[RecordMetadata]:
        """On the loop: the outcome of a handed-over record whose future was cancelled.
        The task's cancellation cancels ``fut`` at once and resumes the task a turn later:
        its result may have been drained in between (then it waits in ``_unclaimed``)."""
        outcome: asyncio.Future[RecordMetadata] = self.loop.create_future()
        outcome.add_done_callback(_retrieve)
        done = self._unclaimed.pop(fut, None)
        if done is None:
            self._rescued[fut] = outcome
        else:
            _settle(outcome, done)
        return outcome


def _settle(fut: asyncio.Future[RecordMetadata], done: _Done) -> None:
    # On the loop: what became of the record (its RecordFuture is resolved) to ``fut``.
    if isinstance(done, BaseException):
        fut.set_exception(done)
        return
    error = done.exception()
    if error is None:
        fut.set_result(done.result())
    else:
        fut.set_exception(error)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # The outcome of a send nobody waits for any more: its error is not "never retrieved".
    if not fut.cancelled():
        fut.exception()


class Producer:
    """Kafka's producer for asyncio (``db.producer(**config)``, the threaded Producer's
    options). ``await send(...)`` answers the record's :class:`RecordMetadata` once it is
    appended and durable per its topic's flush policy. Use ``async with`` or ``await
    close()``."""

    def __init__(self, db: SyncDatabase, *, linger_ms: float = DEFAULT_LINGER_MS,
                 **config: Any) -> None:
        if isinstance(linger_ms, (int, float)) and linger_ms == 0:
            linger_ms = _NO_LINGER_MS
        self._db = db
        self._producer = SyncProducer(db, linger_ms=linger_ms, **config)
        self._cached = db.topics.cached
        self._handoff: Optional[_Handoff] = None
        self._thread: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # Sends waiting for a thread (the threads' start, a topic's definition), in order.
        self._prepare = asyncio.Lock()
        self._preparing = 0

    @property
    def sync(self) -> SyncProducer:
        """The threaded Producer underneath (its calls may block: not on the loop)."""
        return self._producer

    async def send(self, topic: str, value: Optional[bytes] = None, key: Optional[bytes] = None,
                   partition: Optional[int] = None, headers: Optional[Headers] = None,
                   timestamp: Optional[int] = None) -> RecordMetadata:
        """Send one record; returns its metadata once it is appended (and durable as its
        topic's flush policy says). On a cancellation, :func:`~kqlite.aio.write_outcome`
        of the CancelledError is None when nothing was sent, else what became of the
        record."""
        handoff = self._handoff
        if handoff is None or self._preparing or handoff.loop is not get_running_loop() \
                or self._cached(topic) is None:
            handoff = await self._prepared(topic)
        fut: asyncio.Future[RecordMetadata] = handoff.loop.create_future()
        handoff.hand((topic, value, key, partition, headers, timestamp, fut))
        try:
            return await fut
        except CancelledError as exc:
            # The task's cancellation cancelled fut, not the record: handed over, it is sent.
            setattr(exc, _OUTCOME, handoff.rescue(fut) if fut.cancelled() else fut)
            raise

    async def _prepared(self, topic: str) -> _Handoff:
        # A send that must wait for a thread first holds back every send after it, so that
        # records keep the order of the calls (Kafka's per-partition order): the lock serves
        # its waiters first come, first served. Cancelled here, nothing was handed over.
        self._preparing += 1
        try:
            async with self._prepare:
                loop = get_running_loop()
                if self._thread is None:
                    # Starting threads waits for them to run: not on the loop, and once.
                    self._thread = concurrent.futures.ThreadPoolExecutor(
                        1, thread_name_prefix="kqlite-aio-producer")
                    await in_thread(None, self._start_threads, self._thread)
                if self._handoff is None or self._handoff.loop is not loop:
                    self._handoff = _Handoff(loop, self._producer, self._thread)
                if self._cached(topic) is None:
                    # Reads the definition (or creates it, with auto_create_topics).
                    await in_thread(None, self._db.partitions_for, topic)
                return self._handoff
        finally:
            self._preparing -= 1

    def _start_threads(self, thread: concurrent.futures.ThreadPoolExecutor) -> None:
        self._producer.start_sender()
        thread.submit(int).result()

    def send_nowait(self, topic: str, value: Optional[bytes] = None,
                    key: Optional[bytes] = None, partition: Optional[int] = None,
                    headers: Optional[Headers] = None,
                    timestamp: Optional[int] = None) -> asyncio.Future[RecordMetadata]:
        """Hand one record over now, without waiting: the future of its metadata.
        Cancelling the future does not take the record back. The producer must have sent
        to ``topic`` already (its threads started, the topic's definition read: what a
        first ``await send()`` does), else this raises RuntimeError."""
        handoff = self._handoff
        if handoff is None or handoff.loop is not get_running_loop() \
                or self._cached(topic) is None:
            raise RuntimeError(f"send_nowait before the producer's first send to {topic!r}")
        fut: asyncio.Future[RecordMetadata] = handoff.loop.create_future()
        handoff.hand((topic, value, key, partition, headers, timestamp, fut))
        return fut

    async def flush(self) -> None:
        """Append everything sent so far (in a thread)."""
        await outcome_of(in_thread(None, self._flush))

    def _flush(self) -> None:
        if self._thread is not None:
            self._thread.submit(int).result()   # records handed over before are sent
        self._producer.flush()

    async def close(self) -> None:
        """Flush, then refuse further sends."""
        await outcome_of(in_thread(None, self._close))

    def _close(self) -> None:
        # Records still being handed over are sent before the Producer flushes.
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        self._producer.close()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()


