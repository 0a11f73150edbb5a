"""The asyncio producer: ``await producer.send(...)`` over the threaded Producer.

Theory of operation
-------------------
kqlite's :class:`~kqlite.db.producer.Producer` already does what an asyncio producer
needs; this module only hands records to it and moves their results to the loop:

* ``send`` hands its record to the Producer on the loop, which costs what adding to a
  batch costs: the Producer's lock is never held across file I/O, the topic's
  definition is looked up in a thread first when it is not cached, and the sender
  thread is started (``Producer.start_sender``) in a thread by the first send, and
  stays until ``close``. The Producer's sender thread appends the batch after ``linger_ms`` (Kafka's linger; ``0`` here means
  "as soon as the sender thread sees it": the loop never appends itself), so the
  records of concurrent ``await send()`` calls share one append and, with
  ``fsync="always"``, one fdatasync; several partitions' appends share group-commit
  rounds as threaded appends do (kqlite/storage/group_commit.py).
* A record's future resolves in the sender thread once its batch is appended and as
  durable as the topic's flush policy makes an append; :class:`_Results` gathers the
  results of a burst and wakes the loop once for all of them.
* Cancellation: a record handed to the Producer is sent (Kafka's producer cannot take
  one back either). A ``send`` cancelled before the hand-off (while the topic's
  definition is read) sent nothing, and :func:`~kqlite.aio.write_outcome` of its
  CancelledError is None; cancelled after it, ``write_outcome`` gives the record's
  metadata (appended) or the append's error (not appended).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from types import TracebackType
from typing import Any, Callable, Iterable, Optional

from ..db.database import Database as SyncDatabase
from ..db.producer import DEFAULT_LINGER_MS, Producer as SyncProducer
from ..db.producer_batch import RecordFuture, RecordMetadata
from .handoff import in_thread, outcome_of

__all__ = ["Producer", "RecordMetadata"]

# linger_ms=0 asks for no lingering; the sender thread then delivers a batch as soon as it
# sees it (a linger of one nanosecond), while the loop goes on adding to the next one.
_NO_LINGER_MS = 1e-6

Headers = Iterable[tuple[str, Optional[bytes]]]


class _Results:
    """Record futures resolved in the sender thread, handed to asyncio futures of one loop:
    one ``call_soon_threadsafe`` per burst of results, not one per record."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future[RecordMetadata],
                                concurrent.futures.Future[RecordMetadata]]] = []

    def watch(self, record: RecordFuture) -> asyncio.Future[RecordMetadata]:
        fut: asyncio.Future[RecordMetadata] = self.loop.create_future()
        record.add_done_callback(lambda done: self._post(fut, done))
        return fut

    def _post(self, fut: asyncio.Future[RecordMetadata],
              record: concurrent.futures.Future[RecordMetadata]) -> None:
        with self._lock:
            self._ready.append((fut, record))
            first = len(self._ready) == 1
        if first:
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:
                pass               # the loop is closed: nobody waits for these any more

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for fut, record in ready:
            if fut.done():
                continue
            exception: Callable[[], Optional[BaseException]] = record.exception
            error = exception()
            if error is None:
                result: Callable[[], RecordMetadata] = record.result
                fut.set_result(result())
            else:
                fut.set_exception(error)


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
        make: Callable[..., SyncProducer] = SyncProducer    # not annotated yet
        self._producer = make(db, linger_ms=linger_ms, **config)
        self._results: Optional[_Results] = None
        self._sender_started = False
        # Sends waiting for a thread (the sender's start, a topic's definition), in order.
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
        if self._preparing or not self._sender_started or \
                self._db.topics.cached(topic) is None:
            # A send that must wait for a thread first holds back every send after it, so
            # that records keep the order of the calls (Kafka's per-partition order): the
            # lock serves its waiters first come, first served.
            self._preparing += 1
            try:
                async with self._prepare:
                    if not self._sender_started:
                        # Starting a thread waits for it to run: not on the loop, and once.
                        await in_thread(None, self._producer.start_sender)
                        self._sender_started = True
                    if self._db.topics.cached(topic) is None:
                        # Reads the definition (or creates it, with auto_create_topics).
                        await in_thread(None, self._db.partitions_for, topic)
                    handed = self.send_nowait(topic, value, key, partition, headers,
                                              timestamp)
            finally:
                self._preparing -= 1
            return await outcome_of(handed)
        return await outcome_of(self.send_nowait(topic, value, key, partition, headers,
                                                 timestamp))

    def send_nowait(self, topic: str, value: Optional[bytes] = None,
                    key: Optional[bytes] = None, partition: Optional[int] = None,
                    headers: Optional[Headers] = None,
                    timestamp: Optional[int] = None) -> asyncio.Future[RecordMetadata]:
        """Hand one record over now, without waiting: the future of its metadata.
        Cancelling the future does not take the record back. When the topic's definition
        is not cached, this reads it on the loop: ``send`` does not."""
        loop = asyncio.get_running_loop()
        results = self._results
        if results is None or results.loop is not loop:
            results = self._results = _Results(loop)
        send: Callable[..., RecordFuture] = self._producer.send
        record = send(topic, value, key, partition, headers, timestamp)
        return results.watch(record)

    async def flush(self) -> None:
        """Append everything sent so far (in a thread)."""
        await outcome_of(in_thread(None, self._producer.flush))

    async def close(self) -> None:
        """Flush, then refuse further sends."""
        await outcome_of(in_thread(None, self._producer.close))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()


