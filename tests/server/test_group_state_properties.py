"""Properties of the group state machine under random clients and random clocks (hypothesis).

Three dynamic clients and one static member (``group.instance.id``, which may restart
and come back without its member id) send JoinGroup (v0-v3 and v4+), SyncGroup,
Heartbeat, LeaveGroup and OffsetCommit in any order, with any generation and member id they last heard of,
while a fake clock jumps forward. After every step the group must be coherent; at
the end, once the clients fall silent, every request must have been answered.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kqlite.protocol import ErrorCode
import dataclasses

from kqlite.server.coordinator.group.events import Commit, Heartbeat, Leave, Sync
from kqlite.server.coordinator.group.state_machine import GroupState
from test_group_state import Harness, join

CLIENTS = ("a", "b", "c", "s")
INSTANCE = {"s": "inst-s"}                           # the static member's group.instance.id
PROTOCOLS = ((("range", b"r"),), (("sticky", b"s"), ("range", b"r")), (("roundrobin", b"o"),))


class GroupMachineUnderLoad(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.h = Harness(delay=3000)
        self.member_id = {c: "" for c in CLIENTS}    # what each client believes
        self.generation = {c: -1 for c in CLIENTS}
        self.issued = set()
        self.joins = {}                              # join ticket -> client
        self.highest_generation = 0

    def _send(self, event, client=None):
        ticket = self.h.send(event)
        self.issued.add(ticket)
        if client is not None:
            self.joins[ticket] = client
        self._learn()

    def _learn(self):
        """Clients take the member ids and generations their JoinGroup answers carry."""
        for ticket, client in list(self.joins.items()):
            result = self.h.answers.get(ticket)
            if result is None:
                continue
            del self.joins[ticket]
            if result.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
                self.member_id[client] = result.member_id
                self.generation[client] = result.generation
            elif result.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.member_id[client] = ""

    @rule(client=st.sampled_from(CLIENTS), v4=st.booleans(),
          protocols=st.sampled_from(PROTOCOLS), session=st.sampled_from([0, 6000, 10_000]),
          rebalance=st.sampled_from([-1, 0, 20_000]))
    def join(self, client, v4, protocols, session, rebalance):
        self._send(dataclasses.replace(
            join(self.member_id[client], client, protocols, session, rebalance, v4),
            group_instance_id=INSTANCE.get(client)), client)

    @rule(protocols=st.sampled_from(PROTOCOLS), skip=st.booleans())
    def static_member_restarts(self, protocols, skip):
        """The static member comes back without its member id; it still remembers the old
        one in requests that race with the restart."""
        stale = self.member_id["s"]
        self._send(dataclasses.replace(join("", "s", protocols), group_instance_id="inst-s",
                                       supports_skipping_assignment=skip), "s")
        if stale:
            self._send(Heartbeat(stale, self.generation["s"], "inst-s"))

    @rule(client=st.sampled_from(CLIENTS), assign=st.booleans())
    def sync(self, client, assign):
        given = tuple((m, client.encode()) for m in self.member_id.values() if m) if assign else ()
        self._send(Sync(self.member_id[client], self.generation[client], given,
                        INSTANCE.get(client)))

    @rule()
    def everyone_syncs(self):
        for client in CLIENTS:
            if self.member_id[client]:
                self.sync(client, assign=True)

    @rule(client=st.sampled_from(CLIENTS), stale=st.booleans())
    def heartbeat(self, client, stale):
        self._send(Heartbeat(self.member_id[client], self.generation[client] - stale,
                             INSTANCE.get(client)))

    @rule(client=st.sampled_from(CLIENTS))
    def leave(self, client):
        self._send(Leave(self.member_id[client], INSTANCE.get(client)))
        self.member_id[client] = ""

    @rule(client=st.sampled_from(CLIENTS), simple=st.booleans())
    def commit(self, client, simple):
        self._send(Commit(self.member_id[client], -1 if simple else self.generation[client],
                          INSTANCE.get(client)))

    @rule(ms=st.one_of(st.integers(0, 2000), st.integers(0, 40_000)))
    def advance(self, ms):
        self.h.advance(ms)
        self._learn()
        deadline = self.h.machine.next_deadline()
        assert deadline is None or deadline > self.h.now, "expire left a deadline behind"

    @invariant()
    def generation_never_decreases(self):
        assert self.h.machine.generation >= self.highest_generation
        self.highest_generation = self.h.machine.generation

    @invariant()
    def every_request_is_answered_or_held_exactly_once(self):
        waiting = self.h.machine.waiting_tickets()
        assert len(waiting) == len(set(waiting)), "a request is held twice"
        assert set(waiting) == self.issued - set(self.h.answers)

    @invariant()
    def the_state_matches_the_members(self):
        m = self.h.machine
        members = {s.member_id for s in m.members()}
        assert (m.state is GroupState.EMPTY) == (not members)
        if m.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert m.leader in members
        if m.state is GroupState.PREPARING_REBALANCE:
            assert m.next_deadline() is not None
        if m.state is GroupState.STABLE:
            assert all(x.assignment is not None for x in m._members.values())
        if m.state is not GroupState.COMPLETING_REBALANCE:
            assert all(not x.sync_tickets for x in m._members.values())

    @invariant()
    def each_instance_has_one_current_member(self):
        m = self.h.machine
        static = {x.group_instance_id: x.member_id for x in m._members.values()
                  if x.group_instance_id is not None}
        assert m._static == static
        assert sum(1 for x in m._members.values() if x.group_instance_id == "inst-s") <= 1

    def teardown(self):
        for _ in range(10):  # silent clients: sessions and rebalances time out
            self.h.advance(1_000_000)
        assert self.h.machine.state is GroupState.EMPTY
        assert self.issued == set(self.h.answers)


GroupMachineUnderLoad.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                                   deadline=None)
TestGroupMachineUnderLoad = GroupMachineUnderLoad.TestCase
