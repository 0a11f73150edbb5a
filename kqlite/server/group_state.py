"""One consumer group of Kafka's classic group protocol, as a pure state machine.

Theory of operation
-------------------
A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, as in
Kafka's GroupCoordinator (``core/.../coordinator/group/GroupCoordinator.scala``);
Dead is where an unloaded group ends (the broker is stopping).

Rule 1: everything that decides what a group does lives in this file: no I/O, no
asyncio, no clock, no protocol objects. Inputs are the small values of
``group_events`` (Join, Sync, Heartbeat, Leave, Commit) handed to
:meth:`GroupStateMachine.handle` with the time ``now`` (milliseconds on any
monotonic clock) and an opaque ``ticket`` naming the request. Outputs are
``Reply`` values: the answer for a ticket. A JoinGroup or SyncGroup is often
answered later, by another call (the JoinGroup of the last member to rejoin
answers everybody's), so every call returns the replies it produced, for any ticket.

Rule 2: time only moves when the caller says so. :meth:`next_deadline` is the
moment the group next needs attention (a session or rebalance timeout, the end of
the initial rebalance delay); the caller calls :meth:`expire` at or after it.

The transition table
--------------------
``TRANSITIONS[state][event]`` is a :class:`Rule`: the checks a request must pass
first (each maps to its error code: unknown member, illegal generation,
inconsistent protocol), then the action, the code to answer with and the next
state. The code looks every event up in the table, so the table is the behaviour.
Requests are JOIN_NEW (no member id), JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and
SIMPLE_COMMIT (generation -1: a consumer not using group management). The other
events follow from these or from timers:

- COMPLETE_JOIN: every member rejoined, after the initial delay (only the first
  rebalance of an Empty group waits ``group.initial.rebalance.delay.ms``);
- REBALANCE_TIMEOUT: the largest rebalance timeout passed; members that did not
  rejoin are dropped and the rebalance completes with the rest;
- LEADER_SYNC: the leader's SyncGroup brought the assignments;
- MEMBER_REMOVED / LAST_MEMBER_REMOVED: a member left or its session expired;
- UNLOAD: the coordinator stops; waiting requests get NOT_COORDINATOR.

A JoinGroup without a member id from a v4+ client only reserves an id (a
"pending" member, KIP-394) and is answered MEMBER_ID_REQUIRED; the member joins
when it comes back with that id. Pending members hold up the completion of a
rebalance like members that have not rejoined yet.

Known differences from Kafka 3.9 (kept on purpose, for now): every JoinGroup
outside a rebalance starts one (Kafka answers a follower that rejoins with
unchanged metadata without rebalancing); the initial delay is not extended by
later joiners; session timeouts are not bounded by group.min/max.session.timeout.ms;
a member waiting for its assignment is not protected from session expiry; a
second JoinGroup of a waiting member answers the first REBALANCE_IN_PROGRESS
(Kafka never answers it); a rebalance timeout also forgets pending member ids; a
SIMPLE_COMMIT to a group with members gets ILLEGAL_GENERATION (Kafka:
UNKNOWN_MEMBER_ID); static membership (group.instance.id) is not implemented.
"""

import dataclasses
import enum
import logging
from typing import Callable, Optional

from ..protocol import ErrorCode
from .group_events import (Commit, Heartbeat, JoinedMember, Join, JoinResult, Leave,
                           MemberSummary, Reply, Sync, SyncResult)

__all__ = ["GroupState", "Event", "Check", "Rule", "TRANSITIONS", "GroupStateMachine",
           "GroupStateError"]

log = logging.getLogger("kqlite.server")


class GroupStateError(RuntimeError):
    """An event reached a state the transition table has no rule for (a bug)."""


class GroupState(enum.Enum):
    # WIRE: Kafka-defined names (DescribeGroups and ListGroups group_state).
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Event(enum.Enum):
    JOIN_NEW = "JoinGroup without a member id"
    JOIN = "JoinGroup of a member or pending member"
    SYNC = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    LEAVE = "LeaveGroup"
    COMMIT = "OffsetCommit of a generation"
    SIMPLE_COMMIT = "OffsetCommit with generation -1"
    COMPLETE_JOIN = "every member rejoined"
    REBALANCE_TIMEOUT = "the rebalance timeout passed"
    LEADER_SYNC = "the leader sent the assignments"
    MEMBER_REMOVED = "a member left or expired, others remain"
    LAST_MEMBER_REMOVED = "the last member left or expired"
    UNLOAD = "the coordinator stops"


class Check(enum.Enum):
    """What a request must satisfy before its rule applies, and the refusal if it does not."""
    PROTOCOLS = ("shares a protocol type and name with the group",
                 ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    MEMBER = ("is a member", ErrorCode.UNKNOWN_MEMBER_ID)
    MEMBER_OR_PENDING = ("is a member or holds a pending member id", ErrorCode.UNKNOWN_MEMBER_ID)
    GENERATION = ("names the current generation", ErrorCode.ILLEGAL_GENERATION)

    @property
    def refusal(self):
        return self.value[1]


@dataclasses.dataclass(frozen=True)
class Rule:
    checks: tuple = ()                 # run in order; the first that fails answers the request
    action: Optional[str] = None       # GroupStateMachine._<action>(event, ticket)
    answer: Optional[ErrorCode] = None  # the code to answer with after the action (None: the
    #                                    action answers, maybe later)
    next: Optional[GroupState] = None  # the state afterwards (None: unchanged)


EMPTY, PREPARING, COMPLETING, STABLE, DEAD = GroupState
E = Event
_CURRENT = (Check.MEMBER, Check.GENERATION)
_JOINING = (Check.PROTOCOLS, Check.MEMBER_OR_PENDING)
_LEAVING = (Check.MEMBER_OR_PENDING,)
NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = (
    ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.REBALANCE_IN_PROGRESS)

TRANSITIONS = {
    # Only pending members (if any): the member-scoped answers are Kafka's for Empty.
    EMPTY: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN: Rule(_JOINING, "await_join", next=PREPARING),
        E.SYNC: Rule(answer=UNKNOWN_MEMBER_ID),
        E.HEARTBEAT: Rule(answer=UNKNOWN_MEMBER_ID),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        E.COMMIT: Rule(answer=UNKNOWN_MEMBER_ID),
        E.SIMPLE_COMMIT: Rule(answer=NONE),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    PREPARING: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN: Rule(_JOINING, "await_join"),
        E.SYNC: Rule(_CURRENT, answer=REBALANCE_IN_PROGRESS),
        E.HEARTBEAT: Rule(_CURRENT, "touch", REBALANCE_IN_PROGRESS),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        # Kafka accepts commits while preparing: the heartbeat tells the member to rejoin.
        E.COMMIT: Rule(_CURRENT, "touch", NONE),
        E.SIMPLE_COMMIT: Rule(answer=ILLEGAL_GENERATION),
        E.COMPLETE_JOIN: Rule(action="complete_join", next=COMPLETING),
        E.REBALANCE_TIMEOUT: Rule(action="drop_silent_members"),
        E.MEMBER_REMOVED: Rule(),
        E.LAST_MEMBER_REMOVED: Rule(action="empty", next=EMPTY),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    COMPLETING: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN: Rule(_JOINING, "await_join", next=PREPARING),
        E.SYNC: Rule(_CURRENT, "await_assignment"),
        E.HEARTBEAT: Rule(_CURRENT, "touch", NONE),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        # The member has the new generation but not its assignment yet.
        E.COMMIT: Rule(_CURRENT, answer=REBALANCE_IN_PROGRESS),
        E.SIMPLE_COMMIT: Rule(answer=ILLEGAL_GENERATION),
        E.LEADER_SYNC: Rule(action="distribute_assignment", next=STABLE),
        E.MEMBER_REMOVED: Rule(next=PREPARING),
        E.LAST_MEMBER_REMOVED: Rule(action="empty", next=EMPTY),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    STABLE: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN: Rule(_JOINING, "await_join", next=PREPARING),
        E.SYNC: Rule(_CURRENT, "send_assignment"),
        E.HEARTBEAT: Rule(_CURRENT, "touch", NONE),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        E.COMMIT: Rule(_CURRENT, "touch", NONE),
        E.SIMPLE_COMMIT: Rule(answer=ILLEGAL_GENERATION),
        E.MEMBER_REMOVED: Rule(next=PREPARING),
        E.LAST_MEMBER_REMOVED: Rule(action="empty", next=EMPTY),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    # Kafka refuses everything for a Dead group before it looks at the member.
    DEAD: {**{e: Rule(answer=ErrorCode.COORDINATOR_NOT_AVAILABLE)
              for e in (E.JOIN_NEW, E.JOIN, E.SYNC, E.HEARTBEAT, E.LEAVE, E.COMMIT,
                        E.SIMPLE_COMMIT)},
           E.UNLOAD: Rule()},
}
"""What each event does in each state; an event missing from a state's row cannot happen
there (an Empty group has no member to remove, only a rebalance completes, ...)."""


class _Member:
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "protocol_type",
                 "protocols", "session_timeout_ms", "rebalance_timeout_ms", "last_seen",
                 "assignment", "join_ticket", "sync_tickets")

    def __init__(self, member_id, join):
        self.member_id = member_id
        self.group_instance_id = join.group_instance_id
        self.client_id = join.client_id
        self.client_host = join.client_host
        self.assignment = None       # set by the leader's SyncGroup of each generation
        self.join_ticket = None      # the JoinGroup waiting for the rebalance to complete
        self.sync_tickets = []       # SyncGroups waiting for the leader's assignments

    def metadata_for(self, protocol):
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")

    def session_deadline(self):
        return self.last_seen + self.session_timeout_ms


class GroupStateMachine:
    """One group. ``member_ids(client_id)`` makes a new unique member id."""

    def __init__(self, group_id, initial_rebalance_delay_ms, member_ids: Callable[[str], str]):
        self.group_id = group_id
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._member_ids = member_ids
        self._state = EMPTY
        self._generation = 0
        self._protocol_type = None
        self._protocol_name = None
        self._leader = None
        self._members = {}           # member id -> _Member, in the order they joined
        self._pending = {}           # member id handed out with MEMBER_ID_REQUIRED -> deadline
        self._rebalance_deadline = None
        self._join_delay_deadline = None
        self._now = 0
        self._outbox = []

    # -- What the group looks like ------------------------------------------------------------

    state = property(lambda self: self._state)
    generation = property(lambda self: self._generation)
    protocol_type = property(lambda self: self._protocol_type)
    protocol_name = property(lambda self: self._protocol_name)
    leader = property(lambda self: self._leader)

    def members(self):
        return tuple(MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.metadata_for(self._protocol_name), m.assignment or b"")
                     for m in self._members.values())

    def pending_member_ids(self):
        return tuple(self._pending)

    def waiting_tickets(self):
        """The tickets of requests this group holds to answer later."""
        return [t for m in self._members.values()
                for t in ([m.join_ticket] if m.join_ticket is not None else []) + m.sync_tickets]

    # -- Driving the machine ------------------------------------------------------------------

    def handle(self, event, now, ticket=None):
        """Feed one request; returns every :class:`Reply` it produced (its own among them,
        unless it waits for the rebalance)."""
        self._now = now
        if isinstance(event, Join):
            kind = E.JOIN if event.member_id else E.JOIN_NEW
        elif isinstance(event, Commit):
            kind = E.COMMIT if event.generation >= 0 else E.SIMPLE_COMMIT
        else:
            kind = {Sync: E.SYNC, Heartbeat: E.HEARTBEAT, Leave: E.LEAVE}[type(event)]
        self._dispatch(kind, event, ticket)
        self._maybe_complete_join()
        return self._flush()

    def next_deadline(self):
        """When :meth:`expire` next has something to do (None: only a request can change
        anything)."""
        deadlines = [m.session_deadline() for m in self._members.values() if m.join_ticket is None]
        deadlines.extend(self._pending.values())
        if self._state is PREPARING:
            deadlines.append(self._rebalance_deadline)
            if self._all_joined():
                deadlines.append(self._join_delay_deadline)
        return min(deadlines, default=None)

    def expire(self, now):
        """Apply every timeout due at ``now``; returns the replies that produced."""
        self._now = now
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            for m in list(self._members.values()):
                # A member waiting in JoinGroup cannot heartbeat; the rebalance timeout covers it.
                if m.join_ticket is None and m.session_deadline() <= now \
                        and m.member_id in self._members:
                    self._remove_member(m, "timed out (no heartbeat)")
            for member_id, pending_deadline in list(self._pending.items()):
                if pending_deadline <= now:
                    del self._pending[member_id]
            if self._state is PREPARING and self._rebalance_deadline <= now:
                self._dispatch(E.REBALANCE_TIMEOUT)
            self._maybe_complete_join()
        return self._flush()

    def unload(self, now):
        """The coordinator stops: answer every waiting request and go Dead."""
        self._now = now
        self._dispatch(E.UNLOAD)
        return self._flush()

    # -- The table in action ------------------------------------------------------------------

    def _dispatch(self, kind, event=None, ticket=None):
        rule = TRANSITIONS[self._state].get(kind)
        if rule is None:
            raise GroupStateError(f"group {self.group_id!r}: no rule for {kind.name} "
                                  f"({kind.value}) in state {self._state.value}")
        for check in rule.checks:
            if not self._passes(check, event):
                self._reply(ticket, _refusal(event, check.refusal))
                return
        if rule.action is not None:
            getattr(self, "_" + rule.action)(event, ticket)
        if rule.next is not None and rule.next is not self._state:
            self._enter(rule.next)
        if rule.answer is not None:
            self._reply(ticket, _refusal(event, rule.answer))

    def _passes(self, check, event):
        member_id = event.member_id
        if check is Check.MEMBER:
            return member_id in self._members
        if check is Check.MEMBER_OR_PENDING:
            return member_id in self._members or member_id in self._pending
        if check is Check.GENERATION:
            return event.generation == self._generation
        assert check is Check.PROTOCOLS, check
        if self._members and self._protocol_type is not None \
                and event.protocol_type != self._protocol_type:
            return False
        others = [m for m in self._members.values() if m.member_id != member_id]
        return not others or any(all(any(n == name for n, _ in m.protocols) for m in others)
                                 for name, _ in event.protocols)

    def _enter(self, state):
        previous, self._state = self._state, state
        if state is PREPARING:
            self._start_rebalance(initial=previous is EMPTY)

    def _maybe_complete_join(self):
        if self._state is PREPARING and self._all_joined() \
                and self._now >= self._join_delay_deadline:
            self._dispatch(E.COMPLETE_JOIN)

    def _all_joined(self):
        return bool(self._members) and not self._pending \
            and all(m.join_ticket is not None for m in self._members.values())

    # -- Actions (named by the table) ---------------------------------------------------------

    def _new_member_id(self, join, ticket):
        member_id = self._member_ids(join.client_id)
        self._pending[member_id] = self._now + join.session_timeout_ms
        if join.require_known_member_id:
            self._reply(ticket, JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id))
        else:
            self._dispatch(E.JOIN, dataclasses.replace(join, member_id=member_id), ticket)

    def _await_join(self, join, ticket):
        member = self._members.get(join.member_id)
        if member is None:
            del self._pending[join.member_id]
            member = self._members[join.member_id] = _Member(join.member_id, join)
        member.protocol_type = join.protocol_type
        member.protocols = tuple(join.protocols)
        member.session_timeout_ms = join.session_timeout_ms
        member.rebalance_timeout_ms = max(join.rebalance_timeout_ms, join.session_timeout_ms)
        member.last_seen = self._now
        if member.join_ticket is not None:  # the member gave up on its earlier JoinGroup
            self._reply(member.join_ticket,
                        JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_ticket = ticket

    def _start_rebalance(self, initial):
        for m in self._members.values():  # pending syncs of the old generation are void
            for t in m.sync_tickets:
                self._reply(t, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, self._protocol_type,
                                          self._protocol_name))
            m.sync_tickets = []
        self._rebalance_deadline = self._now + max(m.rebalance_timeout_ms
                                                   for m in self._members.values())
        # A new group waits a little so members starting together land in one generation.
        self._join_delay_deadline = self._now + (self.initial_rebalance_delay_ms if initial else 0)
        log.info("group %s preparing rebalance (generation %d)", self.group_id, self._generation)

    def _drop_silent_members(self, event, ticket):
        for m in list(self._members.values()):
            if m.join_ticket is None:
                log.info("group %s: member %s did not rejoin in time", self.group_id, m.member_id)
                del self._members[m.member_id]
        self._pending.clear()
        if self._leader not in self._members:
            self._leader = None
        self._dispatch(E.COMPLETE_JOIN if self._members else E.LAST_MEMBER_REMOVED)

    def _complete_join(self, event, ticket):
        self._generation += 1
        first = next(iter(self._members.values()))
        self._protocol_type = first.protocol_type
        self._protocol_name = self._select_protocol(first)
        if self._leader not in self._members:
            self._leader = first.member_id
        everyone = tuple(JoinedMember(m.member_id, m.group_instance_id,
                                      m.metadata_for(self._protocol_name))
                         for m in self._members.values())
        for m in self._members.values():
            m.last_seen = self._now
            m.assignment = None
            self._reply(m.join_ticket, JoinResult(
                ErrorCode.NONE, m.member_id, self._generation, self._protocol_type,
                self._protocol_name, self._leader,
                everyone if m.member_id == self._leader else ()))
            m.join_ticket = None
        log.info("group %s generation %d: %d member(s), protocol %s, leader %s", self.group_id,
                 self._generation, len(self._members), self._protocol_name, self._leader)

    def _select_protocol(self, first):
        """The first member's most preferred protocol that every member supports."""
        for name, _ in first.protocols:
            if all(any(n == name for n, _ in m.protocols) for m in self._members.values()):
                return name
        return first.protocols[0][0] if first.protocols else ""

    def _await_assignment(self, sync, ticket):
        member = self._members[sync.member_id]
        member.last_seen = self._now
        member.sync_tickets.append(ticket)
        if member.member_id == self._leader:
            self._dispatch(E.LEADER_SYNC, sync)

    def _distribute_assignment(self, sync, ticket):
        given = dict(sync.assignments)
        for m in self._members.values():
            m.assignment = given.get(m.member_id, b"")
            for t in m.sync_tickets:
                self._reply(t, SyncResult(ErrorCode.NONE, self._protocol_type,
                                          self._protocol_name, m.assignment))
            m.sync_tickets = []

    def _send_assignment(self, sync, ticket):
        member = self._members[sync.member_id]
        member.last_seen = self._now
        self._reply(ticket, SyncResult(ErrorCode.NONE, self._protocol_type, self._protocol_name,
                                       member.assignment))

    def _touch(self, event, ticket):
        self._members[event.member_id].last_seen = self._now

    def _remove(self, leave, ticket):
        if self._pending.pop(leave.member_id, None) is None:
            self._remove_member(self._members[leave.member_id], "left the group")

    def _remove_member(self, member, why):
        del self._members[member.member_id]
        log.info("group %s: member %s %s", self.group_id, member.member_id, why)
        if member.join_ticket is not None:
            self._reply(member.join_ticket, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
        for t in member.sync_tickets:
            self._reply(t, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if self._leader == member.member_id:
            self._leader = None
        self._dispatch(E.MEMBER_REMOVED if self._members else E.LAST_MEMBER_REMOVED)

    def _empty(self, event, ticket):
        self._generation += 1
        self._leader = None

    def _unload(self, event, ticket):
        for m in self._members.values():
            if m.join_ticket is not None:
                self._reply(m.join_ticket, JoinResult(ErrorCode.NOT_COORDINATOR, m.member_id))
            for t in m.sync_tickets:
                self._reply(t, SyncResult(ErrorCode.NOT_COORDINATOR))
        self._members.clear()
        self._pending.clear()
        self._leader = None

    # -- Output -------------------------------------------------------------------------------

    def _reply(self, ticket, result):
        self._outbox.append(Reply(ticket, result))

    def _flush(self):
        out, self._outbox = self._outbox, []
        return out


def _refusal(event, code):
    """``code`` in the result type of ``event``'s request."""
    if isinstance(event, Join):
        return JoinResult(code)
    if isinstance(event, Sync):
        return SyncResult(code)
    return code
