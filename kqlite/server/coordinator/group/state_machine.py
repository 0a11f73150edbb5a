"""One consumer group of Kafka's classic group protocol, as a pure state machine.

Theory of operation
-------------------
A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, as in
Kafka's GroupCoordinator (``core/.../coordinator/group/GroupCoordinator.scala``);
Dead is where a group ends when it is deleted or unloaded (the broker is stopping).

Rule 1: everything that decides what a group does lives in this file and in its
transition table (transitions.py): no I/O, no asyncio, no clock, no protocol objects.
Inputs are the small values of ``events`` (Join, Sync, Heartbeat, Leave, Commit,
TxnCommit, Delete) handed to
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
``TRANSITIONS[state][event]`` (transitions.py) is a :class:`Rule`: the checks a request must pass
first (each maps to its error code: fenced instance, unknown member, illegal
generation, inconsistent protocol), then the action, the code to answer with and the next
state. The code looks every event up in the table, so the table is the behaviour.
Requests are JOIN_NEW (no member id), JOIN_STATIC (no member id, a known
group.instance.id), JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT, SIMPLE_COMMIT (generation
-1: a consumer not using group management), TXN_COMMIT and TXN_SIMPLE_COMMIT (a
TxnOffsetCommit naming a generation, member or instance, or none) and DELETE
(DeleteGroups). The other
events follow from these or from timers:

- COMPLETE_JOIN: every member rejoined, after the initial delay (only the first
  rebalance of an Empty group waits ``group.initial.rebalance.delay.ms``);
- REBALANCE_TIMEOUT: the largest rebalance timeout passed; dynamic members that did
  not rejoin are dropped and the rebalance completes with the rest;
- LEADER_SYNC: the leader's SyncGroup brought the assignments;
- STATIC_PROTOCOL_CHANGE: a restarted static member of a Stable group changes the
  protocol the group would choose, so the group must rebalance after all;
- MEMBER_REMOVED / LAST_MEMBER_REMOVED: a member left or its session expired;
- UNLOAD: the coordinator stops; waiting requests get NOT_COORDINATOR.

A JoinGroup without a member id from a v4+ client only reserves an id (a
"pending" member, KIP-394) and is answered MEMBER_ID_REQUIRED; the member joins
when it comes back with that id. Pending members hold up the completion of a
rebalance like members that have not rejoined yet.

Static members (KIP-345) give a ``group.instance.id``. One that comes back without a
member id (it restarted) takes the place of its previous incarnation: a new member
id, the same assignment, the old id fenced (its waiting requests and every later one
get FENCED_INSTANCE_ID); in a Stable group this needs no rebalance. A static member
that does not rejoin within the rebalance timeout stays in the group (only its
session timeout removes it).

Persistence: the machine queues the group's metadata (a GroupMetadataValue, None for a
tombstone) when Kafka writes it: when the leader's assignments complete a generation, a
static member is replaced in a Stable group, the group empties or is deleted. The caller
takes them (:meth:`take_records`), stores them, then delivers the replies of that call.
:meth:`restore` rebuilds a Stable (or Empty) group from its last record.

Known differences from Kafka 3.9 (kept on purpose, for now): every JoinGroup of a
member with a member id outside a rebalance starts one (Kafka answers a follower that
rejoins with unchanged metadata without rebalancing); the initial delay is not
extended by later joiners; session timeouts are not bounded by
group.min/max.session.timeout.ms; a member waiting for its assignment is not
protected from session expiry; a second JoinGroup of a waiting member answers the
first REBALANCE_IN_PROGRESS (Kafka never answers it); a rebalance timeout also
forgets pending member ids; SyncGroup v5's protocol type and name are not checked;
the protocol is the first member's preferred one that all support (Kafka: a vote);
the group does not stay CompletingRebalance while the leader's assignment is stored.
"""

import dataclasses
import logging
from typing import Callable

from ....protocol import ErrorCode
from .events import (Commit, Delete, Heartbeat, JoinedMember, Join, JoinResult, Leave,
                     MemberSummary, Reply, Sync, SyncResult, TxnCommit)
from .members import Member, restored_members, stored_group
from .transitions import TRANSITIONS, Check, Event, GroupState, Rule

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = GroupState
E = Event

__all__ = ["GroupState", "Event", "Check", "Rule", "TRANSITIONS", "GroupStateMachine",
           "GroupStateError"]

log = logging.getLogger("kqlite.server")


class GroupStateError(RuntimeError):
    """An event reached a state the transition table has no rule for (a bug)."""


class GroupStateMachine:
    """One group. ``member_ids(prefix)`` makes a new unique member id (the prefix is the
    client id, or a static member's group.instance.id, as in Kafka)."""

    def __init__(self, group_id, initial_rebalance_delay_ms, member_ids: Callable[[str], str]):
        self.group_id = group_id
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._member_ids = member_ids
        self._state = EMPTY
        self._generation = 0
        self._protocol_type = None
        self._protocol_name = None
        self._leader = None
        self._members = {}           # member id -> Member, in the order they joined
        self._static = {}            # group.instance.id -> member id of its current incarnation
        self._pending = {}           # member id handed out with MEMBER_ID_REQUIRED -> deadline
        self._rebalance_deadline = None
        self._join_delay_deadline = None
        self._now = 0
        self._outbox = []
        self._records = []           # GroupMetadataValue (None: a tombstone) to store

    @classmethod
    def restore(cls, group_id, initial_rebalance_delay_ms, member_ids, stored, now):
        """The group as its last metadata record (``stored``, a GroupMetadataValue) left it:
        Stable with its members and their assignments, or Empty; sessions start at ``now``."""
        g = cls(group_id, initial_rebalance_delay_ms, member_ids)
        g._generation = stored.generation
        g._protocol_type = stored.protocol_type or None
        g._protocol_name = stored.protocol
        g._leader = stored.leader
        g._members = restored_members(stored, now)
        g._static = {m.group_instance_id: m.member_id for m in g._members.values()
                     if m.group_instance_id is not None}
        g._state = STABLE if g._members else EMPTY
        return g

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

    def static_member(self, group_instance_id):
        """The member id of the instance's current incarnation, or None."""
        return self._static.get(group_instance_id)

    def waiting_tickets(self):
        """The tickets of requests this group holds to answer later."""
        return [t for m in self._members.values()
                for t in ([m.join_ticket] if m.join_ticket is not None else []) + m.sync_tickets]

    def take_records(self):
        """The metadata records queued since the last call, oldest first (see the module
        docstring); the caller stores them before it delivers the replies of the call
        that queued them."""
        out, self._records = self._records, []
        return out

    # -- Driving the machine ------------------------------------------------------------------

    def handle(self, event, now, ticket=None):
        """Feed one request; returns every :class:`Reply` it produced (its own among them,
        unless it waits for the rebalance)."""
        self._now = now
        if isinstance(event, Join):
            if event.member_id:
                kind = E.JOIN
            elif event.group_instance_id in self._static:
                kind = E.JOIN_STATIC
            else:
                kind = E.JOIN_NEW
        elif isinstance(event, Commit):
            kind = E.COMMIT if event.generation >= 0 else E.SIMPLE_COMMIT
        elif isinstance(event, TxnCommit):
            kind = E.TXN_COMMIT if event.named else E.TXN_SIMPLE_COMMIT
        elif isinstance(event, Leave):
            kind = E.LEAVE
            if not event.member_id and event.group_instance_id is not None:
                # An administrative removal names only the instance (LeaveGroup v3+).
                event = dataclasses.replace(
                    event, member_id=self._static.get(event.group_instance_id, ""))
        else:
            kind = {Sync: E.SYNC, Heartbeat: E.HEARTBEAT, Delete: E.DELETE}[type(event)]
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
        instance = event.group_instance_id
        if check is Check.FENCED:
            current = self._static.get(instance)
            # A pending member may leave whatever instance it names, as in Kafka.
            return current is None or current == member_id \
                or (isinstance(event, Leave) and member_id in self._pending)
        if check is Check.MEMBER:
            return self._is_member(member_id, instance)
        if check is Check.MEMBER_OR_PENDING:
            return member_id in self._pending or self._is_member(member_id, instance)
        if check is Check.GENERATION:
            return event.generation == self._generation
        assert check is Check.PROTOCOLS, check
        if self._members and self._protocol_type is not None \
                and event.protocol_type != self._protocol_type:
            return False
        others = [m for m in self._members.values() if m.member_id != member_id]
        return not others or any(all(any(n == name for n, _ in m.protocols) for m in others)
                                 for name, _ in event.protocols)

    def _is_member(self, member_id, instance):
        if instance is None:
            return member_id in self._members
        return self._static.get(instance) == member_id

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
        member_id = self._member_ids(join.group_instance_id or join.client_id)
        self._pending[member_id] = self._now + join.session_timeout_ms
        # A static member is known by its instance id: it never needs a member id first.
        if join.require_known_member_id and join.group_instance_id is None:
            self._reply(ticket, JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id))
        else:
            self._dispatch(E.JOIN, dataclasses.replace(join, member_id=member_id), ticket)

    def _await_join(self, join, ticket):
        member = self._members.get(join.member_id)
        if member is None:
            del self._pending[join.member_id]
            member = self._members[join.member_id] = Member(join.member_id, join)
            if member.group_instance_id is not None:
                self._static[member.group_instance_id] = member.member_id
        member.update(join, self._now)
        if member.join_ticket is not None:  # the member gave up on its earlier JoinGroup
            self._reply(member.join_ticket,
                        JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_ticket = ticket

    def _replace_static_member(self, join, ticket):
        """The restarted static member takes its old place under a new member id; the old
        id is fenced."""
        old_id = self._static[join.group_instance_id]
        member = self._members[old_id]
        if member.join_ticket is not None:
            self._reply(member.join_ticket,
                        JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        for t in member.sync_tickets:
            self._reply(t, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.sync_tickets = []
        member.member_id = new_id = self._member_ids(join.group_instance_id)
        # Same place in the join order: the first member still picks the protocol.
        self._members = {(new_id if k == old_id else k): m for k, m in self._members.items()}
        self._static[join.group_instance_id] = new_id
        if self._leader == old_id:
            self._leader = new_id
        member.update(join, self._now)
        member.join_ticket = ticket
        log.info("group %s: static member %s replaced member %s by %s", self.group_id,
                 join.group_instance_id, old_id, new_id)
        return member

    def _replace_static_member_in_place(self, join, ticket):
        leader_before = self._leader
        member = self._replace_static_member(join, ticket)
        if self._select_protocol() != self._protocol_name:
            self._dispatch(E.STATIC_PROTOCOL_CHANGE)
            return
        member.join_ticket = None
        self._store()
        is_leader = member.member_id == self._leader
        if join.supports_skipping_assignment:
            # KIP-814: the leader learns it leads but keeps the stable group's assignment.
            self._reply(ticket, JoinResult(
                ErrorCode.NONE, member.member_id, self._generation, self._protocol_type,
                self._protocol_name, self._leader, self._joined_members() if is_leader else (),
                skip_assignment=is_leader))
        else:
            # Older clients are told the previous leader id, so none of them reassigns.
            self._reply(ticket, JoinResult(
                ErrorCode.NONE, member.member_id, self._generation, self._protocol_type,
                self._protocol_name, leader_before))

    def _start_rebalance(self, initial):
        for m in self._members.values():  # pending syncs of the old generation are void
            for t in m.sync_tickets:
                self._reply(t, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, self._protocol_type,
                                          self._protocol_name))
            m.sync_tickets = []
        self._rebalance_deadline = self._now + self._rebalance_timeout()
        # A new group waits a little so members starting together land in one generation.
        self._join_delay_deadline = self._now + (self.initial_rebalance_delay_ms if initial else 0)
        log.info("group %s preparing rebalance (generation %d)", self.group_id, self._generation)

    def _rebalance_timeout(self):
        return max(m.rebalance_timeout_ms for m in self._members.values())

    def _drop_silent_members(self, event, ticket):
        for m in list(self._members.values()):
            if m.join_ticket is None and m.group_instance_id is None:
                log.info("group %s: member %s did not rejoin in time", self.group_id, m.member_id)
                del self._members[m.member_id]
        self._pending.clear()
        if self._leader not in self._members:
            self._leader = None
        if not self._members:
            self._dispatch(E.LAST_MEMBER_REMOVED)
        elif any(m.join_ticket is not None for m in self._members.values()):
            self._dispatch(E.COMPLETE_JOIN)
        else:
            # Only static members, none back yet: wait again; their sessions may expire.
            self._rebalance_deadline = self._now + self._rebalance_timeout()

    def _complete_join(self, event, ticket):
        self._generation += 1
        joined = [m for m in self._members.values() if m.join_ticket is not None]
        self._protocol_type = joined[0].protocol_type
        self._protocol_name = self._select_protocol()
        leader = self._members.get(self._leader)
        if leader is None or leader.join_ticket is None:
            self._leader = joined[0].member_id
        everyone = self._joined_members()
        for m in self._members.values():
            m.last_seen = self._now
            m.assignment = None
            if m.join_ticket is not None:
                self._reply(m.join_ticket, JoinResult(
                    ErrorCode.NONE, m.member_id, self._generation, self._protocol_type,
                    self._protocol_name, self._leader,
                    everyone if m.member_id == self._leader else ()))
                m.join_ticket = None
        log.info("group %s generation %d: %d member(s), protocol %s, leader %s", self.group_id,
                 self._generation, len(self._members), self._protocol_name, self._leader)

    def _joined_members(self):
        """What the leader is told of every member (static members that have not rejoined
        are still members)."""
        return tuple(JoinedMember(m.member_id, m.group_instance_id,
                                  m.metadata_for(self._protocol_name))
                     for m in self._members.values())

    def _select_protocol(self):
        """The first member's most preferred protocol that every member supports."""
        first = next(iter(self._members.values()))
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
        self._store()
        for m in self._members.values():
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
        if member.group_instance_id is not None:
            self._static.pop(member.group_instance_id, None)
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
        self._protocol_name = None
        self._store()

    def _delete(self, event, ticket):
        self._pending.clear()
        self._records.append(None)

    def _unload(self, event, ticket):
        for m in self._members.values():
            if m.join_ticket is not None:
                self._reply(m.join_ticket, JoinResult(ErrorCode.NOT_COORDINATOR, m.member_id))
            for t in m.sync_tickets:
                self._reply(t, SyncResult(ErrorCode.NOT_COORDINATOR))
        self._members.clear()
        self._static.clear()
        self._pending.clear()
        self._leader = None

    # -- Output -------------------------------------------------------------------------------

    def _store(self):
        self._records.append(stored_group(self._protocol_type, self._generation,
                                          self._protocol_name, self._leader,
                                          self._members.values()))

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
