"""The leader's view of one replicated partition: its followers, the high watermark and
the ISR changes it asks the controller for. Kafka's rules (``Partition.scala``,
``Replica.scala``, ``DelayedProduce``), as a pure state machine.

Theory of operation. A ``LeaderState`` exists while this broker leads the partition. It
learns where each follower is only from the follower's own fetches: a fetch at offset
``o`` means the follower's log ends at ``o`` (``on_follower_fetch``). From that it keeps,
per follower, the last time the follower was *caught up* (its fetch reached the
leader's log end at that moment, or reached the end the leader had at the follower's
previous fetch), which is what ``replica.lag.time.max.ms`` is measured against.

- The high watermark (HW) is the smallest log end offset among the leader and the
  followers that must have a record before it counts as committed: the members of the
  *maximal* ISR, and followers that are caught up and could join it. It never goes
  down, and since Kafka 3.7 (KAFKA-15583) it does not move at all while the committed ISR
  is smaller than ``min.insync.replicas`` (capped at the replication factor).
- The ISR changes only through the controller (AlterPartition, KIP-497). The leader
  proposes a change and waits in a *pending* state: a pending expansion already counts
  the new member for the HW and for ``acks=all`` (stricter, hence safe if refused); a
  pending shrink still counts the members it wants to drop (the HW must not race ahead
  on an ISR the controller has not accepted). While a change is in flight no other is
  proposed. The answer commits, reverts or leaves the state pending until the
  controller's next LeaderAndIsr (``update_leadership``), per Kafka's error handling;
  the caller sends a change left pending again to a newer controller, whose answer may
  differ (replica/partition.py).
- ``acks=all`` produce waits until the HW passes the batch: then every member of the
  maximal ISR has it. Appending is refused up front when the committed ISR is smaller
  than ``min.insync.replicas``.

The caller (the replicated partition) does the I/O: it reads the log, answers fetches,
sends AlterPartition, writes the leader-epoch cache. Times are milliseconds from the
injected ``clock`` (or the ``now`` passed to a method).
"""

import dataclasses
import enum
from typing import NamedTuple

from ...protocol import ErrorCode

__all__ = ["LeaderState", "FollowerState", "CommittedIsr", "PendingExpand", "PendingShrink",
           "IsrProposal", "IsrCommit", "FetchOutcome", "AlterAction", "AlterOutcome",
           "DEFAULT_LAG_TIME_MS", "UNKNOWN_OFFSET", "NEVER"]

DEFAULT_LAG_TIME_MS = 30_000   # Kafka's replica.lag.time.max.ms
UNKNOWN_OFFSET = -1            # Kafka's UnifiedLog.UnknownOffset: no fetch seen yet
# Kafka writes 0 ms for "never caught up", which is long ago against the wall clock; the
# injected clock may be monotonic and start near 0, so "never" must be below any time.
NEVER = float("-inf")

# AlterPartition errors after which the leader keeps its pending state until the
# controller sends new metadata (Partition.handleAlterPartitionError).
_AWAIT_METADATA = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
    ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED})
# Errors that say the controller did not apply the change and our partition epoch is
# right, so the last committed state is still the truth.
_REVERT = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})


def _check_isr(leader, replicas, isr):
    if leader not in isr:
        raise ValueError(f"leader {leader} is not in the ISR {list(isr)}")
    if not set(isr) <= set(replicas):
        raise ValueError(f"ISR {list(isr)} is not a subset of the replicas {list(replicas)}")


@dataclasses.dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_time: float = NEVER
    last_caught_up_time: float = NEVER
    # The leader's log end when this follower last fetched (the largest seen).
    last_fetch_leader_leo: int = UNKNOWN_OFFSET

    def update_fetch_state(self, fetch_offset, log_start_offset, now, leader_leo):
        """Record a fetch at ``fetch_offset`` made at ``now`` while the leader's log ended
        at ``leader_leo``. The follower was caught up now if it asked for the leader's
        end; else it was caught up at its previous fetch if it now asks for what the
        leader had then. The second rule lets a follower that trails a steady stream of
        small appends by one fetch still count as in sync."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_time = max(self.last_caught_up_time, now)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_time = max(self.last_caught_up_time, self.last_fetch_time)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_leo = max(leader_leo, self.last_fetch_leader_leo)
        self.last_fetch_time = now

    def is_caught_up(self, leader_leo, now, lag_time_ms):
        return leader_leo == self.log_end_offset or now - self.last_caught_up_time <= lag_time_ms


class IsrProposal(NamedTuple):
    """An ISR change to send in AlterPartition (leader, its epoch, the new ISR, and the
    partition epoch it is based on). ``kind`` is "expand" or "shrink"."""
    kind: str
    leader_id: int
    leader_epoch: int
    isr: tuple
    partition_epoch: int


class IsrCommit(NamedTuple):
    """The controller's successful AlterPartition answer for the partition."""
    leader_epoch: int
    isr: tuple
    partition_epoch: int


@dataclasses.dataclass(frozen=True)
class CommittedIsr:
    """No change in flight: the ISR is what the controller last confirmed."""
    isr: tuple
    in_flight = False

    @property
    def maximal_isr(self):
        return self.isr


@dataclasses.dataclass(frozen=True)
class PendingExpand:
    """An expansion is in flight; the new replica already counts for the HW and acks."""
    new_replica: int
    proposal: IsrProposal
    last_committed: CommittedIsr
    in_flight = True

    @property
    def isr(self):
        return self.last_committed.isr

    @property
    def maximal_isr(self):
        return self.last_committed.isr + (self.new_replica,)


@dataclasses.dataclass(frozen=True)
class PendingShrink:
    """A shrink is in flight; the replicas it drops still count until it commits."""
    out_of_sync: frozenset
    proposal: IsrProposal
    last_committed: CommittedIsr
    in_flight = True

    @property
    def isr(self):
        return self.last_committed.isr

    @property
    def maximal_isr(self):
        return self.last_committed.isr


class FetchOutcome(NamedTuple):
    hw_advanced: bool
    expand: "IsrProposal | None"    # send this AlterPartition when not None


class AlterAction(enum.Enum):
    COMMITTED = "committed"            # the new ISR is in force
    IGNORED = "ignored"                # the answer is for a state we no longer hold, or stale
    REVERTED = "reverted"              # refused; back to the last committed ISR
    AWAIT_METADATA = "await_metadata"  # stay pending until the next LeaderAndIsr
    RETRY = "retry"                    # send the same proposal again


class AlterOutcome(NamedTuple):
    action: AlterAction
    hw_advanced: bool


class LeaderState:
    """The leader's bookkeeping for one partition it leads (see the module docstring).

    Constructed when this broker becomes leader (Kafka's ``makeLeader`` with a new leader
    epoch): followers start unknown, those in the ISR counted as caught up now so that a
    leader change does not shrink the ISR at once. ``leader_epoch_start_offset`` is the log
    end offset at which this leader epoch began (the caller records it in the leader-epoch
    cache). ``min_insync_replicas`` is the topic's ``min.insync.replicas`` and may be
    reassigned when the topic config changes. ``is_eligible(broker_id)`` says whether a
    follower may join the ISR (in ZooKeeper mode: the broker is alive in the metadata
    cache).
    """

    def __init__(self, broker_id, replicas, isr, leader_epoch, partition_epoch,
                 leader_epoch_start_offset, log_end_offset, high_watermark, *,
                 lag_time_ms=DEFAULT_LAG_TIME_MS, clock, min_insync_replicas=1,
                 is_eligible=None):
        _check_isr(broker_id, replicas, isr)
        if high_watermark > log_end_offset:
            raise ValueError(f"high watermark {high_watermark} is past the log end {log_end_offset}")
        self.broker_id = broker_id
        self.lag_time_ms = lag_time_ms
        self.clock = clock
        self.min_insync_replicas = min_insync_replicas
        self.is_eligible = is_eligible or (lambda _broker_id: True)
        self.replicas = tuple(replicas)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.state = CommittedIsr(tuple(isr))
        now = clock()
        self.followers = {}
        for r in self.replicas:
            if r != broker_id:
                caught_up = now if r in isr else NEVER
                self.followers[r] = FollowerState(last_caught_up_time=caught_up)
        self.advance_high_watermark(now)

    # ---- views -----------------------------------------------------------------------

    @property
    def isr(self):
        """The committed ISR."""
        return self.state.isr

    @property
    def maximal_isr(self):
        return self.state.maximal_isr

    @property
    def isr_expiration_interval_ms(self):
        """How often ``propose_shrink`` should run: Kafka's ``isr-expiration`` task runs
        every half lag time, so a stuck follower leaves the ISR between 1x and 1.5x the
        lag time after it was last caught up."""
        return self.lag_time_ms / 2

    def effective_min_isr(self, min_isr=None):
        """``min.insync.replicas`` capped at the replication factor, as Kafka applies it."""
        wanted = self.min_insync_replicas if min_isr is None else min_isr
        return min(wanted, len(self.replicas))

    @property
    def under_replicated(self):
        return len(self.isr) < len(self.replicas)

    @property
    def under_min_isr(self):
        return len(self.isr) < self.effective_min_isr()

    def is_caught_up(self, replica_id, now=None):
        now = self.clock() if now is None else now
        f = self.followers.get(replica_id)
        return f is not None and f.is_caught_up(self.log_end_offset, now, self.lag_time_ms)

    # ---- request checks --------------------------------------------------------------

    def fetch_epoch_check(self, current_leader_epoch):
        """The CurrentLeaderEpoch check of a Fetch, ListOffsets or OffsetForLeaderEpoch
        (KIP-320): an older epoch is fenced, a newer one is not known here yet. None or a
        negative epoch means the request did not carry one."""
        if current_leader_epoch is None or current_leader_epoch < 0:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def check_follower_fetch(self, replica_id, current_leader_epoch):
        """Kafka's checks of a follower's fetch, in order: the epoch, then the replica must
        be an assigned follower. An unknown replica gets UNKNOWN_LEADER_EPOCH when the
        request carries an epoch (so it retries until the assignment reaches us) and
        NOT_LEADER_OR_FOLLOWER otherwise."""
        error = self.fetch_epoch_check(current_leader_epoch)
        if error != ErrorCode.NONE:
            return error
        if replica_id not in self.followers:
            if current_leader_epoch is not None and current_leader_epoch >= 0:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def can_append(self, acks, min_isr=None):
        """Before appending a produce batch: with ``acks=-1`` the committed ISR must have at
        least ``min.insync.replicas`` members, else NOT_ENOUGH_REPLICAS and nothing is
        written."""
        if acks == -1 and len(self.isr) < self.effective_min_isr(min_isr):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def check_enough_replicas_reach_offset(self, required_offset, min_isr=None):
        """(done, error) for an ``acks=-1`` produce whose last offset is
        ``required_offset - 1``: done once the HW reaches ``required_offset``, with
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is below
        ``min.insync.replicas`` by then (the records are written all the same)."""
        if self.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.maximal_isr) < self.effective_min_isr(min_isr):
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    # ---- events ----------------------------------------------------------------------

    def on_leader_append(self, new_leo, now=None):
        """The leader's log now ends at ``new_leo``; returns whether the HW advanced (it
        does at once when the ISR is the leader alone)."""
        if new_leo < self.log_end_offset:
            raise ValueError(f"a leader's log never shrinks: {self.log_end_offset} -> {new_leo}")
        self.log_end_offset = new_leo
        return self.advance_high_watermark(now)

    def on_follower_fetch(self, replica_id, fetch_offset, log_start_offset, now=None, *,
                          leader_end_offset=None):
        """A follower fetched at ``fetch_offset`` (its log end) and reported its log start.
        Call it only for a fetch that passed ``check_follower_fetch`` and was not answered
        with a diverging epoch. ``leader_end_offset`` is the leader's log end when the
        read began (default: now); using the end before the read keeps appends racing the
        fetch from making the follower look behind. Returns whether the HW advanced and
        the ISR expansion to propose, if any."""
        now = self.clock() if now is None else now
        follower = self.followers.get(replica_id)
        if follower is None:
            raise KeyError(f"replica {replica_id} is not a follower of this partition "
                           f"(replicas {list(self.replicas)})")
        leader_leo = self.log_end_offset if leader_end_offset is None else leader_end_offset
        previous_leo = follower.log_end_offset
        follower.update_fetch_state(fetch_offset, log_start_offset, now, leader_leo)
        expand = self.propose_expand(replica_id)
        hw_advanced = False
        if follower.log_end_offset != previous_leo:
            hw_advanced = self.advance_high_watermark(now)
        return FetchOutcome(hw_advanced, expand)

    def advance_high_watermark(self, now=None):
        """Move the HW up to the smallest log end among the leader, the maximal ISR and the
        caught-up eligible followers; returns whether it moved. A caught-up follower
        outside the ISR holds the HW back so that it can reach it and join, instead of
        chasing a HW that runs ahead with the leader's log end."""
        if self.under_min_isr:
            return False
        now = self.clock() if now is None else now
        maximal = self.maximal_isr
        new_hw = self.log_end_offset
        for r, f in self.followers.items():
            if f.log_end_offset < new_hw and (
                    r in maximal or (f.is_caught_up(self.log_end_offset, now, self.lag_time_ms)
                                     and self.is_eligible(r))):
                new_hw = f.log_end_offset
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # ---- ISR changes -----------------------------------------------------------------

    def out_of_sync_replicas(self, now=None):
        """ISR members other than the leader that are not caught up within the lag time
        (stuck: no fetch for that long; slow: no fetch reaching the log end for that
        long). Empty while a change is in flight."""
        if self.state.in_flight:
            return frozenset()
        now = self.clock() if now is None else now
        return frozenset(r for r in self.isr if r != self.broker_id
                         and not self.is_caught_up(r, now))

    def propose_shrink(self, now=None):
        """The periodic ISR check: propose dropping the out-of-sync replicas, entering the
        pending-shrink state. None when nothing is to be dropped or a change is in flight."""
        out = self.out_of_sync_replicas(now)
        if not out:
            return None
        committed = self.state
        proposal = IsrProposal("shrink", self.broker_id, self.leader_epoch,
                               tuple(r for r in committed.isr if r not in out),
                               self.partition_epoch)
        self.state = PendingShrink(out, proposal, committed)
        return proposal

    def propose_expand(self, replica_id):
        """Propose adding ``replica_id`` to the ISR if it qualifies: no change in flight,
        not in the ISR, eligible, and its log reaches both the HW and the start of this
        leader epoch (a replica that has not caught up into the current epoch could be
        elected without records committed between the HW and the leader's end). Enters
        the pending-expand state; None when it does not qualify."""
        follower = self.followers.get(replica_id)
        if (follower is None or self.state.in_flight or replica_id in self.isr
                or not self.is_eligible(replica_id)
                or follower.log_end_offset < self.high_watermark
                or follower.log_end_offset < self.leader_epoch_start_offset):
            return None
        committed = self.state
        proposal = IsrProposal("expand", self.broker_id, self.leader_epoch,
                               committed.isr + (replica_id,), self.partition_epoch)
        self.state = PendingExpand(replica_id, proposal, committed)
        return proposal

    def on_alter_partition_result(self, proposal, result, now=None):
        """The controller answered ``proposal`` with ``result``: an ``IsrCommit`` or an
        error code. Kafka's handling: an answer for a state we no longer hold is ignored;
        a commit for another leader epoch or an older partition epoch is ignored (the state
        stays pending); OPERATION_NOT_ATTEMPTED and INELIGIBLE_REPLICA revert to the last
        committed ISR; fencing and version errors wait for new metadata; anything else is
        retried with the same proposal."""
        pending = self.state
        if not pending.in_flight or pending.proposal != proposal:
            return AlterOutcome(AlterAction.IGNORED, False)
        if isinstance(result, IsrCommit):
            if result.leader_epoch != self.leader_epoch or result.partition_epoch < self.partition_epoch:
                return AlterOutcome(AlterAction.IGNORED, False)
            self.state = CommittedIsr(tuple(result.isr))
            self.partition_epoch = result.partition_epoch
            return AlterOutcome(AlterAction.COMMITTED, self.advance_high_watermark(now))
        error = int(result)
        if error == ErrorCode.NONE:
            raise ValueError("a successful AlterPartition answer must be given as an IsrCommit")
        if error in _REVERT:
            self.state = pending.last_committed
            return AlterOutcome(AlterAction.REVERTED, False)
        if error in _AWAIT_METADATA:
            return AlterOutcome(AlterAction.AWAIT_METADATA, False)
        return AlterOutcome(AlterAction.RETRY, False)

    def update_leadership(self, replicas, isr, leader_epoch, partition_epoch, now=None):
        """A LeaderAndIsr keeps this broker the leader (Kafka's ``makeLeader`` when already
        leading). Refused (False) when its partition epoch is older than ours. Otherwise the
        assignment and ISR are taken as committed, dropping any pending change; a newer
        leader epoch starts at the current log end (the caller records it in the
        leader-epoch cache) and resets the followers' clocks as a new leader would, keeping
        what they last reported. Returns True when applied."""
        if partition_epoch < self.partition_epoch:
            return False
        _check_isr(self.broker_id, replicas, isr)
        now = self.clock() if now is None else now
        self.replicas = tuple(replicas)
        self.followers = {r: self.followers.get(r) or FollowerState()
                          for r in self.replicas if r != self.broker_id}
        self.state = CommittedIsr(tuple(isr))
        if leader_epoch > self.leader_epoch:
            self.leader_epoch_start_offset = self.log_end_offset
            for r, f in self.followers.items():
                in_sync = r in isr
                f.last_fetch_leader_leo = self.log_end_offset
                f.last_fetch_time = now if in_sync else NEVER
                f.last_caught_up_time = now if in_sync else NEVER
            self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.advance_high_watermark(now)
        return True

    def __repr__(self):
        return (f"LeaderState(broker={self.broker_id}, epoch={self.leader_epoch}, "
                f"partition_epoch={self.partition_epoch}, leo={self.log_end_offset}, "
                f"hw={self.high_watermark}, state={self.state}, "
                f"followers={ {r: f.log_end_offset for r, f in self.followers.items()} })")
