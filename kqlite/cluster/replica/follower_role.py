"""The follower role of a replicated partition: what the partition does when the fetcher
drives it (the FollowerReplica methods, kqlite/cluster/fetcher/follower.py).

Theory of operation. While following, the partition copies its leader's log. The
fetcher asks where to fetch from (the log end, with the epoch of the last batch for the
leader's diverging-epoch check), appends what comes back as it is, and on the leader's
say truncates by leader epoch or starts over at the leader's log start. Each step is one
storage-thread call on the leased log (log_rules.py holds the storage rules); the
high watermark is the leader's, capped at our log end, and is pinned in storage by the
same call (high_watermark.py). An out-of-range reset below the leader's log start
empties the log and starts it over at the leader's log start, which is then the fetch
position. The positions a call saw become the partition's unless its role changed
meanwhile (RoleState.generation).
"""

from ...protocol import ErrorCode
from ...server.partition import PartitionError
from ..fetcher.follower import FetchPosition
from ..rules.truncation import EpochEndOffset, truncation_offset
from .log_rules import append_replicated, restart_replica_at, truncate_replica

__all__ = ["FollowerRole"]


class FollowerRole:
    """The follower's side of the partition ``topic``-``index``. ``role``: the RoleState
    shared with the partition; ``hw``: its HighWatermarkPin; ``run_on_log(action, fn,
    *args)``: a coroutine running ``fn(log, *args)`` on the leased log in a storage thread
    and answering ``(result, positions)``, storage's failures raised as PartitionError;
    ``set_positions(positions)``: the partition's positions are now these (an
    OffsetSnapshot).

    Every method raises PartitionError: NOT_LEADER_OR_FOLLOWER when the partition does not
    follow, else storage's failure (UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE,
    KAFKA_STORAGE_ERROR)."""

    def __init__(self, role, hw, *, topic, index, run_on_log, set_positions):
        self._role = role
        self._hw = hw
        self._topic = topic
        self._index = index
        self._run_on_log = run_on_log
        self._set_positions = set_positions

    async def next_fetch_position(self):
        """The FetchPosition of the next fetch from the leader."""
        start, end, latest = await self._as_follower("fetch position", _fetch_state)
        return FetchPosition(end, latest, start, self._role.leader_epoch)

    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        start, end, latest = await self._as_follower("replicate", self._append_from_leader,
                                                     records, high_watermark, log_start_offset)
        return FetchPosition(end, latest, start, self._role.leader_epoch)

    def _append_from_leader(self, log, records, leader_hw, leader_start):
        end = append_replicated(log, records) if records else log.end_offset
        hw = self._hw.set(log, min(leader_hw, end))
        if leader_start > log.start_offset:
            log.delete_records(min(leader_start, hw))
        return _fetch_state(log)

    async def truncate_for_diverging_epoch(self, epoch, end_offset):
        return await self._as_follower("truncate", self._truncate_diverging, epoch,
                                       end_offset)

    def _truncate_diverging(self, log, epoch, end_offset):
        target = truncation_offset(log.epochs, EpochEndOffset(epoch, end_offset),
                                   log.end_offset, log.high_watermark)
        end = truncate_replica(log, target.offset)
        self._hw.set(log, log.high_watermark)
        return end

    async def reset_for_out_of_range(self, leader_log_start_offset, leader_log_end_offset):
        return await self._as_follower("reset", self._reset_out_of_range,
                                       leader_log_start_offset, leader_log_end_offset)

    def _reset_out_of_range(self, log, leader_start, leader_end):
        end = log.end_offset
        if leader_end < end:
            end = truncate_replica(log, leader_end)
            self._hw.set(log, log.high_watermark)
        elif leader_start > end:
            # Everything we hold is below what the leader still has: start again there.
            end = restart_replica_at(log, leader_start)
            self._hw.set(log, log.high_watermark)
        return end

    async def _as_follower(self, action, fn, *args):
        """``fn(log, *args)`` in a storage thread while following; the positions it saw
        become ours unless the role changed meanwhile."""
        role = self._role
        if not role.following:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {role.broker_id} does not follow "
                                 f"{self._topic}-{self._index}")
        generation = role.generation
        found, positions = await self._run_on_log(action, fn, *args)
        if generation == role.generation:
            self._set_positions(positions)
        return found


def _fetch_state(log):
    return log.start_offset, log.end_offset, log.epochs.latest_epoch
