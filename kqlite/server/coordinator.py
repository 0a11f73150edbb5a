"""Kafka's classic group coordinator (JoinGroup / SyncGroup / Heartbeat / LeaveGroup).

Theory of operation
-------------------
A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, as
in Kafka's GroupCoordinator. A JoinGroup from a new member (or a member whose
protocols changed) starts a rebalance; the rebalance completes when every known
member has sent its JoinGroup or the largest rebalance timeout passes (members
that did not rejoin are dropped). Completing bumps the generation, picks the
first protocol every member supports, makes the first joiner the leader and
answers every pending JoinGroup (the leader gets the member list). The leader's
SyncGroup carries the assignments; every member's SyncGroup is answered with
its own once the leader's arrives. Heartbeats keep a member alive; a member
silent for its session timeout is removed and the group rebalances.

The coordinator does not interpret assignments, so every client-side assignor
(range, roundrobin, cooperative-sticky) passes through. Committed offsets are
not kept here: they go to the data dir's ``__consumer_offsets`` (shared with
the embedded API).
"""

import asyncio
import logging
import time
import uuid

from ..protocol import ErrorCode

__all__ = ["GroupCoordinator", "Group", "Member"]

log = logging.getLogger("kqlite.server")

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"


class Member:
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "session_timeout",
                 "rebalance_timeout", "protocol_type", "protocols", "assignment",
                 "last_seen", "join_future", "sync_future")

    def __init__(self, member_id, instance_id, client_id, client_host):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.assignment = b""
        self.protocols = []
        self.join_future = None
        self.sync_future = None
        self.last_seen = time.monotonic()

    def metadata_for(self, protocol):
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


class Group:
    def __init__(self, group_id):
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.protocol_type = None
        self.protocol = None
        self.leader = None
        self.members = {}
        self.rebalance_deadline = None
        self.pending_join_delay = None


class GroupCoordinator:
    def __init__(self, broker, initial_delay=0.3):
        self.broker = broker
        self.groups = {}
        self.initial_delay = initial_delay
        self._task = None

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._reaper())

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def group(self, group_id, create=False):
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = Group(group_id)
        return g

    # -- JoinGroup ----------------------------------------------------------------------------

    async def join(self, request, client_id, client_host):
        body = request.body
        group_id = body["group_id"]
        log.debug("group %s: JoinGroup v%d from %r", group_id, request.api_version,
                  body["member_id"])
        if not group_id:
            return self._join_error(ErrorCode.INVALID_GROUP_ID, body)
        g = self.group(group_id, create=True)
        if g.protocol_type is not None and g.members and body["protocol_type"] != g.protocol_type:
            return self._join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, body)
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        member_id = body["member_id"]
        others = [m for m in g.members.values() if m.member_id != member_id]
        if others and not any(all(name in (n for n, _ in m.protocols) for m in others)
                              for name, _ in protocols):
            return self._join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, body)
        if member_id and member_id not in g.members:
            return self._join_error(ErrorCode.UNKNOWN_MEMBER_ID, body)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if request.api_version >= 4:  # KIP-394: the client must rejoin with this id
                g.members[member_id] = self._new_member(member_id, body, client_id, client_host,
                                                        protocols)
                g.members[member_id].last_seen = time.monotonic()
                return self._join_error(ErrorCode.MEMBER_ID_REQUIRED, body, member_id=member_id)
        member = g.members.get(member_id)
        if member is None:
            member = g.members[member_id] = self._new_member(member_id, body, client_id,
                                                             client_host, protocols)
        member.protocols = protocols
        member.session_timeout = body["session_timeout_ms"] / 1000.0
        member.rebalance_timeout = max(body.get("rebalance_timeout_ms", -1),
                                       body["session_timeout_ms"]) / 1000.0
        member.last_seen = time.monotonic()
        loop = asyncio.get_running_loop()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.cancel()
        member.join_future = loop.create_future()
        if g.state != PREPARING:
            self._prepare_rebalance(g)  # every JoinGroup outside a rebalance starts one
        self._maybe_complete_join(g)
        try:
            return await member.join_future
        except asyncio.CancelledError:
            return self._join_error(ErrorCode.REBALANCE_IN_PROGRESS, body, member_id=member_id)

    def _new_member(self, member_id, body, client_id, client_host, protocols):
        m = Member(member_id, body.get("group_instance_id"), client_id or "", client_host)
        m.protocol_type = body["protocol_type"]
        m.protocols = protocols
        m.session_timeout = body["session_timeout_ms"] / 1000.0
        m.rebalance_timeout = max(body.get("rebalance_timeout_ms", -1),
                                  body["session_timeout_ms"]) / 1000.0
        return m

    @staticmethod
    def _join_error(code, body, member_id=""):
        return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1,
                "protocol_type": None, "protocol_name": None, "leader": "",
                "skip_assignment": False, "member_id": member_id, "members": []}

    def _prepare_rebalance(self, g):
        if g.state == PREPARING:
            return
        for m in g.members.values():  # pending syncs of the old generation are void
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(ErrorCode.REBALANCE_IN_PROGRESS)
        was_empty = g.state == EMPTY
        g.state = PREPARING
        timeout = max((m.rebalance_timeout for m in g.members.values()), default=1.0)
        g.rebalance_deadline = time.monotonic() + timeout
        # A new group waits a little so members starting together land in one generation.
        g.pending_join_delay = time.monotonic() + (self.initial_delay if was_empty else 0)
        log.info("group %s preparing rebalance (generation %d)", g.group_id, g.generation)

    def _maybe_complete_join(self, g, force=False):
        if g.state != PREPARING:
            return
        now = time.monotonic()
        joined = [m for m in g.members.values()
                  if m.join_future is not None and not m.join_future.done()]
        everyone = len(joined) == len(g.members) and joined
        if not force and not (everyone and now >= g.pending_join_delay):
            return
        for m in list(g.members.values()):
            if m.join_future is None or m.join_future.done():
                del g.members[m.member_id]  # did not rejoin in time
        if not g.members:
            g.state = EMPTY
            g.generation += 1
            return
        g.generation += 1
        g.protocol_type = next(iter(g.members.values())).protocol_type
        g.protocol = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING
        members = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                    "metadata": m.metadata_for(g.protocol)} for m in g.members.values()]
        for m in g.members.values():
            m.last_seen = now
            m.join_future.set_result({
                "throttle_time_ms": 0, "error_code": 0, "generation_id": g.generation,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol,
                "leader": g.leader, "skip_assignment": False, "member_id": m.member_id,
                "members": members if m.member_id == g.leader else []})
        log.info("group %s generation %d: %d member(s), protocol %s, leader %s", g.group_id,
                 g.generation, len(g.members), g.protocol, g.leader)

    @staticmethod
    def _select_protocol(g):
        candidates = None
        for m in g.members.values():
            names = [name for name, _ in m.protocols]
            candidates = names if candidates is None else [n for n in candidates if n in names]
        leader_like = next(iter(g.members.values()))
        for name, _ in leader_like.protocols:
            if name in (candidates or []):
                return name
        return leader_like.protocols[0][0] if leader_like.protocols else ""

    # -- SyncGroup ----------------------------------------------------------------------------

    async def sync(self, request):
        body = request.body
        g = self.group(body["group_id"])
        reply = {"throttle_time_ms": 0, "protocol_type": None, "protocol_name": None,
                 "assignment": b""}
        if g is None or body["member_id"] not in g.members:
            return dict(reply, error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        if body["generation_id"] != g.generation:
            return dict(reply, error_code=ErrorCode.ILLEGAL_GENERATION)
        if g.state == PREPARING:
            return dict(reply, error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        member = g.members[body["member_id"]]
        member.last_seen = time.monotonic()
        reply.update(protocol_type=g.protocol_type, protocol_name=g.protocol)
        if g.state == STABLE:
            return dict(reply, error_code=0, assignment=member.assignment)
        if member.sync_future is None or member.sync_future.done():
            member.sync_future = asyncio.get_running_loop().create_future()
        if member.member_id == g.leader:
            given = {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]}
            for m in g.members.values():
                m.assignment = given.get(m.member_id, b"")
            g.state = STABLE
            for m in g.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(ErrorCode.NONE)
        code = await member.sync_future
        if code:
            return dict(reply, error_code=code)
        return dict(reply, error_code=0, assignment=member.assignment)

    # -- Heartbeat, LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, body):
        code = self._heartbeat(body)
        if code:
            log.debug("group %s: heartbeat from %s (generation %d): error %d", body["group_id"],
                      body["member_id"], body["generation_id"], code)
        return code

    def _heartbeat(self, body):
        g = self.group(body["group_id"])
        if g is None or body["member_id"] not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        g.members[body["member_id"]].last_seen = time.monotonic()
        if body["generation_id"] != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if g.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id, member_ids):
        g = self.group(group_id)
        results = []
        for member_id in member_ids:
            if g is None or member_id not in g.members:
                results.append((member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            self._remove(g, member_id, "left the group")
            results.append((member_id, ErrorCode.NONE))
        return results

    def _remove(self, g, member_id, why):
        member = g.members.pop(member_id)
        log.info("group %s: member %s %s", g.group_id, member_id, why)
        for fut in (member.join_future, member.sync_future):
            if fut is not None and not fut.done():
                fut.cancel()
        if g.leader == member_id:
            g.leader = None
        if g.members:
            self._prepare_rebalance(g)
            self._maybe_complete_join(g)
        else:
            g.state = EMPTY
            g.generation += 1

    def check_commit(self, group_id, generation, member_id):
        """Error code for an OffsetCommit from this member and generation."""
        g = self.group(group_id)
        if generation < 0:
            return ErrorCode.NONE if g is None or not g.members else \
                ErrorCode.ILLEGAL_GENERATION
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if g.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        g.members[member_id].last_seen = time.monotonic()
        return ErrorCode.NONE

    async def _reaper(self):
        """Expire silent members and finish rebalances whose timeout passed."""
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            for g in list(self.groups.values()):
                for m in list(g.members.values()):
                    waiting = m.join_future is not None and not m.join_future.done()
                    if not waiting and now - m.last_seen > m.session_timeout:
                        self._remove(g, m.member_id, "timed out (no heartbeat)")
                if g.state == PREPARING:
                    self._maybe_complete_join(g, force=now >= g.rebalance_deadline)
