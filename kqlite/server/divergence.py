"""The leader's answer to a follower that may have diverged (Kafka's
``Partition.readRecords`` with LastFetchedEpoch, Fetch v12+, KIP-320/KIP-595).

Every leader answers it, the single broker's partitions included: a follower's fetch
names the epoch of its last batch, and if the leader's log has that epoch ending before
the fetch offset, or never had it, the follower holds records the leader does not; the
leader answers with no records and a ``DivergingEpoch``, and the follower truncates
(kqlite/cluster/rules/truncation.py). Pure functions over a leader-epoch cache.
"""

from typing import NamedTuple

from ..protocol import ErrorCode

__all__ = ["EpochEndOffset", "UNDEFINED", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET",
           "leader_epoch_end", "diverging_epoch_for"]

UNDEFINED_EPOCH = -1          # WIRE: Kafka's UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1   # WIRE: Kafka's UNDEFINED_EPOCH_OFFSET


class EpochEndOffset(NamedTuple):
    """A leader epoch and the offset where it ends (its successor's start, or the log end
    for the latest epoch); (-1, -1) when unknown."""
    epoch: int
    end_offset: int

    @property
    def undefined(self):
        return self.epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def leader_epoch_end(epochs, epoch, log_end_offset):
    """Where ``epoch`` ends in a log with this epoch cache and log end, as the leader
    answers OffsetForLeaderEpoch (Kafka's ``UnifiedLog.endOffsetForEpoch``): the largest
    known epoch at or below it and the start of the next one; UNDEFINED when the cache
    cannot tell. ``epochs`` is a ``LeaderEpochCache`` or anything with its
    ``end_offset_for``."""
    found_epoch, end = epochs.end_offset_for(epoch, log_end_offset)
    if end == UNDEFINED_EPOCH_OFFSET:
        return UNDEFINED
    return EpochEndOffset(found_epoch, end)


def diverging_epoch_for(leader_epochs_cache, last_fetched_epoch, fetch_offset,
                        log_start_offset, log_end_offset):
    """The leader's check of a follower fetch that carries ``last_fetched_epoch`` (Kafka's
    ``Partition.readRecords``): returns ``(error, diverging)``.

    - ``(NONE, None)``: read records from ``fetch_offset`` as usual (also when the fetch
      carries no epoch: None or negative);
    - ``(OFFSET_OUT_OF_RANGE, None)``: the leader cannot place that epoch, or the fetch
      offset is below its log start;
    - ``(NONE, EpochEndOffset)``: the follower diverged; answer no records and this
      DivergingEpoch, and do not count the fetch as the follower's position.

    The caller checks the request's CurrentLeaderEpoch first (``LeaderState``)."""
    if last_fetched_epoch is None or last_fetched_epoch < 0:
        return ErrorCode.NONE, None
    end = leader_epoch_end(leader_epochs_cache, last_fetched_epoch, log_end_offset)
    if end.undefined or fetch_offset < log_start_offset:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    if end.epoch < last_fetched_epoch or end.end_offset < fetch_offset:
        return ErrorCode.NONE, end
    return ErrorCode.NONE, None
