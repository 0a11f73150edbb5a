"""One partition's log for asyncio: ``await log.append(...)`` and ``async for`` reads.

Theory of operation
-------------------
Every call of :class:`~kqlite.storage.log.Log` reads or writes files, so each one runs in
a thread of the loop's default executor and the loop waits for it. Appends from many
coroutines are appends from several threads: with ``fsync="always"`` they share
fdatasync rounds through the log's group commit (kqlite/storage/group_commit.py), as
threaded appenders do.

``async for record in log.read(offset)`` reads whole batches at a time in a thread
(``Log.fetch_records``, :data:`READ_RECORDS` records or more per call) and yields their
records on the loop, up to the end of the log as each call finds it; a ``Log.read``
iterator would read the files lazily, on the loop.

An append is a write: cancelled after the hand-off, :func:`~kqlite.aio.write_outcome`
of its CancelledError gives the first offset (the records are all appended) or the
append's error (none of them is).
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, AsyncIterator, Iterable, Optional, Union

from ..format.record import Record
from ..storage.isolation import Isolation
from ..storage.log import Log as SyncLog
from .handoff import Opening, in_thread, outcome_of, owned

__all__ = ["Log", "READ_RECORDS"]

READ_RECORDS = 500     # records one read call in a thread asks for, at least

Records = Union[bytes, None, Record, Iterable[Union[bytes, None, Record]]]


class Log:
    """A :class:`kqlite.Log` for asyncio: ``log = await kqlite.aio.Log.open(path,
    **options)`` (or ``async with``), or ``await db.log(topic, partition)``."""

    def __init__(self, log: SyncLog, owned: bool = True) -> None:
        self._log = log
        self._owned = owned        # False: the Database's log, closed with the Database

    @classmethod
    def open(cls, path: Union[str, os.PathLike[str]], config: Optional[dict[str, Any]] = None,
             **options: Any) -> Opening[Log]:
        """Open (creating if needed) the log in directory ``path``: ``kqlite.Log.open``'s
        arguments."""
        async def opening() -> Log:
            log = await owned(in_thread(None, SyncLog.open, path, config, **options),
                              SyncLog.close)
            return cls(log)
        return Opening(opening)

    @property
    def sync(self) -> SyncLog:
        """The threaded Log underneath (its calls touch files: not on the loop)."""
        return self._log

    async def append(self, records: Records, *, timestamp: Optional[int] = None,
                     codec: Optional[str] = None) -> int:
        """Append records (bytes values, None tombstones or Records); the first offset,
        once they are as durable as the log's flush policy says."""
        return await outcome_of(in_thread(None, self._log.append, records,
                                          timestamp=timestamp, codec=codec))

    async def read(self, offset: Optional[int] = None, max_records: Optional[int] = None, *,
                   isolation: Isolation = Isolation.HIGH_WATERMARK) -> AsyncIterator[Record]:
        """Records from ``offset`` (default: the log start) up to the isolation's limit, at
        most ``max_records``: ``async for record in log.read(offset)``."""
        # An async generator: its body runs on the first __anext__.
        if offset is None:
            offset = await in_thread(None, lambda: self._log.start_offset)
        left = -1 if max_records is None else max_records
        while left:
            want = READ_RECORDS if left < 0 else min(left, READ_RECORDS)
            records = await in_thread(None, self._log.fetch_records, offset, want,
                                      isolation=isolation)
            for record in records:
                yield record
                left -= 1
                if not left:
                    return
            if records.next_offset == offset:
                return
            offset = records.next_offset

    async def read_one(self, offset: int, *,
                       isolation: Isolation = Isolation.HIGH_WATERMARK) -> Optional[Record]:
        """The Record at ``offset``, or None (``Log.read_one``)."""
        return await in_thread(None, self._log.read_one, offset,
                               isolation=isolation)

    async def end_offset(self) -> int:
        """The offset the next append gets (other processes' appends included)."""
        return await in_thread(None, lambda: self._log.end_offset)

    async def start_offset(self) -> int:
        return await in_thread(None, lambda: self._log.start_offset)

    async def flush(self) -> None:
        """fsync what is appended (a write: see :func:`~kqlite.aio.write_outcome`)."""
        await outcome_of(in_thread(None, self._log.flush))

    async def close(self) -> None:
        """Close a log opened with :meth:`open`; a Database's log closes with it."""
        if self._owned:
            await outcome_of(in_thread(None, self._log.close))

    async def __aenter__(self) -> Log:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()
