"""The group coordinator's asyncio shell around the group state machines.

Theory of operation
-------------------
Everything a group does is decided by :class:`~kqlite.server.group_state.GroupStateMachine`
(one per group id), which knows neither asyncio nor the clock. This shell

- gives every request a ticket, feeds it to its group's machine with ``now``
  (milliseconds of ``clock()``, ``time.monotonic`` by default) and hands each
  :class:`~kqlite.server.group_events.Reply` that comes back to the request
  waiting on that ticket: a JoinGroup or SyncGroup that must wait for the rest of
  the group awaits a future that a later request (or a timeout) completes;
- runs one timer task that sleeps until the earliest ``next_deadline()`` of all
  groups, or until a request moves a deadline earlier, and then calls
  ``expire(now)`` on every group that is due (:meth:`GroupCoordinator.tick`).

A group is created by a JoinGroup without a member id, as in Kafka; any other
request for an unknown group is answered by a fresh, unregistered machine (an
Empty group), which gives Kafka's answers: UNKNOWN_MEMBER_ID, or acceptance of a
commit with generation -1. After :meth:`stop` every group is unloaded: waiting
requests get NOT_COORDINATOR and later ones COORDINATOR_NOT_AVAILABLE.

Committed offsets are not kept here: they go to the data dir's
``__consumer_offsets`` (shared with the embedded API); the coordinator only
says whether a commit is allowed.
"""

import asyncio
import itertools
import logging
import time
import uuid

from ..protocol import ErrorCode
from .group_events import JoinResult, Leave
from .group_state import GroupStateMachine

__all__ = ["GroupCoordinator"]

log = logging.getLogger("kqlite.server")


def _new_member_id(client_id):
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class GroupCoordinator:
    """The groups of one broker. ``initial_delay`` is group.initial.rebalance.delay.ms in
    seconds; ``clock`` returns seconds on a monotonic clock (tests pass a fake one)."""

    def __init__(self, broker=None, initial_delay=0.3, *, clock=time.monotonic,
                 member_ids=_new_member_id):
        self.broker = broker
        self.initial_delay_ms = initial_delay * 1000.0
        self.groups = {}             # group id -> GroupStateMachine
        self._clock = clock
        self._member_ids = member_ids
        self._tickets = itertools.count()
        self._waiting = {}           # ticket -> future of a deferred JoinGroup/SyncGroup
        self._task = None
        self._wake = None            # set when a deadline moved before the timer's alarm
        self._alarm = None           # the deadline the timer task sleeps until
        self._stopped = False

    def now(self):
        return self._clock() * 1000.0

    # -- Lifecycle ----------------------------------------------------------------------------

    def start(self):
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._timer())

    async def stop(self):
        """Stop the timer and unload every group, answering the requests still waiting."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        now = self.now()
        for g in self.groups.values():
            self._deliver(g.unload(now))

    # -- Requests -----------------------------------------------------------------------------

    def group(self, group_id):
        """The group's state machine, or None if no member ever joined it."""
        return self.groups.get(group_id)

    async def join(self, group_id, join):
        """A :class:`~kqlite.server.group_events.Join`; returns a ``JoinResult``."""
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID)
        return await self._request(group_id, join, create=not join.member_id)

    async def sync(self, group_id, sync):
        """A :class:`~kqlite.server.group_events.Sync`; returns a ``SyncResult``."""
        return await self._request(group_id, sync)

    def heartbeat(self, group_id, heartbeat):
        """A :class:`~kqlite.server.group_events.Heartbeat`; returns an ErrorCode."""
        return self._answer(group_id, heartbeat)

    def leave(self, group_id, member_ids):
        """[(member id, ErrorCode)] for the members leaving."""
        return [(member_id, self._answer(group_id, Leave(member_id))) for member_id in member_ids]

    def check_commit(self, group_id, commit):
        """A :class:`~kqlite.server.group_events.Commit`; returns the ErrorCode for the
        OffsetCommit's partitions (NONE: store the offsets)."""
        return self._answer(group_id, commit)

    async def _request(self, group_id, event, create=False):
        ticket, result = self._submit(group_id, event, create)
        if result is not None:
            return result
        future = self._waiting[ticket] = asyncio.get_running_loop().create_future()
        return await future

    def _answer(self, group_id, event):
        _, result = self._submit(group_id, event, False)
        if result is None:
            raise RuntimeError(f"group {group_id!r}: {type(event).__name__} was not answered")
        return result

    def _submit(self, group_id, event, create):
        """Feed ``event`` to the group; (ticket, its result if already answered)."""
        g = self.groups.get(group_id)
        now = self.now()
        if g is None:
            g = GroupStateMachine(group_id, self.initial_delay_ms, self._member_ids)
            if self._stopped:
                g.unload(now)
            elif create:
                self.groups[group_id] = g
        ticket = next(self._tickets)
        own = None
        for reply in g.handle(event, now, ticket):
            if reply.ticket == ticket:
                own = reply.result
            else:
                self._deliver([reply])
        deadline = g.next_deadline()
        if deadline is not None and self._wake is not None \
                and (self._alarm is None or deadline < self._alarm):
            self._wake.set()
        return ticket, own

    def _deliver(self, replies):
        for reply in replies:
            future = self._waiting.pop(reply.ticket, None)
            # A handler cancelled while it waited (the broker is stopping) wants nothing.
            if future is not None and not future.done():
                future.set_result(reply.result)

    # -- Timeouts -----------------------------------------------------------------------------

    def tick(self):
        """Apply every timeout that is due now."""
        now = self.now()
        for g in list(self.groups.values()):
            deadline = g.next_deadline()
            if deadline is not None and deadline <= now:
                self._deliver(g.expire(now))

    def next_deadline(self):
        return min((d for g in self.groups.values() if (d := g.next_deadline()) is not None),
                   default=None)

    async def _timer(self):
        loop = asyncio.get_running_loop()
        while True:
            self._alarm = self.next_deadline()
            self._wake.clear()
            alarm = None
            if self._alarm is not None:
                alarm = loop.call_later(max(0.0, (self._alarm - self.now()) / 1000.0),
                                        self._wake.set)
            try:
                await self._wake.wait()
            finally:
                if alarm is not None:
                    alarm.cancel()
            try:
                self.tick()
            except Exception:
                log.exception("group coordinator: expiring timeouts failed")
                raise
