"""Log truncation by leader epoch (KIP-101, KIP-279, KIP-320 and truncation-on-fetch):
where a follower's log stops agreeing with its leader's. Pure decisions; the
replicated partition does the reads, the fetches and the truncating.

Theory of operation. Every batch carries the leader epoch it was written in, and each
replica's leader-epoch cache (``kqlite.storage.leader_epoch``) records where each epoch
began in its log. Two replicas agree up to the end of the last epoch they share, and
the leader can say where any of its epochs ends (``LeaderEpochCache.end_offset_for``).

- On the leader, a follower's fetch carries the epoch of its last fetched batch
  (``LastFetchedEpoch``, Fetch v12+). If the leader's log has that epoch ending before
  the fetch offset, or does not have that epoch at all (it answers with an older one),
  the follower holds records the leader never had: the leader answers with no records
  and a ``DivergingEpoch`` (``diverging_epoch_for``).
- On the follower, the leader's answer (a DivergingEpoch, or an OffsetForLeaderEpoch
  reply to "where does my latest epoch end?") becomes a truncation offset
  (``truncation_offset``). It is never simply the follower's high watermark, which may
  lag behind records every replica has (KIP-101 scenario 1) or sit above records that
  diverged (scenario 2); the high watermark is used only when the leader cannot answer.
"""

from typing import NamedTuple

# The leader's side lives with every partition (a single broker answers it too).
from ...server.divergence import (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset,
                                  diverging_epoch_for, leader_epoch_end)

__all__ = ["EpochEndOffset", "Truncation", "FetchStart", "UNDEFINED_EPOCH",
           "UNDEFINED_EPOCH_OFFSET", "leader_epoch_end", "diverging_epoch_for",
           "truncation_offset", "initial_fetch_state"]


class Truncation(NamedTuple):
    """Truncate the follower's log to ``offset``. ``complete`` is False when the follower
    must ask the leader again (the leader answered with an epoch the follower does not
    have, so the agreement point may lie further back)."""
    offset: int
    complete: bool


class FetchStart(NamedTuple):
    """Where a new follower starts: fetch from ``offset``, after truncating to it first when
    ``truncate_first`` (a log without epochs can only be cut to its high watermark)."""
    offset: int
    truncate_first: bool


def truncation_offset(local_epochs, leader_answer, log_end_offset, high_watermark):
    """Where the follower truncates given the leader's ``leader_answer`` (an
    ``EpochEndOffset`` from a DivergingEpoch or an OffsetForLeaderEpoch reply), its own
    epoch cache, log end and high watermark (Kafka's ``getOffsetTruncationState``):

    - the leader could not answer (undefined end offset): the high watermark, the only
      safe point left (``high_watermark`` is the fetch offset the partition started
      truncating from, which Kafka sets to the high watermark);
    - the leader answered without an epoch (OffsetForLeaderEpoch v0): its end offset,
      capped at the log end;
    - the follower knows the leader's epoch: the smaller of where it ends locally, where it
      ends on the leader, and the log end;
    - the follower's cache skips that epoch: the end of its largest epoch below it, not
      complete (ask again with that epoch);
    - the follower has no epoch at or below it (or none at all): the leader's end offset,
      capped at the log end.
    """
    if leader_answer.end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncation(high_watermark, True)
    if leader_answer.epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader_answer.end_offset, log_end_offset), True)
    local = leader_epoch_end(local_epochs, leader_answer.epoch, log_end_offset)
    if local.undefined:
        return Truncation(min(leader_answer.end_offset, log_end_offset), True)
    if local.epoch != leader_answer.epoch:
        return Truncation(min(local.end_offset, log_end_offset), False)
    return Truncation(min(local.end_offset, leader_answer.end_offset, log_end_offset), True)


def initial_fetch_state(latest_epoch, log_end_offset, high_watermark):
    """Where a partition starts when it becomes a follower (``ReplicaManager.initialFetchOffset``
    and ``AbstractFetcherThread.partitionFetchState`` with truncation-on-fetch): a log
    with a leader epoch fetches from its log end and lets the leader's DivergingEpoch
    say whether to truncate; a log without one (old or empty) truncates to its high
    watermark first."""
    if latest_epoch is not None and latest_epoch >= 0:
        return FetchStart(log_end_offset, False)
    return FetchStart(high_watermark, True)
