"""kqlite/db/transaction_rules.py: one test per branch of its three tables."""

from kqlite.db.transaction_rules import (MAX_EPOCH, NEW_PRODUCER_ID, Action, bump, fenced,
                                         recovery_plans)
from kqlite.format.transaction_records import TransactionLogValue, TransactionStatus as S

PID = 42


def value(status, epoch=3, pid=PID, partitions=(("a", (0, 1)),)):
    parts = None if status is S.EMPTY else () if status in (
        S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else partitions
    return TransactionLogValue(pid, epoch, 60000, status, parts, 10, 5)


# -- bump ---------------------------------------------------------------------------------

def test_bump_without_a_record_starts_at_epoch_0():
    assert bump(None, PID) == (PID, 0)


def test_bump_of_another_producers_record_starts_at_epoch_0():
    assert bump(value(S.COMPLETE_COMMIT, pid=7), PID) == (PID, 0)


def test_bump_of_an_exhausted_epoch_needs_a_new_producer_id():
    assert bump(value(S.COMPLETE_COMMIT, epoch=MAX_EPOCH - 1), PID) is NEW_PRODUCER_ID


def test_bump_adds_one_to_the_epoch():
    assert bump(value(S.COMPLETE_ABORT, epoch=3), PID) == (PID, 4)


# -- fenced -------------------------------------------------------------------------------

def test_no_record_is_owned():
    assert not fenced(None, PID, 0)


def test_another_epoch_or_producer_is_fenced():
    assert fenced(value(S.PREPARE_ABORT, epoch=4), PID, 3)
    assert fenced(value(S.ONGOING, pid=7), PID, 3)


def test_same_producer_and_epoch_decided_by_someone_else_is_fenced():
    assert fenced(value(S.COMPLETE_COMMIT, epoch=3), PID, 3)
    assert fenced(value(S.PREPARE_ABORT, epoch=3), PID, 3)


def test_same_producer_and_epoch_still_ongoing_is_owned():
    assert not fenced(value(S.ONGOING, epoch=3), PID, 3)


# -- recovery_plans -----------------------------------------------------------------------

def test_a_proven_prepare_commit_is_finished_at_its_epoch():
    (plan,) = recovery_plans(value(S.PREPARE_COMMIT), PID, {("a", 0): 3}, frozenset({3}))
    assert plan.action is Action.COMMIT and plan.epoch == 3 and not plan.prepare
    assert plan.partitions == {("a", 0), ("a", 1)} and plan.complete


def test_a_prepare_commit_whose_records_are_not_all_there_is_aborted_as_ongoing():
    (plan,) = recovery_plans(value(S.PREPARE_COMMIT), PID, {("a", 0): 3}, frozenset({1}))
    assert (plan.action, plan.epoch, plan.prepare) == (Action.ABORT, 4, True)
    assert plan.partitions == {("a", 0), ("a", 1)}


def test_prepare_abort_is_finished_at_its_epoch():
    (plan,) = recovery_plans(value(S.PREPARE_ABORT), PID, {})
    assert (plan.action, plan.epoch, plan.prepare) == (Action.ABORT, 3, False)


def test_ongoing_is_aborted_with_a_bumped_epoch_over_its_and_hanging_partitions():
    (plan,) = recovery_plans(value(S.ONGOING), PID, {("b", 0): 3})
    assert (plan.action, plan.epoch, plan.prepare) == (Action.ABORT, 4, True)
    assert plan.partitions == {("a", 0), ("a", 1), ("b", 0)}


def test_a_hanging_partition_of_a_committed_epoch_gets_its_commit_marker_first():
    late, ongoing = recovery_plans(value(S.ONGOING, epoch=3), PID,
                                   {("c", 0): 2, ("a", 0): 3}, frozenset({2}))
    assert (late.action, late.epoch, late.partitions) == (Action.COMMIT, 2, {("c", 0)})
    assert not late.prepare and not late.complete
    assert ongoing.action is Action.ABORT and ("c", 0) not in ongoing.partitions


def test_a_complete_commit_whose_markers_were_lost_is_committed_again():
    (plan,) = recovery_plans(value(S.COMPLETE_COMMIT, epoch=2), PID, {("a", 0): 2},
                             frozenset({0, 2}))
    assert (plan.action, plan.epoch, plan.complete) == (Action.COMMIT, 2, False)


def test_hanging_partitions_no_record_explains_are_aborted_above_every_epoch():
    (plan,) = recovery_plans(value(S.COMPLETE_COMMIT, epoch=3), PID, {("a", 0): 6})
    assert (plan.action, plan.producer_id, plan.epoch) == (Action.ABORT, PID, 6)
    assert plan.partitions == {("a", 0)} and plan.prepare
    (plan,) = recovery_plans(None, PID, {("a", 0): 0})
    assert (plan.action, plan.epoch) == (Action.ABORT, 0)


def test_after_a_prepare_commit_a_newer_hanging_epoch_is_aborted_above_it():
    commit, abort = recovery_plans(value(S.PREPARE_COMMIT, epoch=0), PID, {("a", 0): 2},
                                   frozenset({0}))
    assert (commit.action, commit.epoch) == (Action.COMMIT, 0)
    assert (abort.action, abort.epoch, abort.partitions) == (Action.ABORT, 2, {("a", 0)})


def test_nothing_open_and_nothing_hanging_is_left_alone():
    for v in (None, value(S.EMPTY), value(S.COMPLETE_COMMIT), value(S.COMPLETE_ABORT)):
        assert recovery_plans(v, PID, {}) == []
