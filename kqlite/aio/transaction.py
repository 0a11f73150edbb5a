"""The asyncio embedded transaction: ``async with db.transaction() as tx``.

Theory of operation
-------------------
An embedded :class:`~kqlite.db.transaction.Transaction` is used by one thread (it keeps
the thread's open transaction in a thread-local, and its open may wait for another
process's lock on the transactional id), so the asyncio transaction gives it a thread of
its own: its open, every ``send`` (which writes once a partition's records reach
``batch_bytes``), ``commit_offsets``, ``commit`` and ``abort`` run there in order.

``async with`` commits when the block ends and aborts when an exception leaves it (a
cancellation included), as ``with`` does. Commit and abort are writes: a cancelled
``commit()`` goes on, and :func:`~kqlite.aio.write_outcome` of its CancelledError
says whether the transaction committed (its result, None) or not (the commit's error;
it was then aborted). A transaction whose opener was cancelled while the thread opened it is aborted
once open.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Iterable, Mapping, Optional, Union

from ..db.database import Database as SyncDatabase
from ..db.transaction import Transaction as SyncTransaction
from ..db.transaction_batches import SentRecord
from ..format.offset_records import OffsetAndMetadata
from .handoff import in_thread, outcome_of, owned

__all__ = ["Transaction", "SentRecord"]

Headers = Iterable[tuple[str, Optional[bytes]]]


def _abort_in(thread: ThreadPoolExecutor) -> Any:
    """``release`` of a transaction opened for a cancelled opener: abort it in its thread."""
    def release(tx: SyncTransaction) -> None:
        try:
            thread.submit(tx.__exit__, InterruptedError, None, None).result()
        finally:
            thread.shutdown(wait=False)
    return release


class Transaction:
    """One embedded transaction for asyncio (``db.transaction(transactional_id=None,
    **options)``, the threaded Transaction's options): ``await send(...)``, ``await
    commit_offsets(...)``, then ``await commit()`` or ``await abort()``, or ``async
    with``."""

    def __init__(self, tx: SyncTransaction, thread: ThreadPoolExecutor) -> None:
        self._tx = tx
        self._thread = thread

    @classmethod
    async def create(cls, db: SyncDatabase, transactional_id: Optional[str],
                     options: dict[str, Any]) -> Transaction:
        thread = ThreadPoolExecutor(1, thread_name_prefix="kqlite-aio-transaction")
        try:
            tx = await owned(in_thread(thread, SyncTransaction, db, transactional_id,
                                       **options), _abort_in(thread))
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(tx, thread)

    @property
    def transactional_id(self) -> str:
        tid: str = self._tx.transactional_id
        return tid

    @property
    def ended(self) -> bool:
        ended: bool = self._tx.ended
        return ended

    async def send(self, topic: str, value: Optional[bytes] = None,
                   key: Optional[bytes] = None, partition: Optional[int] = None,
                   headers: Optional[Headers] = None,
                   timestamp: Optional[int] = None) -> SentRecord:
        """Add one record; its SentRecord's ``result()`` is its metadata once the
        transaction has committed (or its partition's records reached ``batch_bytes``)."""
        return await outcome_of(in_thread(
            self._thread, self._tx.send, topic, value, key, partition, headers, timestamp))

    async def commit_offsets(self, group: str,
                             offsets: Mapping[tuple[str, int], Union[int, OffsetAndMetadata]],
                             metadata: str = "") -> None:
        """Commit ``offsets`` for ``group`` with the transaction (Kafka's
        sendOffsetsToTransaction)."""
        await in_thread(self._thread, self._tx.commit_offsets, group, offsets, metadata)

    async def _finish(self, fn: Any, *args: Any) -> None:
        try:
            await outcome_of(in_thread(self._thread, fn, *args))
        finally:
            if self._tx.ended:
                self._thread.shutdown(wait=False)

    async def commit(self) -> None:
        """Make the transaction durable and visible (kqlite/db/transaction.py says what is
        durable when); a failure aborts it and is raised."""
        await self._finish(self._tx.commit)

    async def abort(self) -> None:
        """Abort: nothing of the transaction becomes visible to read_committed readers."""
        await self._finish(self._tx.abort)

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        if not self._tx.ended:
            await self._finish(self._tx.__exit__, exc_type, exc, tb)
