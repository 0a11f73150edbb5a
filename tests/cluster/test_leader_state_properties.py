"""Properties of the leader's replication state under random traffic (hypothesis).

A leader and two followers on a fake clock: the leader appends (with acks 1 or all),
followers fetch at random moments and copy a random number of records, the periodic ISR
check runs at random times, the controller answers proposals with commits or any of the
errors Kafka handles, may send a new LeaderAndIsr, and brokers die and come back. The
test keeps its own truth (each replica's real log end, when each follower last asked
for the leader's whole log) and checks after every step that the HW never goes down
and never passes a record some ISR member lacks, that ISR changes are proposed only for
the replicas Kafka's rules allow, that acks=all completes only when the ISR has the
batch, and that the leader never leaves its ISR.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kqlite.cluster.rules.leader_state import AlterAction, IsrCommit, LeaderState
from kqlite.protocol import ErrorCode

LEADER = 0
FOLLOWERS = (1, 2)
REPLICAS = (LEADER,) + FOLLOWERS
LAG = 1000

REVERTING = [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA]
AWAITING = [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST]
RETRIED = [ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER]


class Clock:
    def __init__(self):
        self.t = 50_000

    def __call__(self):
        return self.t


class LeaderUnderTraffic(RuleBasedStateMachine):

    @initialize(leo=st.integers(0, 20), data=st.data(), min_isr=st.integers(1, 3),
                in_isr=st.sets(st.sampled_from(FOLLOWERS)))
    def become_leader(self, leo, data, min_isr, in_isr):
        self.clock = Clock()
        self.live = set(REPLICAS)
        isr = (LEADER,) + tuple(sorted(in_isr))
        # A follower's real log end: ISR members are at most at the leader's end.
        self.true_leo = {r: data.draw(st.integers(0, leo), label=f"leo{r}") for r in FOLLOWERS}
        hw = min([leo] + [self.true_leo[r] for r in in_isr])
        self.st = LeaderState(LEADER, REPLICAS, isr, 7, 3, leo, leo, hw, lag_time_ms=LAG,
                              clock=self.clock, min_insync_replicas=min_isr,
                              is_eligible=self.live.__contains__)
        self.leader_leo = leo
        self.controller_isr = isr             # what ZooKeeper holds
        self.partition_epoch = 3
        # When each follower last fetched with the leader's whole log, or was granted as
        # much by a new leader epoch: Kafka's caught-up time is never earlier.
        self.caught_up_at = {r: (self.clock() if r in isr else float("-inf")) for r in FOLLOWERS}
        self.last_fetch = dict.fromkeys(FOLLOWERS, float("-inf"))
        self.last_hw = self.st.high_watermark
        self.acks_all = []                    # required offsets of acks=all produces waiting

    # ---- traffic -------------------------------------------------------------------

    @rule(ms=st.integers(0, 2 * LAG))
    def time_passes(self, ms):
        self.clock.t += ms

    @rule(n=st.integers(1, 5), acks=st.sampled_from([1, -1]))
    def produce(self, n, acks):
        error = self.st.can_append(acks)
        if acks == -1 and len(self.st.isr) < min(self.st.min_insync_replicas, len(REPLICAS)):
            assert error == ErrorCode.NOT_ENOUGH_REPLICAS
            return
        assert error == ErrorCode.NONE
        self.leader_leo += n
        self.st.on_leader_append(self.leader_leo)
        if acks == -1:
            self.acks_all.append(self.leader_leo)

    @rule(r=st.sampled_from(FOLLOWERS), copied=st.integers(0, 6))
    def follower_fetches(self, r, copied):
        """A fetch at the follower's log end, then ``copied`` records reach it. A dead
        broker may still fetch (a zombie whose session expired) but must not join."""
        now = self.clock()
        offset = self.true_leo[r]
        hw_before = self.st.high_watermark
        if offset >= self.leader_leo:
            self.caught_up_at[r] = now
        self.last_fetch[r] = now
        outcome = self.st.on_follower_fetch(r, offset, 0)
        if outcome.expand is not None:
            # Kafka's isFollowerInSync: at the HW and inside the current leader epoch.
            assert r not in self.st.isr and r in self.live
            assert offset >= hw_before
            assert offset >= self.st.leader_epoch_start_offset
            assert outcome.expand.isr == self.st.isr + (r,)
        self.true_leo[r] = min(self.leader_leo, offset + copied)

    @rule()
    def isr_check(self):
        now = self.clock()
        in_flight = self.st.state.in_flight
        proposal = self.st.propose_shrink()
        stuck = {r for r in self.st.isr if r != LEADER
                 and max(self.caught_up_at[r], self.last_fetch[r]) < now - LAG
                 and self.st.followers[r].log_end_offset != self.leader_leo}
        if in_flight:
            assert proposal is None
            return
        dropped = set(self.st.isr) - set(proposal.isr) if proposal else set()
        # Only followers that have not been caught up for longer than the lag leave...
        for r in dropped:
            assert now - self.caught_up_at[r] > LAG
            assert self.st.followers[r].log_end_offset != self.leader_leo
        # ...and every stuck one does.
        assert stuck <= dropped

    @rule(data=st.data())
    def controller_answers(self, data):
        if not self.st.state.in_flight:
            return
        proposal = self.st.state.proposal
        kind = data.draw(st.sampled_from(["commit", "revert", "await", "retry", "stale"]))
        if kind == "commit":
            self.partition_epoch += 1
            self.controller_isr = proposal.isr
            outcome = self.st.on_alter_partition_result(
                proposal, IsrCommit(self.st.leader_epoch, proposal.isr, self.partition_epoch))
            assert outcome.action is AlterAction.COMMITTED
            assert self.st.isr == proposal.isr
        elif kind == "stale":
            outcome = self.st.on_alter_partition_result(
                proposal, IsrCommit(self.st.leader_epoch + 1, proposal.isr, self.partition_epoch + 1))
            assert outcome.action is AlterAction.IGNORED and self.st.state.in_flight
        else:
            errors = {"revert": REVERTING, "await": AWAITING, "retry": RETRIED}[kind]
            error = data.draw(st.sampled_from(errors))
            outcome = self.st.on_alter_partition_result(proposal, error)
            expected = {"revert": AlterAction.REVERTED, "await": AlterAction.AWAIT_METADATA,
                        "retry": AlterAction.RETRY}[kind]
            assert outcome.action is expected
            assert self.st.state.in_flight == (kind != "revert")
            assert self.st.isr == self.controller_isr

    @rule(bump=st.booleans(), drop=st.sampled_from((None,) + FOLLOWERS))
    def controller_sends_leader_and_isr(self, bump, drop):
        """New metadata: the ISR ZooKeeper holds, perhaps without a replica the controller
        saw go offline (which bumps the leader epoch, as election.remove_replica)."""
        isr = self.controller_isr
        if drop is not None and drop in isr:
            isr = tuple(r for r in isr if r != drop)
            bump = True
        self.partition_epoch += 1
        self.controller_isr = isr
        epoch = self.st.leader_epoch + (1 if bump else 0)
        assert self.st.update_leadership(REPLICAS, isr, epoch, self.partition_epoch)
        assert not self.st.state.in_flight and self.st.isr == isr
        if bump:
            assert self.st.leader_epoch_start_offset == self.leader_leo
            for r in FOLLOWERS:
                self.caught_up_at[r] = self.clock() if r in isr else float("-inf")
                self.last_fetch[r] = float("-inf")

    @rule(r=st.sampled_from(FOLLOWERS))
    def broker_dies_or_returns(self, r):
        self.live ^= {r}

    # ---- what must always hold -----------------------------------------------------

    @invariant()
    def hw_never_goes_down_nor_past_the_leader(self):
        hw = self.st.high_watermark
        assert self.last_hw <= hw <= self.leader_leo == self.st.log_end_offset
        self.last_hw = hw

    @invariant()
    def every_isr_member_has_every_record_below_the_hw(self):
        hw = self.st.high_watermark
        for r in set(self.st.isr) | set(self.st.maximal_isr):
            if r != LEADER:
                assert self.true_leo[r] >= hw, (r, self.true_leo, self.st)
                known = self.st.followers[r].log_end_offset
                assert known == -1 or known <= self.true_leo[r]

    @invariant()
    def the_leader_never_leaves_the_isr(self):
        assert LEADER in self.st.isr and LEADER in self.st.maximal_isr
        if self.st.state.in_flight:
            assert LEADER in self.st.state.proposal.isr
        assert set(self.st.maximal_isr) <= set(REPLICAS)

    @invariant()
    def acks_all_completes_only_when_the_isr_has_the_batch(self):
        waiting = []
        for required in self.acks_all:
            done, error = self.st.check_enough_replicas_reach_offset(required)
            if not done:
                assert error == ErrorCode.NONE
                waiting.append(required)
                continue
            for r in self.st.maximal_isr:
                if r != LEADER:
                    assert self.true_leo[r] >= required
            too_few = len(self.st.maximal_isr) < min(self.st.min_insync_replicas, len(REPLICAS))
            assert error == (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if too_few else ErrorCode.NONE)
        self.acks_all = waiting


LeaderUnderTraffic.TestCase.settings = settings(max_examples=150, stateful_step_count=60,
                                                deadline=None)
test_leader_under_traffic = LeaderUnderTraffic.TestCase
