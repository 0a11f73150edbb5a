"""The asyncio consumer: ``async for record in consumer`` and ``await consumer.commit()``.

Theory of operation
-------------------
A :class:`~kqlite.db.consumer.Consumer` is used by one thread at a time and its ``poll``
sleeps while it waits for records, so the asyncio consumer gives it a thread of its own
(a one-thread executor): its creation (joining the group), every poll, commit, seek and
its close run there, one after the other, and the loop only waits for them.

* Iteration polls for at most :data:`POLL_MS` at a time (so ``close`` is never stuck
  behind a long poll) until records come, and yields them one by one from a buffer; it
  polls again only once the buffer is empty, so the auto-commit inside ``poll`` commits
  positions whose records were all yielded, as Kafka's does for a poll's records. With
  ``consumer_timeout_ms`` it ends once that long passes without a record; otherwise it
  ends when the consumer is closed.
* A poll is never lost to a cancellation: its records, once the thread has them, go to
  the buffer whether or not anyone still waits (the consumer's positions are already
  past them), and the next iteration waits for the poll still running rather than
  starting another.
* ``commit()`` commits what was *yielded*: a partition with records still buffered is
  committed at its first buffered offset, the others at their position.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Iterable, Mapping, Optional, Union

from ..db.consumer import Consumer as SyncConsumer, ConsumerRecord
from ..db.database import Database as SyncDatabase
from ..format.offset_records import OffsetAndMetadata
from .handoff import in_thread, outcome_of, owned

__all__ = ["Consumer", "ConsumerRecord", "POLL_MS"]

POLL_MS = 100        # one poll's wait at most, while iterating

TopicPartition = tuple[str, int]


class Consumer:
    """Kafka's consumer for asyncio: ``consumer = await db.consumer(topics, group=...)``
    (the threaded Consumer's options), or ``async with db.consumer(...) as consumer``,
    which closes it (committing, with auto-commit) at the end."""

    def __init__(self, consumer: SyncConsumer, thread: ThreadPoolExecutor,
                 consumer_timeout_ms: Optional[float]) -> None:
        self._consumer = consumer
        self._thread = thread
        self._timeout = None if consumer_timeout_ms is None else consumer_timeout_ms / 1000.0
        self._buffer: deque[ConsumerRecord] = deque()
        self._polling: Optional[asyncio.Future[list[ConsumerRecord]]] = None
        self._closed = False

    @classmethod
    async def create(cls, db: SyncDatabase, topics: Union[str, Iterable[str], None],
                     group: Optional[str], config: dict[str, Any]) -> Consumer:
        thread = ThreadPoolExecutor(1, thread_name_prefix="kqlite-aio-consumer")
        try:
            consumer = await owned(in_thread(thread, SyncConsumer, db, topics, group=group,
                                             **config), SyncConsumer.close)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(consumer, thread, config.get("consumer_timeout_ms"))

    @property
    def sync(self) -> SyncConsumer:
        """The threaded Consumer underneath (its calls may block: not on the loop)."""
        return self._consumer

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await in_thread(self._thread, fn, *args)

    # -- Records ------------------------------------------------------------------------------

    def _take(self, polled: asyncio.Future[list[ConsumerRecord]]) -> None:
        """A finished poll: its records go to the buffer, awaited or not."""
        if self._polling is polled:
            self._polling = None
        if not polled.cancelled() and polled.exception() is None:
            self._buffer.extend(polled.result())

    async def _poll_into_buffer(self, timeout_ms: float, max_records: Optional[int]) -> None:
        polling = self._polling
        if polling is None:
            polling = self._polling = in_thread(self._thread, self._consumer.poll, timeout_ms,
                                                max_records)
            polling.add_done_callback(self._take)
        await asyncio.shield(polling)

    async def _settled(self) -> None:
        """Wait for a poll still running (a cancelled iteration's): its records are in the
        buffer afterwards, so commits, positions and seeks see them."""
        if self._polling is not None:
            await asyncio.shield(self._polling)

    async def poll(self, timeout_ms: float = 0,
                   max_records: Optional[int] = None) -> list[ConsumerRecord]:
        """Records (at most ``max_records``, by default ``max_poll_records``): the buffered
        ones first, else one poll's, waiting up to ``timeout_ms`` for them."""
        if not self._buffer:
            await self._poll_into_buffer(timeout_ms, max_records)
        count = len(self._buffer) if max_records is None else min(max_records,
                                                                   len(self._buffer))
        return [self._buffer.popleft() for _ in range(count)]

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        idle_since = time.monotonic()
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            wait_ms: float = POLL_MS
            if self._timeout is not None:
                left = self._timeout - (time.monotonic() - idle_since)
                if left <= 0:
                    raise StopAsyncIteration
                wait_ms = min(wait_ms, left * 1000.0)
            await self._poll_into_buffer(wait_ms, None)
        return self._buffer.popleft()

    # -- Offsets ------------------------------------------------------------------------------

    def _held_back(self) -> dict[TopicPartition, int]:
        """The first buffered offset of each partition with records not yielded yet."""
        held: dict[TopicPartition, int] = {}
        for record in self._buffer:
            held.setdefault((record.topic, record.partition), record.offset)
        return held

    def _commit_yielded(self, held: dict[TopicPartition, int]) -> None:
        """In the consumer's thread: commit the positions after what was yielded."""
        consumer = self._consumer
        if not held:
            consumer.commit()
            return
        consumer.commit({tp: held.get(tp, consumer.position(tp))
                         for tp in consumer.assignment()})

    async def commit(self, offsets: Optional[Mapping[TopicPartition,
                                                      Union[int, OffsetAndMetadata]]] = None
                     ) -> None:
        """Commit ``{(topic, partition): next offset}``, by default the positions after the
        records iteration has yielded (a write: see :func:`~kqlite.aio.write_outcome`)."""
        if offsets is not None:
            await outcome_of(in_thread(self._thread, self._consumer.commit, dict(offsets)))
        else:
            await self._settled()
            await outcome_of(in_thread(self._thread, self._commit_yielded, self._held_back()))

    async def committed(self, tp: TopicPartition) -> Optional[int]:
        """The group's committed offset of ``tp`` (None: none, or no group)."""
        committed: Optional[int] = await self._run(self._consumer.committed, tp)
        return committed

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record iteration yields for ``tp``."""
        await self._settled()
        held = self._held_back().get((tp[0], tp[1]))
        if held is not None:
            return held
        position: int = await self._run(self._consumer.position, tp)
        return position

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` next (its buffered records are dropped)."""
        await self._settled()
        self._drop(tp)
        await self._run(self._consumer.seek, tp, offset)

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._settled()
        if not tps:
            self._buffer.clear()
        for tp in tps:
            self._drop(tp)
        await self._run(self._consumer.seek_to_beginning, *tps)

    def _drop(self, tp: TopicPartition) -> None:
        key = tuple(tp)
        self._buffer = deque(r for r in self._buffer if (r.topic, r.partition) != key)

    async def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return set(await self._run(self._consumer.assignment))

    # -- Close --------------------------------------------------------------------------------

    async def close(self, commit: bool = True) -> None:
        """Leave the group, committing the yielded positions first when ``commit`` and
        auto-commit are on; iteration ends."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._settled()
            if commit and self._consumer.auto_commit:
                await outcome_of(in_thread(self._thread, self._commit_yielded,
                                           self._held_back()))
            await outcome_of(in_thread(self._thread, self._consumer.close, False))
        finally:
            self._thread.shutdown(wait=False)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()
