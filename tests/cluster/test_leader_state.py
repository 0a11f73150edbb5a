"""The leader's follower tracking, high watermark, ISR changes and acks=all: examples that
replay Kafka's own unit tests (IsrExpirationTest, PartitionTest) step by step, on a
fake clock."""

import pytest

from kqlite.cluster.rules.leader_state import (AlterAction, CommittedIsr, IsrCommit, LeaderState,
                                               PendingExpand, PendingShrink)
from kqlite.protocol import ErrorCode


class Clock:
    """Milliseconds that move only when the test says so."""

    def __init__(self, t=1_700_000_000_000):
        self.t = t

    def __call__(self):
        return self.t

    def sleep(self, ms):
        self.t += ms


def leader(clock, *, replicas=(0, 1), isr=(0, 1), leo=10, hw=0, epoch=5, partition_epoch=1,
           lag=30_000, **kw):
    """Broker 0 becomes leader at ``epoch`` with its log ending at ``leo`` (as Kafka's
    PartitionTest: ten records seeded at epoch 4, leader epoch 5, partition epoch 1)."""
    return LeaderState(0, replicas, isr, epoch, partition_epoch, leo, leo, hw,
                       lag_time_ms=lag, clock=clock, **kw)


# ---- IsrExpirationTest (replica.lag.time.max.ms = 100, leader log end 20) --------------

def isr_expiration_leader(clock):
    st = leader(clock, leo=20, hw=0, lag=100)
    st.on_follower_fetch(1, 0, 0, leader_end_offset=0)   # its setup: caught up at offset 0
    return st


def test_stuck_follower_leaves_the_isr_after_the_lag_time():
    clock = Clock()
    st = isr_expiration_leader(clock)
    st.on_follower_fetch(1, 19, 0)
    assert st.out_of_sync_replicas() == set()
    clock.sleep(150)
    assert st.out_of_sync_replicas() == {1}


def test_follower_that_never_fetches_leaves_the_isr():
    clock = Clock()
    st = leader(clock, leo=20, lag=100)
    clock.sleep(150)
    assert st.out_of_sync_replicas() == {1}


def test_slow_follower_leaves_and_counts_as_caught_up_once_it_reaches_the_end():
    clock = Clock()
    st = isr_expiration_leader(clock)
    st.on_follower_fetch(1, 18, 0)
    assert st.out_of_sync_replicas() == set()
    clock.sleep(75)
    st.on_follower_fetch(1, 19, 0)       # never reaches the end of the log
    assert st.out_of_sync_replicas() == set()
    clock.sleep(75)
    assert st.out_of_sync_replicas() == {1}
    st.on_follower_fetch(1, 20, 0)
    assert st.out_of_sync_replicas() == set()


def test_follower_that_keeps_fetching_but_falls_further_behind_leaves_the_isr():
    # Each fetch reaches neither the leader's end now nor the end at its previous fetch, so
    # no fetch counts as caught up, however often it comes.
    clock = Clock()
    st = isr_expiration_leader(clock)
    for offset, leader_end in ((1, 30), (2, 40), (3, 50)):
        clock.sleep(40)
        st.on_leader_append(leader_end)
        st.on_follower_fetch(1, offset, 0)
    assert st.out_of_sync_replicas() == {1}


def test_caught_up_follower_stays_in_sync_without_fetching():
    clock = Clock()
    st = isr_expiration_leader(clock)
    st.on_follower_fetch(1, 20, 0)
    clock.sleep(150)
    assert st.out_of_sync_replicas() == set()
    assert st.propose_shrink() is None


# ---- PartitionTest: catching up and the lastCaughtUpTimeMs rule ------------------------

def test_previous_fetch_that_reached_the_old_end_counts_as_caught_up():
    # testShouldNotShrinkIsrIfPreviousFetchIsCaughtUp
    clock = Clock()
    start = clock()
    st = leader(clock)
    f = st.followers[1]
    assert (f.last_caught_up_time, f.log_end_offset, f.log_start_offset) == (start, -1, -1)
    clock.sleep(5000)
    first_fetch = clock()
    st.on_follower_fetch(1, 5, 0)
    assert (f.last_caught_up_time, f.log_end_offset, st.high_watermark) == (start, 5, 5)
    clock.sleep(5001)
    st.on_leader_append(15)
    st.on_follower_fetch(1, 10, 0)
    assert (f.last_caught_up_time, f.log_end_offset, st.high_watermark) == (first_fetch, 10, 10)
    assert st.propose_shrink() is None
    assert st.isr == (0, 1)


def test_follower_at_the_log_end_is_not_shrunk_after_the_lag_time():
    # testShouldNotShrinkIsrIfFollowerCaughtUpToLogEnd
    clock = Clock()
    st = leader(clock)
    st.on_follower_fetch(1, 10, 0)
    assert st.followers[1].last_caught_up_time == clock()
    assert st.high_watermark == 10
    clock.sleep(30_001)
    assert st.propose_shrink() is None


def test_isr_expansion_waits_for_the_controller():
    # testIsrExpansion
    clock = Clock()
    st = leader(clock, isr=(0,))
    assert st.followers[1].last_caught_up_time < clock() - st.lag_time_ms
    outcome = st.on_follower_fetch(1, 3, 0)
    assert outcome.expand is None and st.isr == (0,)
    outcome = st.on_follower_fetch(1, 10, 0)
    assert outcome.expand.isr == (0, 1) and outcome.expand.kind == "expand"
    assert (outcome.expand.leader_epoch, outcome.expand.partition_epoch) == (5, 1)
    assert st.isr == (0,) and set(st.maximal_isr) == {0, 1}
    assert isinstance(st.state, PendingExpand)
    assert st.followers[1].last_caught_up_time == clock()
    result = st.on_alter_partition_result(outcome.expand, IsrCommit(5, (0, 1), 2))
    assert result.action is AlterAction.COMMITTED
    assert st.isr == (0, 1) and st.partition_epoch == 2 and st.state == CommittedIsr((0, 1))


def test_follower_joins_only_once_caught_up_into_the_current_leader_epoch():
    # testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch
    clock = Clock()
    st = LeaderState(0, (0, 1, 2), (0, 2), 8, 1, 0, 0, 0, clock=clock)
    st.on_leader_append(2)
    st.on_leader_append(5)
    assert st.high_watermark == 0
    st.on_follower_fetch(2, 0, 0)
    st.on_follower_fetch(2, 1, 0)
    assert st.high_watermark == 1
    # It becomes a follower, then leader again at epoch 10 with no new records: the new
    # epoch starts at its log end, 5.
    st = LeaderState(0, (0, 1, 2), (0, 2), 10, 1, 5, 5, 1, clock=clock)
    st.on_leader_append(7)
    for offset in (0, 1):
        assert st.on_follower_fetch(1, offset, 0).expand is None
    assert st.isr == (0, 2)
    outcome = st.on_follower_fetch(1, 5, 0)
    assert st.isr == (0, 2) and set(st.maximal_isr) == {0, 1, 2}
    assert set(outcome.expand.isr) == {0, 1, 2}


def test_failed_expansion_with_invalid_version_stays_pending_without_retry():
    # testIsrNotExpandedIfUpdateFails
    clock = Clock()
    st = leader(clock, isr=(0,))
    proposal = st.on_follower_fetch(1, 10, 0).expand
    result = st.on_alter_partition_result(proposal, ErrorCode.INVALID_UPDATE_VERSION)
    assert result.action is AlterAction.AWAIT_METADATA
    assert st.isr == (0,) and set(st.maximal_isr) == {0, 1}
    assert st.propose_expand(1) is None and st.propose_shrink() is None
    # The controller's next LeaderAndIsr ends the pending state.
    assert st.update_leadership((0, 1), (0,), 5, 3)
    assert st.state == CommittedIsr((0,)) and not st.state.in_flight


@pytest.mark.parametrize("error", [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA])
def test_refused_expansion_reverts_to_the_committed_isr(error):
    clock = Clock()
    st = leader(clock, isr=(0,))
    proposal = st.on_follower_fetch(1, 10, 0).expand
    assert st.on_alter_partition_result(proposal, error).action is AlterAction.REVERTED
    assert st.state == CommittedIsr((0,)) and st.maximal_isr == (0,)
    assert st.propose_expand(1) == proposal


@pytest.mark.parametrize("error", [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INVALID_REQUEST,
                                   ErrorCode.NEW_LEADER_ELECTED])
def test_fencing_errors_wait_for_new_metadata(error):
    clock = Clock()
    st = leader(clock, isr=(0,))
    proposal = st.on_follower_fetch(1, 10, 0).expand
    assert st.on_alter_partition_result(proposal, error).action is AlterAction.AWAIT_METADATA
    assert isinstance(st.state, PendingExpand)


def test_shrink_is_retried_on_other_errors_and_then_commits():
    # testRetryShrinkIsr
    clock = Clock()
    st = leader(clock)
    assert st.high_watermark == 0
    clock.sleep(st.lag_time_ms + 1)
    proposal = st.propose_shrink()
    assert proposal.isr == (0,) and proposal.kind == "shrink"
    assert isinstance(st.state, PendingShrink)
    assert st.isr == (0, 1) and st.maximal_isr == (0, 1)
    result = st.on_alter_partition_result(proposal, ErrorCode.NETWORK_EXCEPTION)
    assert result.action is AlterAction.RETRY
    assert st.partition_epoch == 1 and st.maximal_isr == (0, 1) and st.high_watermark == 0
    result = st.on_alter_partition_result(proposal, IsrCommit(5, (0,), 2))
    assert result == (AlterAction.COMMITTED, True)
    assert st.isr == (0,) and st.partition_epoch == 2 and st.high_watermark == 10


def test_unknown_error_codes_are_retried():
    clock = Clock()
    st = leader(clock)
    clock.sleep(st.lag_time_ms + 1)
    proposal = st.propose_shrink()
    assert st.on_alter_partition_result(proposal, 32767).action is AlterAction.RETRY


def test_answer_for_a_state_replaced_by_leader_and_isr_is_ignored():
    # testAlterIsrLeaderAndIsrRace
    clock = Clock()
    st = leader(clock)
    clock.sleep(st.lag_time_ms + 1)
    old = st.propose_shrink()
    assert st.state.in_flight
    assert st.update_leadership((0, 1), (0, 1), 5, 2)
    assert not st.state.in_flight and st.high_watermark == 0
    assert st.on_alter_partition_result(old, IsrCommit(5, (0,), 10)).action is AlterAction.IGNORED
    assert st.isr == (0, 1) and st.partition_epoch == 2
    assert st.propose_shrink() is not None


def test_commit_for_another_leader_epoch_or_older_partition_epoch_is_ignored():
    clock = Clock()
    st = leader(clock, partition_epoch=4)
    clock.sleep(st.lag_time_ms + 1)
    proposal = st.propose_shrink()
    for stale in (IsrCommit(6, (0,), 5), IsrCommit(5, (0,), 3)):
        assert st.on_alter_partition_result(proposal, stale).action is AlterAction.IGNORED
        assert isinstance(st.state, PendingShrink)
    # The controller found nothing to change (same state): the partition epoch stays.
    assert st.on_alter_partition_result(proposal, IsrCommit(5, (0,), 4)).action is AlterAction.COMMITTED


def test_success_must_be_a_commit():
    clock = Clock()
    st = leader(clock)
    clock.sleep(st.lag_time_ms + 1)
    proposal = st.propose_shrink()
    with pytest.raises(ValueError, match="IsrCommit"):
        st.on_alter_partition_result(proposal, ErrorCode.NONE)


def test_one_isr_change_in_flight_at_a_time():
    # testSingleInFlightAlterIsr: nothing else is proposed while a change is pending.
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0, 1))
    clock.sleep(st.lag_time_ms + 1)
    assert st.propose_shrink() is not None
    assert st.on_follower_fetch(2, 10, 0).expand is None
    assert st.out_of_sync_replicas() == set()


# ---- high watermark ------------------------------------------------------------------

def test_hw_is_held_back_by_a_caught_up_follower_outside_the_isr():
    # Partition.maybeIncrementLeaderHW: a caught-up follower may join, so it counts.
    clock = Clock()
    st = leader(clock, isr=(0,), leo=0)
    st.on_follower_fetch(1, 0, 0)
    assert st.isr == (0,) and st.state.in_flight
    st.on_alter_partition_result(st.state.proposal, ErrorCode.OPERATION_NOT_ATTEMPTED)
    assert st.is_caught_up(1)
    st.on_leader_append(10)
    assert st.high_watermark == 0
    clock.sleep(st.lag_time_ms + 1)
    assert not st.is_caught_up(1)
    assert st.advance_high_watermark()
    assert st.high_watermark == 10


def test_pending_expansion_holds_the_hw_back_even_once_the_follower_lags():
    # KIP-497: the maximal ISR counts the replica being added, caught up or not, so the
    # ISR the controller commits never misses a record below the HW.
    clock = Clock()
    st = leader(clock, isr=(0,))
    proposal = st.on_follower_fetch(1, 10, 0).expand
    clock.sleep(st.lag_time_ms + 1)
    st.on_leader_append(20)
    assert not st.is_caught_up(1)
    assert st.high_watermark == 10
    st.on_alter_partition_result(proposal, IsrCommit(5, (0, 1), 2))
    assert st.high_watermark == 10
    st.on_follower_fetch(1, 20, 0)
    assert st.high_watermark == 20


def test_hw_ignores_a_follower_that_is_not_eligible():
    clock = Clock()
    alive = {0}
    st = leader(clock, isr=(0,), leo=0, is_eligible=alive.__contains__)
    assert st.on_follower_fetch(1, 0, 0).expand is None
    st.on_leader_append(10)
    assert st.high_watermark == 10


def test_hw_does_not_advance_under_min_isr():
    # testHighWatermarkAdvanceShouldNotAdvanceWhenUnderMinISR (KAFKA-15583, Kafka 3.7+)
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0, 1), min_insync_replicas=3)
    assert st.under_min_isr and st.high_watermark == 0
    st.on_follower_fetch(1, 10, 0)
    assert st.high_watermark == 0
    proposal = st.on_follower_fetch(2, 10, 0).expand
    assert st.high_watermark == 0 and len(st.maximal_isr) == 3
    st.on_alter_partition_result(proposal, IsrCommit(5, (0, 1, 2), 2))
    assert not st.under_min_isr and st.high_watermark == 10


def test_min_isr_is_capped_at_the_replication_factor():
    clock = Clock()
    st = leader(clock, replicas=(0, 1), isr=(0, 1), min_insync_replicas=3)
    assert st.effective_min_isr() == 2 and not st.under_min_isr
    assert st.can_append(-1) == ErrorCode.NONE


def test_hw_never_goes_down_when_a_follower_reports_less():
    clock = Clock()
    st = leader(clock)
    st.on_follower_fetch(1, 10, 0)
    assert st.high_watermark == 10
    st.on_follower_fetch(1, 4, 0)
    assert st.high_watermark == 10


# ---- acks=all and min.insync.replicas (Partition.appendRecordsToLeader, DelayedProduce) --

def test_acks_all_is_refused_before_the_append_when_the_isr_is_too_small():
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0,), min_insync_replicas=2)
    assert st.can_append(-1) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert st.can_append(1) == ErrorCode.NONE and st.can_append(0) == ErrorCode.NONE
    assert st.can_append(-1, min_isr=1) == ErrorCode.NONE


def test_acks_all_completes_when_the_isr_has_the_batch():
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0, 1, 2), min_insync_replicas=2)
    st.on_follower_fetch(1, 10, 0)
    st.on_follower_fetch(2, 10, 0)
    st.on_leader_append(13)                   # a batch at offsets 10..12
    assert st.check_enough_replicas_reach_offset(13) == (False, ErrorCode.NONE)
    st.on_follower_fetch(1, 13, 0)
    assert st.check_enough_replicas_reach_offset(13) == (False, ErrorCode.NONE)
    st.on_follower_fetch(2, 13, 0)
    assert st.check_enough_replicas_reach_offset(13) == (True, ErrorCode.NONE)


def test_isr_shrinking_below_min_isr_after_the_append_answers_after_append():
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0, 1, 2), min_insync_replicas=2)
    st.on_follower_fetch(1, 10, 0)
    st.on_leader_append(13)
    st.on_follower_fetch(1, 13, 0)
    st.on_follower_fetch(2, 13, 0)
    st.on_leader_append(14)                   # followers at the log end would stay in sync
    clock.sleep(st.lag_time_ms + 1)
    proposal = st.propose_shrink()
    assert proposal.isr == (0,)
    st.on_alter_partition_result(proposal, IsrCommit(5, (0,), 2))
    assert st.check_enough_replicas_reach_offset(13) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_pending_expansion_counts_for_min_isr_after_the_append():
    # DelayedProduce compares min.insync.replicas with the maximal ISR.
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0, 1, 2), min_insync_replicas=2)
    st.on_leader_append(13)
    st.on_follower_fetch(1, 13, 0)
    st.on_follower_fetch(2, 13, 0)
    assert st.high_watermark == 13
    st.on_leader_append(14)
    clock.sleep(st.lag_time_ms + 1)
    st.on_alter_partition_result(st.propose_shrink(), IsrCommit(5, (0,), 2))
    assert st.on_follower_fetch(1, 14, 0).expand is not None
    assert len(st.isr) == 1 and len(st.maximal_isr) == 2
    assert st.check_enough_replicas_reach_offset(13) == (True, ErrorCode.NONE)


# ---- fetch checks (Partition.checkCurrentLeaderEpoch, followerReplicaOrThrow) ----------

def test_fetch_epoch_check():
    st = leader(Clock())
    assert st.fetch_epoch_check(4) == ErrorCode.FENCED_LEADER_EPOCH
    assert st.fetch_epoch_check(6) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert st.fetch_epoch_check(5) == ErrorCode.NONE
    assert st.fetch_epoch_check(-1) == ErrorCode.NONE
    assert st.fetch_epoch_check(None) == ErrorCode.NONE


def test_follower_fetch_from_an_unassigned_replica():
    st = leader(Clock())
    assert st.check_follower_fetch(1, 5) == ErrorCode.NONE
    assert st.check_follower_fetch(7, 5) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert st.check_follower_fetch(7, -1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert st.check_follower_fetch(0, None) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert st.check_follower_fetch(7, 4) == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KeyError, match="not a follower"):
        st.on_follower_fetch(7, 0, 0)


# ---- becoming leader again (Partition.makeLeader) --------------------------------------

def test_leader_and_isr_with_an_older_partition_epoch_is_ignored():
    # testIgnoreLeaderPartitionStateChangeWithOlderPartitionEpoch
    st = leader(Clock(), partition_epoch=3)
    assert not st.update_leadership((0, 1), (0,), 6, 2)
    assert (st.leader_epoch, st.isr) == (5, (0, 1))


def test_same_leader_epoch_keeps_the_followers_state():
    # testDoNotResetReplicaStateIfLeaderEpochIsNotBumped
    clock = Clock()
    st = leader(clock, isr=(0,), leo=0)
    st.on_follower_fetch(1, 0, 0)
    before = st.followers[1]
    clock.sleep(10)
    assert st.update_leadership((0, 1), (0,), 5, 2)
    assert st.followers[1] is before and before.last_caught_up_time == clock() - 10
    assert st.partition_epoch == 2 and st.leader_epoch_start_offset == 0


def test_new_leader_epoch_restarts_the_followers_clocks():
    clock = Clock()
    st = leader(clock, replicas=(0, 1, 2), isr=(0, 1))
    st.on_follower_fetch(1, 10, 0)
    st.on_leader_append(20)
    clock.sleep(60_000)
    assert st.update_leadership((0, 1, 2, 3), (0, 1), 6, 2)
    assert st.leader_epoch_start_offset == 20
    assert st.followers[1].last_caught_up_time == clock()
    assert st.followers[1].log_end_offset == 10
    assert st.followers[2].last_caught_up_time == float("-inf")
    assert st.followers[3].log_end_offset == -1
    assert st.propose_shrink() is None


def test_leader_cannot_be_outside_the_isr():
    with pytest.raises(ValueError, match="not in the ISR"):
        LeaderState(0, (0, 1), (1,), 0, 0, 0, 0, 0, clock=Clock())
    with pytest.raises(ValueError, match="not a subset"):
        LeaderState(0, (0, 1), (0, 2), 0, 0, 0, 0, 0, clock=Clock())
    st = leader(Clock())
    with pytest.raises(ValueError, match="not in the ISR"):
        st.update_leadership((0, 1), (1,), 6, 2)


def test_leader_log_never_shrinks():
    st = leader(Clock())
    with pytest.raises(ValueError, match="never shrinks"):
        st.on_leader_append(9)


# ---- the isr-expiration schedule -----------------------------------------------------

@pytest.mark.parametrize("phase", [0, 1, 7_500, 14_999])
def test_stuck_follower_leaves_between_one_and_one_and_a_half_lag_times(phase):
    # ReplicaManager runs maybeShrinkIsr every replica.lag.time.max.ms / 2, so "a follower
    # can lag ... up to 1.5x before it is removed" (KafkaConfig's documentation).
    clock = Clock()
    st = leader(clock, replicas=(0, 1), isr=(0, 1))
    st.on_follower_fetch(1, 10, 0)
    st.on_leader_append(11)
    stopped = clock()
    clock.sleep(phase)
    while st.propose_shrink() is None:
        clock.sleep(st.isr_expiration_interval_ms)
    assert st.lag_time_ms < clock() - stopped <= 1.5 * st.lag_time_ms
