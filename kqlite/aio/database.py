"""A data dir for asyncio: ``db = await kqlite.aio.open(path)``.

Theory of operation
-------------------
:class:`Database` holds a threaded :class:`~kqlite.db.database.Database` and gives its
calls to threads: opening (which may recover a crashed transaction's partitions), topic
changes and closing run in the loop's default executor. What it makes follows its own
module's rule: the producer hands records to the threaded Producer (producer.py), a
consumer and a transaction each get a thread of their own (consumer.py,
transaction.py), a partition's log runs its calls in threads (log.py).
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Callable, Iterable, Optional, TypeVar, Union

from ..db.database import Database as SyncDatabase
from .consumer import Consumer
from .handoff import Opening, in_thread, outcome_of, owned
from .log import Log
from .producer import Producer
from .transaction import Transaction

__all__ = ["Database", "open"]

T = TypeVar("T")


class Database:
    """Topics and partitions in one data dir, for asyncio: ``kqlite.aio.open(path)``."""

    def __init__(self, db: SyncDatabase) -> None:
        self._db = db

    @property
    def sync(self) -> SyncDatabase:
        """The threaded Database underneath (its calls touch files: not on the loop)."""
        return self._db

    @property
    def path(self) -> str:
        path: str = self._db.path
        return path

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a thread: any other call of the threaded API, e.g.
        ``await db.run(db.sync.describe_topic, "t")``."""
        return await in_thread(None, fn, *args, **kwargs)

    async def create_topic(self, name: str, partitions: int = 1,
                           config: Optional[dict[str, Any]] = None, *,
                           exist_ok: bool = False) -> dict[str, Any]:
        """Create a topic (``Database.create_topic``); its definition."""
        return await outcome_of(in_thread(
            None, self._db.create_topic, name, partitions, config, exist_ok=exist_ok))

    async def delete_topic(self, name: str) -> None:
        await outcome_of(in_thread(None, self._db.delete_topic, name))

    async def list_topics(self, internal: bool = False) -> list[str]:
        return await in_thread(None, self._db.list_topics, internal)

    async def log(self, topic: str, partition: int) -> Log:
        """The log of one partition, open until the Database closes."""
        return Log(await in_thread(None, self._db.log, topic, partition), owned=False)

    def producer(self, **config: Any) -> Producer:
        """A producer (``db.producer``'s options: ``linger_ms``, ``batch_size``, ...)."""
        return Producer(self._db, **config)

    def consumer(self, topics: Union[str, Iterable[str], None] = None,
                 group: Optional[str] = None, **config: Any) -> Opening[Consumer]:
        """A consumer, made in its own thread: ``await db.consumer(...)`` or ``async with
        db.consumer(...) as consumer``."""
        return Opening(lambda: Consumer.create(self._db, topics, group, config))

    def transaction(self, transactional_id: Optional[str] = None,
                    **options: Any) -> Opening[Transaction]:
        """An embedded transaction: ``async with db.transaction() as tx``, committed when
        the block ends, aborted by an exception."""
        return Opening(lambda: Transaction.create(self._db, transactional_id, options))

    async def close(self) -> None:
        """Flush and close the producers, then close the data dir (in a thread)."""
        await in_thread(None, self._db.close)

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()


def open(path: Union[str, os.PathLike[str]], config: Optional[dict[str, Any]] = None,
         **options: Any) -> Opening[Database]:
    """Open (creating if needed) the data dir ``path`` in a thread: ``db = await
    kqlite.aio.open(path)`` or ``async with kqlite.aio.open(path) as db``. ``config`` and
    ``options`` are ``kqlite.open``'s."""
    async def opening() -> Database:
        return Database(await owned(in_thread(None, SyncDatabase, path, config, **options),
                                    SyncDatabase.close))
    return Opening(opening)
