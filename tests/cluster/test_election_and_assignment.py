"""The controller's pure decisions: Kafka's replica assignment and leader election rules."""

import random

import pytest
from hypothesis import given, strategies as st

from kqlite.cluster.rules import election
from kqlite.cluster.rules.assignment import (InvalidReplicaAssignmentError,
                                             InvalidReplicationFactorError, assign_replicas,
                                             check_assignment)
from kqlite.cluster.rules.partition_state import NO_LEADER, PartitionState


def test_assignment_matches_kafkas_fixed_start_vector():
    # Kafka's AdminRackAwareTest/AdminZkClientTest expectation for brokers 0-4, RF 3.
    expected = {0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
                5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2)}
    assert assign_replicas(10, 3, [4, 2, 0, 3, 1], start_index=0) == expected


def test_added_partitions_continue_the_leader_rotation():
    # As Kafka's createPartitions: numbering and leaders continue from the existing
    # partitions (the follower shift restarts, as it does in Kafka).
    whole = assign_replicas(10, 3, range(5), start_index=0)
    tail = assign_replicas(4, 3, range(5), start_index=0, first_partition=6)
    assert sorted(tail) == [6, 7, 8, 9]
    assert [tail[p][0] for p in tail] == [whole[p][0] for p in range(6, 10)]
    assert tail[6] == (1, 2, 3)


def test_too_few_brokers_is_invalid_replication_factor():
    with pytest.raises(InvalidReplicationFactorError, match="larger than the number"):
        assign_replicas(1, 3, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 0, [1, 2])


@given(st.integers(1, 60), st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**32))
def test_assignment_spreads_leaders_and_never_repeats_a_broker(partitions, rf, nbrokers, seed):
    if rf > nbrokers:
        return
    brokers = list(range(100, 100 + nbrokers))
    a = assign_replicas(partitions, rf, brokers, rng=random.Random(seed))
    assert sorted(a) == list(range(partitions))
    for replicas in a.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = [r[0] for r in a.values()]
    counts = [leaders.count(b) for b in brokers]
    assert max(counts) - min(counts) <= 1     # round-robin leaders


def test_explicit_assignments_are_validated():
    check_assignment({0: (1, 2), 1: (2, 1)}, {1, 2})
    for bad in ({}, {1: (1,)}, {0: (1, 1)}, {0: (1,), 1: (1, 2)}, {0: (9,)}):
        with pytest.raises(InvalidReplicaAssignmentError):
            check_assignment(bad, {1, 2})


def test_new_partition_leader_is_the_first_live_replica():
    assert election.initial_state((3, 1, 2), {1, 2}, 7) == PartitionState(1, 0, (1, 2), 7)
    assert election.initial_state((3,), {1, 2}, 7) is None


def test_offline_election_picks_first_live_isr_member_in_assignment_order():
    state = PartitionState(1, 4, (1, 2, 3), 1, partition_epoch=9)
    new = election.elect_offline((1, 2, 3), state, {2, 3}, 2)
    assert new == PartitionState(2, 5, (2, 3), 2, False, 9)


def test_unclean_election_only_when_enabled_and_marks_recovery():
    state = PartitionState(NO_LEADER, 6, (1,), 1)
    assert election.elect_offline((1, 2, 3), state, {2, 3}, 2) is None
    new = election.elect_offline((1, 2, 3), state, {2, 3}, 2, unclean=True)
    assert new.leader == 2 and new.isr == (2,) and new.recovering and new.leader_epoch == 7


def test_preferred_election_needs_the_preferred_replica_live_and_in_sync():
    state = PartitionState(2, 3, (1, 2), 1)
    assert election.elect_preferred((1, 2), state, {1, 2}, 1).leader == 1
    assert election.elect_preferred((1, 2), state, {2}, 1) is None
    assert election.elect_preferred((1, 2), state._replace(isr=(2,)), {1, 2}, 1) is None
    assert election.elect_preferred((2, 1), state, {1, 2}, 1) is None


def test_controlled_shutdown_moves_leadership_and_shrinks_isr():
    # Kafka's testControlledShutdown: RF 3 on 0,1,2; shutting down 2 gives ISR [0,1], leader 0.
    state = PartitionState(2, 0, (0, 1, 2), 1)
    new = election.elect_for_shutdown((2, 0, 1), state, {0, 1, 2}, {2}, 1)
    assert (new.leader, new.isr, new.leader_epoch) == (0, (0, 1), 1)
    last = PartitionState(2, 0, (2,), 1)
    assert election.elect_for_shutdown((2, 0, 1), last, {0, 1, 2}, {2}, 1) is None


def test_removing_replicas_keeps_the_last_one_standing():
    # Kafka's testLeaderAndIsrWhenEntireIsrOfflineAndUncleanLeaderElectionDisabled end state.
    state = PartitionState(0, 0, (0, 1), 1)
    s1 = election.remove_replica(state, 1, 1)
    assert (s1.leader, s1.isr, s1.leader_epoch) == (0, (0,), 1)
    s2 = election.remove_replica(s1, 0, 1)
    assert (s2.leader, s2.isr, s2.leader_epoch) == (NO_LEADER, (0,), 2)
    assert election.remove_replica(s2, 5, 1) is None


@given(st.lists(st.integers(0, 5), min_size=1, max_size=5, unique=True),
       st.sets(st.integers(0, 5)), st.sets(st.integers(0, 5)), st.booleans())
def test_elections_never_pick_a_dead_leader_and_always_bump_the_epoch(assignment, isr, live,
                                                                      unclean):
    isr = tuple(r for r in assignment if r in isr) or (assignment[0],)
    state = PartitionState(NO_LEADER, 3, isr, 1)
    new = election.elect_offline(tuple(assignment), state, live, 2, unclean=unclean)
    if new is None:
        assert not any(r in live and (unclean or r in isr) for r in assignment)
        return
    assert new.leader in live and new.leader in new.isr and new.leader_epoch == 4
    assert set(new.isr) <= set(assignment)
    if not new.recovering:
        assert new.leader in isr
