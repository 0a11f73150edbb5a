"""Work handed from the event loop to a thread, and what a cancellation leaves of it.

Theory of operation
-------------------
Every call of ``kqlite.aio`` that reads or writes a file, waits for a lock or fsyncs runs
in a thread; the event loop only hands the work over and is woken when it is done
(:func:`in_thread`). The loop itself never touches the disk (tests/aio/test_aio_group_commit.py
checks it through the file-system seam).

A thread cannot be stopped half way, and kqlite does not undo a write: once a write is
handed over, it runs to its end. So a write is the one kind of work a cancellation cannot
take back, and its waiter learns which way it went:

* the waiter gets the :class:`asyncio.CancelledError` it was cancelled with, as always,
  so that tasks, TaskGroups, ``asyncio.timeout`` and ``wait_for`` see the cancellation
  they asked for (a subclass would not do: Python 3.11's TaskGroup and timeout test the
  exception's type for identity);
* :func:`write_outcome` of that exception (or of the TimeoutError an ``asyncio.timeout``
  made of it, or of the CancelledError ``await task`` raises outside) tells which way it
  went: None when the cancellation came *before* the hand-off (the write was never given
  to a thread or to the producer: nothing was written); else the write's outcome, an
  :class:`asyncio.Future` whose result is what the write returned (for a send, its
  ``RecordMetadata``: the record is appended and durable as its topic's flush policy
  says) or whose exception is what it raised (then nothing of it was appended: a batch
  is appended whole or not at all).

Something opened in a thread (a Database, a consumer, a transaction) whose opener was
cancelled is closed once the thread has it (:func:`owned`): nobody else could.

:class:`Opening` is what the opening calls return: ``await`` it for the object, or use it
in ``async with``, which closes the object (commits or aborts a transaction) at the end.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import Executor
from types import TracebackType
from typing import Any, Awaitable, Callable, Generator, Generic, Optional, Protocol, TypeVar

__all__ = ["write_outcome", "Opening", "in_thread", "outcome_of", "owned"]

log = logging.getLogger("kqlite")

T = TypeVar("T")


_OUTCOME = "kqlite_write_outcome"     # the attribute a cancellation carries its write in


def write_outcome(exc: BaseException) -> Optional[asyncio.Future[Any]]:
    """The write a cancellation interrupted after its hand-off, or None when nothing was
    handed over (nothing was written). ``exc`` is the CancelledError (or what it became:
    ``asyncio.timeout``'s TimeoutError, the CancelledError of ``await task``); its causes
    and contexts are searched (``asyncio.wait_for``'s TimeoutError has it as its cause). ``await`` the answer for what the write returned, e.g. a
    send's RecordMetadata (it was appended), or the exception it raised (it was not)."""
    seen: set[int] = set()
    todo: list[Optional[BaseException]] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        outcome: Optional[asyncio.Future[Any]] = getattr(e, _OUTCOME, None)
        if outcome is not None:
            return outcome
        todo += [e.__cause__, e.__context__]
    return None


def in_thread(executor: Optional[Executor], fn: Callable[..., T],
              *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """Run ``fn(*args, **kwargs)`` in ``executor`` (None: the loop's default one); the
    future of its result. Cancelling the future before the thread started it means it
    never runs; after, its result is dropped (use :func:`outcome_of` for a write)."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # The outcome of a write nobody waits for any more: its error is not "never retrieved".
    if not fut.cancelled():
        fut.exception()


async def outcome_of(fut: asyncio.Future[T]) -> T:
    """Wait for ``fut``, a write already handed over: its result, its exception, or, when
    the waiting task is cancelled, the CancelledError, carrying ``fut`` (which goes on)
    for :func:`write_outcome`."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError as exc:
        if not fut.cancelled():   # cancelled itself, the write never started
            fut.add_done_callback(_retrieve)
            setattr(exc, _OUTCOME, fut)
        raise


async def owned(fut: asyncio.Future[T], release: Callable[[T], object]) -> T:
    """Wait for ``fut``, the opening of something only its opener holds; when the opener
    is cancelled, ``release`` it (in a thread) once the opening is done."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        loop = asyncio.get_running_loop()

        def release_later(done: asyncio.Future[T]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            closing = loop.run_in_executor(None, release, done.result())
            closing.add_done_callback(_log_failed_release)

        fut.add_done_callback(release_later)
        raise


def _log_failed_release(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("closing what a cancelled open had opened failed: %s", fut.exception())


class _Closable(Protocol):
    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> Optional[bool]: ...


C = TypeVar("C", bound=_Closable)


class Opening(Generic[C]):
    """An object being opened: ``x = await opening``, or ``async with opening as x:``,
    which ends ``x`` with the block (its own ``async with`` rule)."""

    def __init__(self, open: Callable[[], Awaitable[C]]) -> None:
        self._open = open
        self._opened: Optional[C] = None

    def __await__(self) -> Generator[Any, None, C]:
        return self._open().__await__()

    async def __aenter__(self) -> C:
        self._opened = await self._open()
        return self._opened

    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> Optional[bool]:
        opened, self._opened = self._opened, None
        assert opened is not None, "__aexit__ without __aenter__"
        return await opened.__aexit__(exc_type, exc, tb)
