"""The follower role of a replicated partition: the FollowerReplica the fetcher drives.

Theory of operation. While following, the partition copies its leader's log. The
fetcher asks where to fetch from (the log end, with the epoch of the last batch for the
leader's diverging-epoch check), appends what comes back as it is, and on the leader's
say truncates by leader epoch or starts over at the leader's log start. Each step is one
storage-thread call on the leased log (log_rules.py holds the storage rules); the
high watermark is the leader's, capped at our log end, and is pinned in storage by the
same call. An out-of-range reset below the leader's log start empties the log and
starts it over at the leader's log start, which is then the fetch position.

This is a mixin of :class:`~kqlite.cluster.replica.partition.ReplicatedPartition`,
which owns the state used here (``_following``, ``_generation``, ``_leader_epoch``)
and the storage helpers (``_storage_call``, ``_set_storage_hw``,
``_set_positions``).
"""

from ...protocol import ErrorCode
from ...server.partition import PartitionError
from ..fetcher.follower import FetchPosition, FollowerReplica
from ..rules.truncation import EpochEndOffset, truncation_offset
from .log_rules import append_replicated, restart_replica_at, truncate_replica

__all__ = ["FollowerRole"]


class FollowerRole(FollowerReplica):
    """FollowerReplica's methods. Every method raises PartitionError:
    NOT_LEADER_OR_FOLLOWER when the partition does not follow, else storage's failure
    (UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE, KAFKA_STORAGE_ERROR)."""

    async def next_fetch_position(self):
        """The FetchPosition of the next fetch from the leader."""
        start, end, latest = await self._as_follower("fetch position", _fetch_state)
        return FetchPosition(end, latest, start, self._leader_epoch)

    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        return await self._as_follower("replicate", self._append_from_leader, records,
                                       high_watermark, log_start_offset)

    def _append_from_leader(self, log, records, leader_hw, leader_start):
        end = append_replicated(log, records) if records else log.end_offset
        hw = self._set_storage_hw(log, min(leader_hw, end))
        if leader_start > log.start_offset:
            log.delete_records(min(leader_start, hw))
        return end

    async def truncate_for_diverging_epoch(self, epoch, end_offset):
        return await self._as_follower("truncate", self._truncate_diverging, epoch,
                                       end_offset)

    def _truncate_diverging(self, log, epoch, end_offset):
        target = truncation_offset(log.epochs, EpochEndOffset(epoch, end_offset),
                                   log.end_offset, log.high_watermark)
        end = truncate_replica(log, target.offset)
        self._set_storage_hw(log, log.high_watermark)
        return end

    async def reset_for_out_of_range(self, leader_log_start_offset, leader_log_end_offset):
        return await self._as_follower("reset", self._reset_out_of_range,
                                       leader_log_start_offset, leader_log_end_offset)

    def _reset_out_of_range(self, log, leader_start, leader_end):
        end = log.end_offset
        if leader_end < end:
            end = truncate_replica(log, leader_end)
            self._set_storage_hw(log, log.high_watermark)
        elif leader_start > end:
            # Everything we hold is below what the leader still has: start again there.
            end = restart_replica_at(log, leader_start)
            self._set_storage_hw(log, log.high_watermark)
        return end

    async def _as_follower(self, action, fn, *args):
        """``fn(log, *args)`` in a storage thread while following; the positions it saw
        become ours unless the role changed meanwhile."""
        if not self._following:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self._broker_id} does not follow "
                                 f"{self.topic}-{self.index}")
        generation = self._generation
        found, positions = await self._io.run(self._storage_call, action, fn, *args)
        if generation == self._generation:
            self._set_positions(*positions)
        return found


def _fetch_state(log):
    return log.start_offset, log.end_offset, log.epochs.latest_epoch
