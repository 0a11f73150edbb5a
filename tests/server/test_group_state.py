"""The group state machine (kqlite.server.coordinator.group.state_machine), cell by cell of
its transition table.

No sockets, no event loop, no sleeps: a :class:`Harness` feeds events with a fake
clock it advances by hand and records every reply by ticket. Each test that
exercises a cell of ``TRANSITIONS`` says so with ``@cells(...)``, and
``test_every_cell_of_the_table_is_exercised`` checks that together they cover the
whole table. Expected outcomes are written out from Kafka's GroupCoordinator, never
read back from the table.
"""

import itertools

import pytest

from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.group.events import (Commit, Delete, Heartbeat, Join,
                                                    JoinResult, Leave, Sync, SyncResult,
                                                    TxnCommit)
from kqlite.server.coordinator.group.state_machine import (TRANSITIONS, Event, GroupState,
                                                           GroupStateError, GroupStateMachine)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = GroupState
E = Event
DELAY = 3000          # group.initial.rebalance.delay.ms
SESSION = 10_000
REBALANCE = 30_000


def join(member_id="", client="c", protocols=(("range", b"R"),), session=SESSION,
         rebalance=REBALANCE, require_id=False, protocol_type="consumer"):
    return Join(member_id, client, "/10.0.0.1", session, rebalance, protocol_type,
                tuple(protocols), None, require_id)


class Harness:
    """A group, a fake clock and the replies received so far (ticket -> result)."""

    def __init__(self, delay=DELAY):
        ids = itertools.count()
        self.machine = GroupStateMachine("g", delay, lambda client: f"{client}-{next(ids)}")
        self.now = 0
        self.answers = {}
        self._tickets = itertools.count()

    def send(self, event):
        ticket = next(self._tickets)
        self._record(self.machine.handle(event, self.now, ticket))
        return ticket

    def ask(self, event):
        """Send a request that must be answered at once; its result."""
        ticket = self.send(event)
        assert ticket in self.answers, f"{event} was not answered"
        return self.answers[ticket]

    def advance(self, ms):
        self.now += ms
        self._record(self.machine.expire(self.now))

    def unload(self):
        self._record(self.machine.unload(self.now))

    def _record(self, replies):
        for reply in replies:
            assert reply.ticket not in self.answers, f"ticket {reply.ticket} answered twice"
            self.answers[reply.ticket] = reply.result

    @property
    def state(self):
        return self.machine.state


def preparing_first_generation():
    """Two members joined a new group; the initial delay still runs. (h, a ticket, b ticket)"""
    h = Harness()
    return h, h.send(join(client="a")), h.send(join(client="b"))


def completing():
    """Generation 1 formed of a-0 (leader) and b-1; nobody synced yet."""
    h, ta, tb = preparing_first_generation()
    h.advance(DELAY)
    assert h.state is COMPLETING and h.answers[ta].generation == 1
    return h


def stable():
    """Generation 1 with its assignments: a-0 got b"A", b-1 got b"B"."""
    h = completing()
    h.send(Sync("a-0", 1, (("a-0", b"A"), ("b-1", b"B"))))
    assert h.state is STABLE
    return h


def rebalancing():
    """Stable generation 1, then a-0 rejoined: preparing generation 2, b-1 not back yet."""
    h = stable()
    ticket = h.send(join("a-0", client="a"))
    assert h.state is PREPARING and ticket not in h.answers
    return h, ticket


COVERED = set()


def cells(*pairs):
    """Mark a test as exercising these (state, event) cells of the table."""
    def mark(test):
        COVERED.update(pairs)
        return test
    return mark


# -- The table itself --------------------------------------------------------------------------

REQUESTS = (E.JOIN_NEW, E.JOIN, E.SYNC, E.HEARTBEAT, E.LEAVE, E.COMMIT, E.SIMPLE_COMMIT,
            E.DELETE)


def test_every_state_answers_every_request():
    for state, row in TRANSITIONS.items():
        assert set(REQUESTS) <= set(row), state


def test_every_action_named_by_the_table_exists():
    for state, row in TRANSITIONS.items():
        for event, rule in row.items():
            if rule.action is not None:
                assert callable(getattr(GroupStateMachine, "_" + rule.action, None)), \
                    (state, event, rule.action)


def test_an_event_with_no_rule_is_a_bug_with_a_clear_message():
    h = Harness()
    with pytest.raises(GroupStateError, match="no rule for LEADER_SYNC .* in state Empty"):
        h.machine._dispatch(E.LEADER_SYNC)


def test_every_cell_of_the_table_is_exercised():
    import test_static_membership  # noqa: F401  (its tests mark the static-membership cells)
    table = {(state, event) for state, row in TRANSITIONS.items() for event in row}
    assert table - COVERED == set(), "cells without a test"
    assert COVERED - table == set(), "tests claim cells the table does not have"


# -- Empty -------------------------------------------------------------------------------------

@cells((EMPTY, E.JOIN_NEW))
def test_v4_join_without_member_id_gets_member_id_required_and_a_pending_id():
    h = Harness()
    result = h.ask(join(client="rdkafka", require_id=True))
    assert result == JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id="rdkafka-0")
    assert h.state is EMPTY
    assert h.machine.pending_member_ids() == ("rdkafka-0",)
    assert h.machine.members() == ()


@cells((EMPTY, E.JOIN))
def test_first_join_starts_the_first_rebalance_with_the_initial_delay():
    h = Harness()
    h.ask(join(client="a", require_id=True))
    ticket = h.send(join("a-0", client="a", require_id=True))
    assert h.state is PREPARING
    assert ticket not in h.answers
    assert h.machine.next_deadline() == DELAY
    h.advance(DELAY - 1)
    assert ticket not in h.answers
    h.advance(1)
    assert h.answers[ticket] == JoinResult(
        ErrorCode.NONE, "a-0", 1, "consumer", "range", "a-0",
        h.answers[ticket].members)
    assert [m.member_id for m in h.answers[ticket].members] == ["a-0"]
    assert h.state is COMPLETING


def test_join_before_v4_gets_an_id_and_joins_at_once():
    h = Harness()
    ticket = h.send(join(client=""))
    assert h.state is PREPARING
    assert [m.member_id for m in h.machine.members()] == ["-0"]
    assert h.machine.pending_member_ids() == ()
    h.advance(DELAY)
    assert h.answers[ticket].member_id == "-0"


def test_join_with_an_id_the_group_never_gave_is_unknown_member():
    h = Harness()
    assert h.ask(join("ghost")) == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.state is EMPTY


@cells((EMPTY, E.SYNC), (EMPTY, E.HEARTBEAT), (EMPTY, E.COMMIT))
def test_member_requests_to_an_empty_group_are_unknown_member():
    h = Harness()
    h.ask(join(client="p", require_id=True))  # a pending id is not a member yet
    assert h.ask(Sync("p-0", 0)) == SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.ask(Heartbeat("p-0", 0)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Commit("p-0", 0)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.state is EMPTY


@cells((EMPTY, E.LEAVE))
def test_leave_of_a_pending_member_forgets_it_and_of_a_stranger_is_unknown_member():
    h = Harness()
    h.ask(join(client="p", require_id=True))
    assert h.ask(Leave("p-0")) == ErrorCode.NONE
    assert h.machine.pending_member_ids() == ()
    assert h.ask(Leave("p-0")) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Join("p-0", "p", "h", SESSION, REBALANCE, "consumer", (("range", b""),))) \
        == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.state is EMPTY


@cells((EMPTY, E.SIMPLE_COMMIT))
def test_simple_commit_to_an_empty_group_is_allowed():
    h = Harness()
    assert h.ask(Commit("", -1)) == ErrorCode.NONE


@cells((EMPTY, E.UNLOAD), (DEAD, E.JOIN_NEW), (DEAD, E.JOIN), (DEAD, E.SYNC),
       (DEAD, E.HEARTBEAT), (DEAD, E.LEAVE), (DEAD, E.COMMIT), (DEAD, E.SIMPLE_COMMIT),
       (DEAD, E.DELETE), (DEAD, E.UNLOAD))
def test_a_dead_group_refuses_everything_with_coordinator_not_available():
    h = Harness()
    h.ask(join(client="p", require_id=True))
    h.unload()
    assert h.state is DEAD
    assert h.machine.pending_member_ids() == ()
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.ask(join()) == JoinResult(unavailable)
    assert h.ask(join("p-0")) == JoinResult(unavailable)
    assert h.ask(Sync("p-0", 0)) == SyncResult(unavailable)
    assert h.ask(Heartbeat("p-0", 0)) == unavailable
    assert h.ask(Leave("p-0")) == unavailable
    assert h.ask(Commit("p-0", 0)) == unavailable
    assert h.ask(Commit("", -1)) == unavailable
    assert h.ask(Delete()) == unavailable
    h.unload()
    assert h.state is DEAD and h.machine.next_deadline() is None


def test_pending_member_expires_after_its_session_timeout():
    h = Harness()
    h.ask(join(client="p", require_id=True, session=6000))
    assert h.machine.next_deadline() == 6000
    h.advance(5999)
    assert h.machine.pending_member_ids() == ("p-0",)
    h.advance(1)
    assert h.machine.pending_member_ids() == ()
    assert h.machine.next_deadline() is None
    assert h.ask(join("p-0")) == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)


# -- PreparingRebalance ------------------------------------------------------------------------

@cells((PREPARING, E.JOIN), (PREPARING, E.COMPLETE_JOIN))
def test_rebalance_completes_when_every_member_rejoined():
    h, ta = rebalancing()
    tb = h.send(join("b-1", client="b"))
    assert h.state is COMPLETING  # no initial delay outside the first rebalance
    leader, follower = h.answers[ta], h.answers[tb]
    assert (leader.error, leader.generation, leader.leader) == (ErrorCode.NONE, 2, "a-0")
    assert [m.member_id for m in leader.members] == ["a-0", "b-1"]
    assert (follower.generation, follower.leader, follower.members) == (2, "a-0", ())


@cells((PREPARING, E.JOIN_NEW))
def test_a_pending_member_holds_up_the_rebalance_until_it_joins():
    h, ta = rebalancing()
    assert h.ask(join(client="c", require_id=True)).member_id == "c-2"
    assert h.state is PREPARING
    tb = h.send(join("b-1", client="b"))
    assert tb not in h.answers and h.state is PREPARING
    tc = h.send(join("c-2", client="c"))
    assert {h.answers[t].generation for t in (ta, tb, tc)} == {2}
    assert [m.member_id for m in h.answers[ta].members] == ["a-0", "b-1", "c-2"]


@cells((PREPARING, E.SYNC))
def test_sync_while_preparing_is_rebalance_in_progress():
    h, _ = rebalancing()
    assert h.ask(Sync("b-1", 1)) == SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)


@cells((PREPARING, E.HEARTBEAT))
def test_heartbeat_while_preparing_is_rebalance_in_progress_and_keeps_the_member_alive():
    h, _ = rebalancing()
    h.advance(SESSION - 1)
    assert h.ask(Heartbeat("b-1", 1)) == ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(SESSION - 1)
    assert "b-1" in [m.member_id for m in h.machine.members()]


@cells((PREPARING, E.COMMIT))
def test_commit_while_preparing_is_accepted_as_in_kafka():
    h, _ = rebalancing()
    h.advance(SESSION - 1)
    assert h.ask(Commit("b-1", 1)) == ErrorCode.NONE
    h.advance(SESSION - 1)  # the commit counted as a sign of life
    assert "b-1" in [m.member_id for m in h.machine.members()]


@cells((PREPARING, E.SIMPLE_COMMIT), (COMPLETING, E.SIMPLE_COMMIT), (STABLE, E.SIMPLE_COMMIT))
def test_simple_commit_to_a_group_with_members_is_refused_as_kafka_refuses_it():
    # Kafka's validateOffsetCommit: only members may commit to a group that has some; a
    # member gets ILLEGAL_GENERATION for generation -1.
    h, _ = rebalancing()
    assert h.ask(Commit("", -1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Commit("b-1", -1)) == ErrorCode.ILLEGAL_GENERATION
    assert h.ask(Commit("zz", -1)) == ErrorCode.UNKNOWN_MEMBER_ID
    h = completing()
    assert h.ask(Commit("", -1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Commit("a-0", -1)) == ErrorCode.ILLEGAL_GENERATION
    h = stable()
    assert h.ask(Commit("", -1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Commit("b-1", -1)) == ErrorCode.ILLEGAL_GENERATION


@cells((PREPARING, E.LEAVE), (PREPARING, E.MEMBER_REMOVED))
def test_the_last_silent_member_leaving_completes_the_rebalance():
    h, ta = rebalancing()
    assert h.ask(Leave("b-1")) == ErrorCode.NONE
    assert h.state is COMPLETING
    assert h.answers[ta].generation == 2
    assert [m.member_id for m in h.answers[ta].members] == ["a-0"]


def test_a_member_leaving_while_its_join_waits_gets_its_join_answered_unknown_member():
    h, ta = rebalancing()
    assert h.ask(Leave("a-0")) == ErrorCode.NONE
    assert h.answers[ta] == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.state is PREPARING  # b-1 still has to rejoin
    tb = h.send(join("b-1", client="b"))
    assert (h.answers[tb].generation, h.answers[tb].leader) == (2, "b-1")


@cells((PREPARING, E.LAST_MEMBER_REMOVED))
def test_the_last_member_leaving_a_rebalance_empties_the_group():
    h, ta, tb = preparing_first_generation()
    assert h.ask(Leave("a-0")) == ErrorCode.NONE
    assert h.state is PREPARING
    assert h.ask(Leave("b-1")) == ErrorCode.NONE
    assert h.state is EMPTY
    assert h.answers[tb] == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.machine.generation == 1
    assert h.machine.next_deadline() is None


def keep_alive_until(h, member_id, generation, until):
    """Heartbeat for ``member_id`` every 5 s until just before ``until``."""
    while h.now + 5000 < until:
        h.advance(5000)
        h.ask(Heartbeat(member_id, generation))
    h.advance(until - 1 - h.now)


@cells((PREPARING, E.REBALANCE_TIMEOUT))
def test_rebalance_timeout_drops_the_members_that_did_not_rejoin():
    h, ta = rebalancing()
    deadline = h.now + REBALANCE
    keep_alive_until(h, "b-1", 1, deadline)  # alive, but it never rejoins
    assert ta not in h.answers and h.state is PREPARING
    h.advance(1)
    assert h.state is COMPLETING
    assert h.answers[ta].generation == 2
    assert [m.member_id for m in h.machine.members()] == ["a-0"]
    assert h.ask(Heartbeat("b-1", 2)) == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_forgets_ids_reserved_but_never_used():
    h, ta = rebalancing()
    assert h.ask(join(client="c", require_id=True, session=60_000)).member_id == "c-2"
    h.send(join("b-1", client="b"))
    assert ta not in h.answers  # c-2 is awaited
    h.advance(REBALANCE)
    assert h.answers[ta].generation == 2
    assert h.machine.pending_member_ids() == ()
    assert h.ask(join("c-2", client="c")) == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)


def test_rebalance_timeout_is_the_largest_members():
    h = Harness()
    h.send(join(client="a", rebalance=12_000))
    h.send(join(client="b", rebalance=45_000))
    h.advance(DELAY)
    h.send(Sync("a-0", 1))
    ta = h.send(join("a-0", client="a", rebalance=12_000))
    deadline = h.now + 45_000
    keep_alive_until(h, "b-1", 1, deadline)
    assert ta not in h.answers
    h.advance(1)
    assert h.answers[ta].generation == 2


def test_without_a_rebalance_timeout_the_session_timeout_is_the_rebalance_timeout():
    h = Harness()
    h.send(join(client="a", rebalance=-1, session=20_000))  # JoinGroup v0
    h.send(join(client="b", rebalance=-1, session=20_000))
    h.advance(DELAY)
    h.send(Sync("a-0", 1))
    ta = h.send(join("a-0", client="a", rebalance=-1, session=20_000))
    deadline = h.now + 20_000
    keep_alive_until(h, "b-1", 1, deadline)
    assert ta not in h.answers
    h.advance(1)
    assert h.answers[ta].generation == 2


def test_rebalance_timeout_with_nobody_rejoined_empties_the_group():
    h = stable()
    h.ask(Leave("b-1"))
    assert h.state is PREPARING
    deadline = h.now + REBALANCE
    keep_alive_until(h, "a-0", 1, deadline)  # heartbeats, never rejoins
    h.advance(1)
    assert h.state is EMPTY
    assert h.machine.generation == 2
    assert h.machine.members() == ()


@cells((PREPARING, E.UNLOAD))
def test_unload_while_preparing_answers_waiting_joins_not_coordinator():
    h, ta = rebalancing()
    h.unload()
    assert h.answers[ta] == JoinResult(ErrorCode.NOT_COORDINATOR, "a-0")
    assert h.state is DEAD


def test_a_second_join_of_the_same_member_supersedes_the_first():
    h, ta = rebalancing()
    again = h.send(join("a-0", client="a"))
    assert h.answers[ta] == JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, "a-0")
    h.send(join("b-1", client="b"))
    assert h.answers[again].generation == 2


# -- CompletingRebalance -----------------------------------------------------------------------

@cells((COMPLETING, E.JOIN_NEW))
def test_v4_join_while_completing_reserves_an_id_without_rebalancing():
    h = completing()
    assert h.ask(join(client="c", require_id=True)).error == ErrorCode.MEMBER_ID_REQUIRED
    assert h.state is COMPLETING


@cells((COMPLETING, E.JOIN))
def test_join_while_completing_restarts_the_rebalance_and_voids_waiting_syncs():
    h = completing()
    tb = h.send(Sync("b-1", 1))
    assert tb not in h.answers
    h.send(join("b-1", client="b"))
    assert h.state is PREPARING
    assert h.answers[tb] == SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, "consumer", "range")


@cells((COMPLETING, E.SYNC), (COMPLETING, E.LEADER_SYNC))
def test_followers_wait_for_the_leaders_sync_and_missing_assignments_are_empty():
    h = completing()
    h.send(join(client="c", require_id=True))
    tb = h.send(Sync("b-1", 1))
    assert tb not in h.answers
    ta = h.send(Sync("a-0", 1, (("a-0", b"A"),)))
    assert h.state is STABLE
    assert h.answers[ta] == SyncResult(ErrorCode.NONE, "consumer", "range", b"A")
    assert h.answers[tb] == SyncResult(ErrorCode.NONE, "consumer", "range", b"")


@cells((COMPLETING, E.HEARTBEAT))
def test_heartbeat_while_completing_is_fine():
    h = completing()
    assert h.ask(Heartbeat("b-1", 1)) == ErrorCode.NONE


@cells((COMPLETING, E.COMMIT))
def test_commit_while_completing_is_rebalance_in_progress():
    h = completing()
    assert h.ask(Commit("b-1", 1)) == ErrorCode.REBALANCE_IN_PROGRESS


@cells((COMPLETING, E.LEAVE), (COMPLETING, E.MEMBER_REMOVED))
def test_leave_while_completing_restarts_the_rebalance():
    h = completing()
    ta = h.send(Sync("a-0", 0))  # wrong generation: refused, not kept
    assert h.answers[ta] == SyncResult(ErrorCode.ILLEGAL_GENERATION)
    tb = h.send(Sync("b-1", 1))
    assert h.ask(Leave("a-0")) == ErrorCode.NONE
    assert h.state is PREPARING
    assert h.answers[tb].error == ErrorCode.REBALANCE_IN_PROGRESS
    tb = h.send(join("b-1", client="b"))
    assert h.answers[tb].leader == "b-1"  # the leader left: the first member left leads


@cells((COMPLETING, E.LAST_MEMBER_REMOVED))
def test_every_member_gone_while_completing_empties_the_group():
    h = completing()
    h.ask(Leave("a-0"))
    h.send(join("b-1", client="b"))
    assert h.state is COMPLETING and h.machine.generation == 2
    h.ask(Leave("b-1"))
    assert h.state is EMPTY and h.machine.generation == 3


def test_session_expiry_while_completing_removes_members_that_never_sync():
    h = completing()
    h.advance(SESSION - 1)
    tb = h.send(Sync("b-1", 1))  # b-1 is alive; a-0 (the leader) went silent
    h.advance(1)
    assert h.state is PREPARING
    assert [m.member_id for m in h.machine.members()] == ["b-1"]
    assert h.answers[tb].error == ErrorCode.REBALANCE_IN_PROGRESS


@cells((COMPLETING, E.UNLOAD))
def test_unload_while_completing_answers_waiting_syncs_not_coordinator():
    h = completing()
    tb = h.send(Sync("b-1", 1))
    h.unload()
    assert h.answers[tb] == SyncResult(ErrorCode.NOT_COORDINATOR)


# -- Stable ------------------------------------------------------------------------------------

@cells((STABLE, E.JOIN_NEW))
def test_v4_join_to_a_stable_group_reserves_an_id_without_rebalancing():
    h = stable()
    assert h.ask(join(client="c", require_id=True)).member_id == "c-2"
    assert h.state is STABLE


@cells((STABLE, E.JOIN))
def test_a_new_member_joining_a_stable_group_starts_a_rebalance():
    h = stable()
    tc = h.send(join(client="c"))
    assert h.state is PREPARING
    ta, tb = h.send(join("a-0", client="a")), h.send(join("b-1", client="b"))
    assert [h.answers[t].generation for t in (ta, tb, tc)] == [2, 2, 2]


@cells((STABLE, E.SYNC))
def test_sync_in_a_stable_group_returns_the_members_assignment():
    h = stable()
    assert h.ask(Sync("b-1", 1)) == SyncResult(ErrorCode.NONE, "consumer", "range", b"B")


@cells((STABLE, E.HEARTBEAT))
def test_heartbeats_keep_members_of_a_stable_group_alive():
    h = stable()
    for _ in range(5):
        h.advance(SESSION - 1)
        assert h.ask(Heartbeat("a-0", 1)) == ErrorCode.NONE
        assert h.ask(Heartbeat("b-1", 1)) == ErrorCode.NONE
    assert h.state is STABLE


@cells((STABLE, E.COMMIT))
def test_commit_of_the_current_generation_in_a_stable_group_is_accepted():
    h = stable()
    assert h.ask(Commit("a-0", 1)) == ErrorCode.NONE


@cells((STABLE, E.LEAVE), (STABLE, E.MEMBER_REMOVED))
def test_leave_from_a_stable_group_starts_a_rebalance():
    h = stable()
    assert h.ask(Leave("b-1")) == ErrorCode.NONE
    assert h.state is PREPARING
    assert h.ask(Heartbeat("a-0", 1)) == ErrorCode.REBALANCE_IN_PROGRESS


@cells((STABLE, E.LAST_MEMBER_REMOVED))
def test_session_expiry_of_every_member_empties_a_stable_group():
    h = stable()
    h.advance(SESSION)
    assert h.state is EMPTY
    assert h.machine.generation == 2
    assert h.machine.members() == ()
    assert h.machine.next_deadline() is None


@cells((STABLE, E.UNLOAD))
def test_unload_of_a_stable_group():
    h = stable()
    h.unload()
    assert h.state is DEAD and h.machine.members() == ()


def test_session_expiry_of_one_member_of_a_stable_group_rebalances_the_rest():
    h = stable()
    h.advance(SESSION - 1)
    h.ask(Heartbeat("a-0", 1))
    h.advance(1)
    assert h.state is PREPARING
    assert [m.member_id for m in h.machine.members()] == ["a-0"]
    ta = h.send(join("a-0", client="a"))
    assert h.answers[ta].generation == 2


# -- Checks that precede the table -------------------------------------------------------------

@pytest.mark.parametrize("make", [rebalancing, completing, stable], ids=lambda f: f.__name__)
def test_requests_from_strangers_are_unknown_member(make):
    h = make()
    h = h[0] if isinstance(h, tuple) else h
    assert h.ask(join("ghost")) == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.ask(Sync("ghost", 1)) == SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.ask(Heartbeat("ghost", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Commit("ghost", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Leave("ghost")) == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("make", [rebalancing, completing, stable], ids=lambda f: f.__name__)
def test_requests_naming_another_generation_are_illegal_generation(make):
    h = make()
    h = h[0] if isinstance(h, tuple) else h
    assert h.ask(Sync("b-1", 7)) == SyncResult(ErrorCode.ILLEGAL_GENERATION)
    assert h.ask(Heartbeat("b-1", 0)) == ErrorCode.ILLEGAL_GENERATION
    assert h.ask(Commit("b-1", 2)) == ErrorCode.ILLEGAL_GENERATION


def test_join_with_another_protocol_type_is_inconsistent():
    h = stable()
    assert h.ask(join(client="x", protocol_type="connect")) \
        == JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert h.state is STABLE


def test_join_sharing_no_protocol_with_the_others_is_inconsistent():
    h = stable()
    refused = join(client="x", protocols=(("roundrobin", b""),), require_id=True)
    assert h.ask(refused) == JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert h.ask(join("b-1", client="b", protocols=(("sticky", b""),))) \
        == JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert h.machine.pending_member_ids() == ()
    assert h.state is STABLE


def test_the_protocol_is_the_first_members_first_choice_that_everyone_supports():
    h = Harness()
    ta = h.send(join(client="a", protocols=(("sticky", b"s-a"), ("range", b"r-a"),
                                            ("roundrobin", b"rr-a"))))
    h.send(join(client="b", protocols=(("roundrobin", b"rr-b"), ("range", b"r-b"))))
    h.advance(DELAY)
    leader = h.answers[ta]
    assert leader.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in leader.members] \
        == [("a-0", b"r-a"), ("b-1", b"r-b")]
    assert [m.metadata for m in h.machine.members()] == [b"r-a", b"r-b"]


def test_a_member_may_change_its_own_protocols_when_others_share_one():
    h = stable()
    t = h.send(join("b-1", client="b", protocols=(("roundrobin", b""), ("range", b"x"))))
    assert t not in h.answers and h.state is PREPARING


def test_a_member_waiting_in_join_is_not_expired_by_its_session():
    h, ta = rebalancing()
    h.advance(SESSION + 1)  # b-1 silent: expired; a-0 waits in JoinGroup: kept
    assert h.answers[ta].generation == 2
    assert [m.member_id for m in h.machine.members()] == ["a-0"]


def test_next_deadline_tracks_sessions_pending_ids_and_the_rebalance():
    h = Harness()
    assert h.machine.next_deadline() is None
    h.ask(join(client="p", require_id=True, session=8000))
    assert h.machine.next_deadline() == 8000
    h = stable()
    assert h.machine.next_deadline() == DELAY + SESSION
    h.advance(1000)
    h.ask(Heartbeat("a-0", 1))
    assert h.machine.next_deadline() == DELAY + SESSION  # b-1 has not been heard since
    h.ask(Heartbeat("b-1", 1))
    assert h.machine.next_deadline() == h.now + SESSION
    h.send(join("a-0", client="a"))
    assert h.machine.next_deadline() == h.now + SESSION  # b-1's session before the timeout


def test_expire_leaves_no_deadline_in_the_past_even_with_zero_timeouts():
    h = Harness(delay=0)
    h.send(join(client="a", session=0, rebalance=0))
    h.send(join(client="b", session=0, rebalance=0))
    h.advance(0)
    assert h.state is EMPTY
    assert h.machine.next_deadline() is None


# -- TxnOffsetCommit (KIP-447): Kafka's validateOffsetCommit with isTransactional -------------

@cells((EMPTY, E.TXN_COMMIT), (EMPTY, E.TXN_SIMPLE_COMMIT))
def test_txn_commit_to_an_empty_group():
    h = Harness()
    assert h.ask(TxnCommit()) == ErrorCode.NONE
    assert h.ask(TxnCommit("nobody", -1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(TxnCommit("", 0)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(TxnCommit("", -1, "instance")) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.state is EMPTY


@cells((PREPARING, E.TXN_COMMIT), (PREPARING, E.TXN_SIMPLE_COMMIT),
       (COMPLETING, E.TXN_COMMIT), (COMPLETING, E.TXN_SIMPLE_COMMIT),
       (STABLE, E.TXN_COMMIT), (STABLE, E.TXN_SIMPLE_COMMIT))
def test_txn_commit_checks_member_and_generation_in_any_state_and_touches_nothing():
    # Unlike OffsetCommit: a commit naming nobody passes a group with members, a member's
    # commit is not refused while the group rebalances, and it is no heartbeat.
    h, _ = rebalancing()
    assert h.ask(TxnCommit()) == ErrorCode.NONE
    assert h.ask(TxnCommit("b-1", 1)) == ErrorCode.NONE
    assert h.ask(TxnCommit("b-1", 2)) == ErrorCode.ILLEGAL_GENERATION
    assert h.ask(TxnCommit("zz", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    h.advance(REBALANCE)                 # b-1 never rejoined: the commit kept nobody alive
    assert "b-1" not in [m.member_id for m in h.machine.members()]
    h = completing()
    assert h.ask(TxnCommit("b-1", 1)) == ErrorCode.NONE
    assert h.ask(TxnCommit()) == ErrorCode.NONE
    h = stable()
    assert h.ask(TxnCommit("a-0", 1)) == ErrorCode.NONE
    assert h.ask(TxnCommit("a-0", -1)) == ErrorCode.ILLEGAL_GENERATION
    assert h.ask(TxnCommit()) == ErrorCode.NONE
    assert h.state is STABLE


@cells((DEAD, E.TXN_COMMIT), (DEAD, E.TXN_SIMPLE_COMMIT))
def test_txn_commit_to_a_dead_group_is_coordinator_not_available():
    h = Harness()
    h.unload()
    assert h.ask(TxnCommit("m", 1)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.ask(TxnCommit()) == ErrorCode.COORDINATOR_NOT_AVAILABLE
