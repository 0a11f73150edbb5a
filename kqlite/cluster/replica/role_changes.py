"""Role changes of a replicated partition: LeaderAndIsr's makeLeader and makeFollower,
and StopReplica without deletion.

Theory of operation. A role change is refused for an older leader epoch or partition
epoch (the controller has moved on). It first waits until the appends in flight have
landed and holds new ones back (``_quiesce``), so that a new leader epoch starts exactly
at the log end and a new follower's first fetch starts at a log end nothing will move.
Then:

- becoming leader with a new epoch records ``(epoch, log end)`` in the leader-epoch cache
  (a storage thread) and starts a LeaderState in which the followers in the ISR count as
  caught up now; already leading, a new epoch resets the followers' clocks and the same
  epoch only takes the new assignment and ISR (LeaderState.update_leadership);
- becoming follower drops the leader state (waiting acks=-1 produces then complete with
  NOT_LEADER_OR_FOLLOWER) and, for a new epoch on a log that has no leader epoch at all,
  truncates to the high watermark (truncation.initial_fetch_state);
- either way, the high watermark a role starts with is the one the partition held, or
  after a restart the last checkpointed one (log_rules.checkpointed_high_watermark).

This is a mixin of :class:`~kqlite.cluster.replica.partition.ReplicatedPartition`,
which owns the state it changes.
"""

import logging

from ...errors import KqliteError, UnknownTopicError
from ...protocol import ErrorCode
from ..rules.leader_state import LeaderState
from ..rules.truncation import initial_fetch_state
from .log_rules import checkpointed_high_watermark, open_leader_epoch, truncate_replica

__all__ = ["RoleChanges"]

logger = logging.getLogger("kqlite.cluster")


class RoleChanges:
    """become_leader, become_follower and stop_replica (see the module docstring)."""

    async def become_leader(self, leader_epoch, isr, replicas, partition_epoch, topic_id=None):
        """LeaderAndIsr making this broker the leader (Kafka's makeLeader). Returns an error
        code: STALE_CONTROLLER_EPOCH for an older leader epoch, NONE (and nothing
        changes) for an older partition epoch, UNKNOWN_TOPIC_OR_PARTITION when this
        broker is not a replica. A new epoch is recorded in the leader-epoch cache at the
        log end; the same epoch only updates the assignment and the ISR. Raises
        ValueError when the ISR does not hold this broker (no controller sends that)."""
        async with self._leadership:
            if leader_epoch < self._leader_epoch:
                return ErrorCode.STALE_CONTROLLER_EPOCH
            if partition_epoch < self._partition_epoch:
                logger.info("%s: ignoring leadership at partition epoch %d, already at %d",
                            self, partition_epoch, self._partition_epoch)
                return ErrorCode.NONE
            if self._broker_id not in replicas:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if topic_id is not None:
                self.topic_id = topic_id
            ls = self._leader_state
            await self._quiesce()
            try:
                if ls is None or leader_epoch > ls.leader_epoch:
                    try:
                        start, hw, end = await self._io.run(self._open_epoch, leader_epoch)
                    except UnknownTopicError:
                        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    except (KqliteError, OSError) as exc:
                        logger.error("%s: cannot start leader epoch %d: %s", self,
                                     leader_epoch, exc)
                        return ErrorCode.KAFKA_STORAGE_ERROR
                if ls is None:
                    ls = LeaderState(self._broker_id, replicas, isr, leader_epoch, partition_epoch,
                                     end, end, hw, lag_time_ms=self.lag_time_ms,
                                     clock=self._clock, min_insync_replicas=self._min_isr(),
                                     is_eligible=self._is_eligible)
                    self._set_positions(start, ls.high_watermark, end)
                else:
                    if leader_epoch > ls.leader_epoch:
                        self._leader_saw_end(end)
                    ls.min_insync_replicas = self._min_isr()
                    if not ls.update_leadership(replicas, isr, leader_epoch, partition_epoch):
                        return ErrorCode.NONE
                self._leader_state = ls
                self._following, self._leader = False, self._broker_id
                self._leader_epoch, self._partition_epoch = leader_epoch, partition_epoch
                self._replicas = tuple(replicas)
                self._generation += 1
                self._hw_moved()
            finally:
                self._ready.set()
        logger.info("%s: leader with ISR %s", self, list(ls.isr))
        return ErrorCode.NONE

    def _open_epoch(self, epoch):
        """In a storage thread: record ``epoch`` at the log end; (start, HW, end)."""
        with self._lease() as log:
            end = open_leader_epoch(log, epoch)
            start = log.start_offset
            hw = self._set_storage_hw(log, self._known_hw(log, start, end))
            return start, hw, end

    async def become_follower(self, leader_id, leader_epoch, isr, replicas, partition_epoch):
        """LeaderAndIsr making this broker a follower of ``leader_id`` (Kafka's
        makeFollower). Returns True when the leader epoch increased: the fetcher must
        start over from :meth:`next_fetch_position`. An older leader or partition epoch
        changes nothing (False). Produces waiting for acks=-1 complete with
        NOT_LEADER_OR_FOLLOWER."""
        async with self._leadership:
            if leader_epoch < self._leader_epoch or partition_epoch < self._partition_epoch:
                return False
            new_epoch = leader_epoch > self._leader_epoch
            await self._quiesce()
            try:
                self._leader_state = None
                self._following, self._leader = True, leader_id
                self._leader_epoch, self._partition_epoch = leader_epoch, partition_epoch
                self._replicas, self._follower_isr = tuple(replicas), tuple(isr)
                self._generation += 1
                self._on_change(self)
                try:
                    positions = await self._io.run(self._start_following, new_epoch)
                except (KqliteError, OSError) as exc:
                    logger.error("%s: cannot read the log to follow %d: %s", self, leader_id, exc)
                else:
                    self._set_positions(*positions)
            finally:
                self._ready.set()
        logger.info("%s: following broker %d", self, leader_id)
        return new_epoch

    def _start_following(self, new_epoch):
        """In a storage thread: the follower's HW, and -- for a new epoch on a log
        without leader epochs -- the truncation to it (truncation.initial_fetch_state)."""
        with self._lease() as log:
            start, end = log.start_offset, log.end_offset
            hw = self._set_storage_hw(log, self._known_hw(log, start, end))
            if new_epoch:
                begin = initial_fetch_state(log.epochs.latest_epoch, end, hw)
                if begin.truncate_first and begin.offset < end:
                    end = truncate_replica(log, begin.offset)
                    hw = self._set_storage_hw(log, log.high_watermark)
            return log.start_offset, hw, end

    async def stop_replica(self):
        """StopReplica without deletion: neither lead nor follow any more."""
        async with self._leadership:
            await self._quiesce()
            try:
                self._leader_state, self._following, self._leader = None, False, -1
                self._generation += 1
            finally:
                self._ready.set()
        self._on_change(self)

    async def _quiesce(self):
        self._ready.clear()
        await self._appends_done.wait()

    def _known_hw(self, log, start, end):
        """The HW to start a role with: the one held, else the last checkpointed."""
        hw = self._storage_hw
        if hw < 0:
            hw = checkpointed_high_watermark(self._db.fs, self._db.path, self.topic,
                                             self.index, start, end)
        return max(start, min(hw, end))

