"""The group coordinator's asyncio shell around the group state machines.

Theory of operation
-------------------
Everything a group does is decided by a
:class:`~kqlite.server.coordinator.group.state_machine.GroupStateMachine` (one per group
id), which knows neither asyncio nor the clock. This shell

- gives every request a ticket, feeds it to its group's machine with ``now``
  (milliseconds of ``clock()``, ``time.monotonic`` by default) and hands each
  :class:`~kqlite.server.coordinator.group.events.Reply` that comes back to the request
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

The groups live in ``__consumer_offsets`` through a coordinator runtime
(kqlite/server/coordinator/runtime.py), which says which broker coordinates a group and
whether this one does now. Every request first asks it (:meth:`owner_error`):
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS answer the request at once, as Kafka's
validateGroupStatus does (a heartbeat during a load is accepted blindly). The coordinator
is the runtime's ``CoordinatorState``: when this broker starts to lead an offsets
partition the runtime hands it the partition's records (:meth:`load`: its groups are
restored, :meth:`restore_groups`, and its committed offsets kept if the runtime says so;
the records of groups another partition holds are left out), and takes them back when it
stops leading it (:meth:`unload`: waiting JoinGroup and SyncGroup requests get
NOT_COORDINATOR).

Group metadata (Kafka's GroupMetadata records in ``__consumer_offsets``) is written when
a machine queues it, in order, by one writer task through the runtime; the replies
produced together with a record are delivered once it is written, so a member that has
its assignment finds it again after a restart (or on the next coordinator). A write that
fails turns the JoinGroup and SyncGroup answers it carried into Kafka's error for it
(append_errors.py). :meth:`start` loads what the runtime holds from the start (the single
broker: every partition of its data dir); until that is loaded, JoinGroup, SyncGroup,
DescribeGroups and ListGroups wait, a heartbeat is accepted blindly and other requests
get COORDINATOR_LOAD_IN_PROGRESS, as in Kafka.

Committed offsets are :attr:`offsets` (offsets.py); the state machines only say whether
a commit is allowed.
"""

import asyncio
import collections
import dataclasses
import itertools
import logging
import time
import uuid

from ....protocol import ErrorCode
from ..runtime import CoordinatorState
from .append_errors import DATA_DIR_GROUP_STORE_ERRORS, GROUP_STORE_ERRORS
from .events import Delete, JoinResult, SyncResult
from .offsets import GroupOffsets
from .records import group_record, read_partition
from .state_machine import GroupState, GroupStateMachine

__all__ = ["GroupCoordinator"]

log = logging.getLogger("kqlite.server")

_STOP_WRITE_GRACE = 10.0   # seconds a stopping broker waits for queued group records


def _new_member_id(prefix):
    return f"{prefix or 'member'}-{uuid.uuid4()}"


class GroupCoordinator(CoordinatorState):
    """The groups of one broker. ``initial_delay`` is group.initial.rebalance.delay.ms in
    seconds; ``clock`` returns seconds on a monotonic clock (tests pass a fake one).

    ``runtime`` is the CoordinatorRuntime of ``__consumer_offsets`` that places and stores
    the groups and their offsets (:attr:`offsets`); without one every group is
    coordinated here and nothing is stored."""

    def __init__(self, runtime=None, initial_delay=0.3, *, clock=time.monotonic,
                 member_ids=_new_member_id, wall_clock=time.time):
        self.runtime = runtime
        self.initial_delay_ms = initial_delay * 1000.0
        self.groups = {}             # group id -> GroupStateMachine
        self._clock = clock
        self._wall_clock = wall_clock
        self._member_ids = member_ids
        self.offsets = None
        self._store_errors = GROUP_STORE_ERRORS
        if runtime is not None:
            self.offsets = GroupOffsets(runtime)
            if runtime.state_log.shared_database is not None:
                self._store_errors = DATA_DIR_GROUP_STORE_ERRORS
            runtime.attach(self)
        self._tickets = itertools.count()
        self._waiting = {}           # ticket -> future of a deferred JoinGroup/SyncGroup
        self._task = None
        self._wake = None            # set when a deadline moved before the timer's alarm
        self._alarm = None           # the deadline the timer task sleeps until
        self._stopped = False
        self._loader = None          # the task loading the groups (None: nothing to load)
        self._writes = collections.deque()  # (group id, records, replies) to store, in order
        self._writer = None

    def now(self):
        return self._clock() * 1000.0

    # -- Lifecycle ----------------------------------------------------------------------------

    def start(self):
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._timer())
        if self.runtime is not None:
            self._loader = loop.create_task(self._load())

    @property
    def loading(self):
        return self._loader is not None and not self._loader.done()

    async def loaded(self):
        """Return once the stored groups are loaded."""
        if self.loading:
            await asyncio.wait({self._loader})

    async def _load(self):
        held = len(self.groups)
        try:
            await self.runtime.load_at_start()
        except Exception:
            log.exception("group coordinator: loading the groups from %s failed; every group "
                          "starts empty", self.runtime.topic.name)
            return
        if len(self.groups) > held:
            log.info("group coordinator: loaded %d group(s)", len(self.groups) - held)

    # -- The runtime's partitions (CoordinatorState) -------------------------------------

    def replay(self, batches):
        return read_partition(batches, with_offsets=self.offsets.loads_records)

    def load(self, index, replayed):
        commits, groups = replayed

        # A group placed in another partition is a stray of kqlite's legacy placement
        # (relocation.py): its own partition answers for it, with its records moved there.
        def own(group_id):
            return self.runtime.partition_for(group_id) == index
        loaded = self.offsets.load(index, commits, own)
        restored = self.restore_groups({g: v for g, v in groups.items() if own(g)})
        log.debug("group coordinator: %s-%d: %d offset commit(s) loaded, %d group(s) "
                  "restored", self.runtime.topic.name, index, loaded, restored)

    def unload(self, index):
        def belongs(group_id):
            return self.runtime.partition_for(group_id) == index
        self.unload_groups(belongs)
        self.offsets.unload(index, belongs)

    def restore_groups(self, stored):
        """Take over the groups of ``stored`` ({group id: GroupMetadataValue}) as their last
        records left them (groups already held are kept); returns how many were added."""
        now = self.now()
        added = 0
        for group_id, value in stored.items():
            if group_id and group_id not in self.groups:
                self.groups[group_id] = GroupStateMachine.restore(
                    group_id, self.initial_delay_ms, self._member_ids, value, now)
                added += 1
        if added:
            self._rearm()
        return added

    def unload_groups(self, belongs):
        """Drop every group whose id ``belongs(group_id)``: its waiting JoinGroup and
        SyncGroup requests get NOT_COORDINATOR (this broker stopped coordinating it)."""
        now = self.now()
        for group_id, g in list(self.groups.items()):
            if belongs(group_id):
                del self.groups[group_id]
                self._deliver(g.unload(now))

    def owner_error(self, group_id):
        """NONE when this broker coordinates ``group_id`` now, else the code to answer a
        request for it with (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        if self.runtime is None or self._stopped:
            return ErrorCode.NONE
        return self.runtime.owner_error(group_id)

    async def stop(self):
        """Stop the timer, store what is queued and unload every group, answering the
        requests still waiting."""
        self._stopped = True
        if self.runtime is not None:
            await self.runtime.stop()
        for task in (self._loader, self._task):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer}, timeout=_STOP_WRITE_GRACE)
            if not self._writer.done():
                log.warning("group coordinator: %d group metadata record(s) not written "
                            "before stopping (storage is not answering)", len(self._writes))
                self._writer.cancel()
                while self._writes:
                    self._deliver(self._writes.popleft()[2])
        now = self.now()
        for g in self.groups.values():
            self._deliver(g.unload(now))

    # -- Requests -----------------------------------------------------------------------------

    def group(self, group_id):
        """The group's state machine, or None if no member ever joined it."""
        return self.groups.get(group_id)

    async def join(self, group_id, join):
        """A :class:`~kqlite.server.coordinator.group.events.Join`; returns a ``JoinResult``."""
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID)
        code = self.owner_error(group_id)
        if code:
            return JoinResult(code)
        await self.loaded()
        return await self._request(group_id, join, create=not join.member_id)

    async def sync(self, group_id, sync):
        """A :class:`~kqlite.server.coordinator.group.events.Sync`; returns a ``SyncResult``."""
        if not group_id:
            return SyncResult(ErrorCode.INVALID_GROUP_ID)
        code = self.owner_error(group_id)
        if code:
            return SyncResult(code)
        await self.loaded()
        return await self._request(group_id, sync)

    def heartbeat(self, group_id, heartbeat):
        """A :class:`~kqlite.server.coordinator.group.events.Heartbeat`; returns an ErrorCode."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        code = self.owner_error(group_id)
        if code and code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return code
        if self.loading or code:
            return ErrorCode.NONE  # Kafka answers blindly: the member may well be known
        return self._answer(group_id, heartbeat)

    def leave(self, group_id, leaves):
        """``leaves``: :class:`~kqlite.server.coordinator.group.events.Leave` values. Returns (the
        request's ErrorCode, [(leave, ErrorCode)]); with a request error no member left."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        code = self.owner_error(group_id)
        if code:
            return code, []
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        g = self.groups.get(group_id)
        if g is not None and g.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, [(leave, self._answer(group_id, leave)) for leave in leaves]

    def check_commit(self, group_id, commit):
        """A :class:`~kqlite.server.coordinator.group.events.Commit`; returns the ErrorCode for the
        OffsetCommit's partitions (NONE: store the offsets)."""
        code = self.owner_error(group_id)
        if code:
            return code
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return self._answer(group_id, commit)

    async def commit_transactional(self, group_id, commit, producer, offsets, timestamp, *,
                                   verify=None, too_large=frozenset()):
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): ``offsets`` ({(topic,
        partition): OffsetAndMetadata}) of ``producer`` ((producer id, epoch)), written as
        one transactional batch once the group's status, the transaction (``verify``: an
        async function of the offsets partition's index returning the coordinator's error
        code, or None to skip KIP-890's verification) and ``commit`` (a
        :class:`~kqlite.server.coordinator.group.events.TxnCommit`: KIP-447's member checks)
        pass; the partitions of ``too_large`` (metadata over offset.metadata.max.bytes) are
        answered OFFSET_METADATA_TOO_LARGE and not written. Returns ``{(topic, partition):
        code}``; the offsets stay pending until the transaction's marker (offsets.py)."""
        def every(code):
            return {tp: code for tp in offsets}
        if not group_id:
            return every(ErrorCode.INVALID_GROUP_ID)
        code = self.owner_error(group_id)
        if not code and self.loading:
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if code:
            return every(code)
        code, guard = await self.offsets.verify_transactional(group_id, producer, verify)
        if not code:
            code = self._answer(group_id, commit)
        if code:
            return every(code)
        answer = {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets if tp in too_large}
        stored = {tp: o for tp, o in offsets.items() if tp not in too_large}
        if stored:
            answer.update(await self.offsets.commit_transactional(group_id, producer, stored,
                                                                  timestamp, guard))
        return answer

    async def delete(self, group_id):
        """DeleteGroups of one group: NONE once its tombstone is written (an Empty group),
        NON_EMPTY_GROUP, or GROUP_ID_NOT_FOUND if the coordinator has no such group (it
        may still have committed offsets). NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS)
        when another broker coordinates it."""
        code = self.owner_error(group_id)
        if code:
            return code
        await self.loaded()
        if group_id not in self.groups:
            return ErrorCode.GROUP_ID_NOT_FOUND
        return await self._request(group_id, Delete())

    async def _request(self, group_id, event, create=False):
        ticket = next(self._tickets)
        future = self._waiting[ticket] = asyncio.get_running_loop().create_future()
        self._submit(group_id, event, create, ticket)
        return await future

    def _answer(self, group_id, event):
        ticket = next(self._tickets)
        result = self._submit(group_id, event, False, ticket)
        if result is None:
            raise RuntimeError(f"group {group_id!r}: {type(event).__name__} was not answered")
        return result

    def _submit(self, group_id, event, create, ticket):
        """Feed ``event`` to the group. Returns its result if it was answered and nobody
        awaits ``ticket``; every other reply goes to the request awaiting it, after the
        records this event produced are stored."""
        g = self.groups.get(group_id)
        now = self.now()
        if g is None:
            g = GroupStateMachine(group_id, self.initial_delay_ms, self._member_ids)
            if self._stopped:
                g.unload(now)
            elif create:
                self.groups[group_id] = g
        own = None
        replies = []
        for reply in g.handle(event, now, ticket):
            if reply.ticket == ticket and ticket not in self._waiting:
                own = reply.result
            else:
                replies.append(reply)
        if g.state is GroupState.DEAD and not self._stopped and self.groups.get(group_id) is g:
            del self.groups[group_id]      # deleted: the next JoinGroup starts a new group
        self._persist(group_id, g.take_records(), replies)
        self._rearm()
        return own

    def _rearm(self):
        deadline = self.next_deadline()
        if deadline is not None and self._wake is not None \
                and (self._alarm is None or deadline < self._alarm):
            self._wake.set()

    def _deliver(self, replies):
        for reply in replies:
            future = self._waiting.pop(reply.ticket, None)
            # A handler cancelled while it waited (the broker is stopping) wants nothing.
            if future is not None and not future.done():
                future.set_result(reply.result)

    # -- Storing group metadata ---------------------------------------------------------------

    def _persist(self, group_id, records, replies):
        """Deliver ``replies`` once ``records`` (and any queued before) are stored."""
        if self.runtime is None or not records:
            self._deliver(replies)
            return
        self._writes.append((group_id, records, replies))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())

    async def _write_queued(self):
        while self._writes:
            group_id, records, replies = self._writes[0]
            stamp = int(self._wall_clock() * 1000)
            failed = ErrorCode.NONE
            for value in records:
                if value is not None:
                    value = dataclasses.replace(value, current_state_timestamp=stamp)
                try:
                    code = await self.runtime.append(group_id, [group_record(group_id, value)],
                                                     errors=self._store_errors)
                except Exception:
                    # The group goes on in memory; only a restart would lose this generation.
                    log.exception("group %s: storing its metadata failed", group_id)
                    code = ErrorCode.NONE
                if code:
                    log.info("group %s: its metadata was not stored: %s", group_id,
                             ErrorCode(code).name)
                    failed = failed or code
            self._writes.popleft()
            self._deliver(_with_store_error(replies, failed))

    # -- Timeouts -----------------------------------------------------------------------------

    def tick(self):
        """Apply every timeout that is due now."""
        now = self.now()
        for group_id, g in list(self.groups.items()):
            deadline = g.next_deadline()
            if deadline is not None and deadline <= now:
                replies = g.expire(now)
                self._persist(group_id, g.take_records(), replies)

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


def _with_store_error(replies, code):
    """The replies of a write that failed with ``code``: the JoinGroup and SyncGroup answers
    that were to succeed carry the error instead (Kafka answers the storeGroup callback's
    error; the members rejoin)."""
    if not code:
        return replies
    out = []
    for reply in replies:
        result = reply.result
        if isinstance(result, SyncResult) and not result.error:
            reply = dataclasses.replace(reply, result=SyncResult(code))
        elif isinstance(result, JoinResult) and not result.error:
            reply = dataclasses.replace(reply, result=JoinResult(code, result.member_id))
        out.append(reply)
    return out
