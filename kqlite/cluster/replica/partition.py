"""ReplicatedPartition: one partition of a cluster broker, as leader or as follower
(Kafka's ``Partition`` in ZooKeeper mode), behind the same seam as the single broker's.

Theory of operation. The controller decides the role (LeaderAndIsr): ``become_leader``
or ``become_follower`` (role_changes.py), each refused for an older leader or partition
epoch.

- As leader, a :class:`~kqlite.cluster.rules.leader_state.LeaderState` holds the rules: who
  is in sync, where the high watermark (HW) is, which ISR change to ask for. Produce
  appends with the leader epoch (refused up front with NOT_ENOUGH_REPLICAS when an
  ``acks=-1`` produce finds the ISR below ``min.insync.replicas``); a follower's fetch
  (``read`` with its replica id) first checks its epochs, then may be answered with a
  DivergingEpoch instead of records, else reads to the log end and tells the leader
  state where the follower is. The HW moves only when the leader state says so; then
  the delayed produces and fetches watching the partition are retried. ISR changes go
  to the controller through ``alter_partition`` (AlterPartition), one at a time,
  retried while the controller asks for it; shrinks come from :meth:`check_isr`, which
  the broker runs every ``isr_expiration_interval_ms``. An answer that leaves the
  change in flight until new metadata (a fencing or version error, an answer for other
  epochs) is only as good as the controller that gave it: the change is sent again when
  a newer controller is heard of (:meth:`controller_changed`), or at once when one was
  heard of while the request was out. Otherwise a change refused by a controller that
  was already on its way out (a half-loaded one, after a session expiry) would wait for
  a LeaderAndIsr that no later controller has any reason to send.
- As follower, it is the :class:`~kqlite.cluster.fetcher.follower.FollowerReplica` the fetcher
  drives (follower_role.py): where to fetch from, append the leader's batches as
  they are, truncate by leader epoch, start over when out of range.

Storage stays off the event loop (every log operation runs in a storage thread on a
leased log), and so does the HW: each lease first pins the log's HW at the value this
object holds (``_storage_hw``), because a log that was closed and reopened would
otherwise let its HW follow the log end.
"""

import asyncio
import contextlib
import logging
import threading

from ...errors import KqliteError
from ...protocol import ErrorCode
from ...server.local_partition import LATEST_TIMESTAMP, LocalPartition
from ...server.partition import (CONSUMER_REPLICA_ID, AppendResult, Partition, PartitionError,
                                 ReadResult)
from ...storage import Isolation
from ..rules.leader_state import DEFAULT_LAG_TIME_MS, AlterAction
from .follower_role import FollowerRole
from .role_changes import RoleChanges

__all__ = ["ReplicatedPartition", "ALTER_RETRY_BACKOFF_MS"]

ALTER_RETRY_BACKOFF_MS = 50   # Kafka's DefaultAlterPartitionManager retries after 50 ms

logger = logging.getLogger("kqlite.cluster")


class ReplicatedPartition(RoleChanges, LocalPartition, FollowerRole):
    """A partition replicated over several brokers. Besides LocalPartition's arguments:
    ``clock()`` in ms; ``alter_partition(IsrProposal)``, a coroutine answering an
    IsrCommit or an error code; ``min_insync_replicas()``, the topic's setting now;
    ``is_eligible(broker_id)``, whether that broker may join the ISR (alive in the
    metadata cache); ``lag_time_ms``, Kafka's replica.lag.time.max.ms. ``leader_epoch``
    is the epoch known before the first LeaderAndIsr (-1, as a new Kafka Partition).
    ``controller_epoch()``, the highest controller epoch the broker has heard of (default:
    never changes); the broker calls :meth:`controller_changed` when it grows."""

    def __init__(self, db, io, topic, index, *, broker_id, delayed_produce, on_change, clock,
                 alter_partition, min_insync_replicas, is_eligible, leader_epoch=-1,
                 lag_time_ms=DEFAULT_LAG_TIME_MS, alter_retry_backoff_ms=ALTER_RETRY_BACKOFF_MS,
                 topic_id=None, controller_epoch=None):
        super().__init__(db, io, topic, index, broker_id=broker_id, leader_epoch=leader_epoch,
                         delayed_produce=delayed_produce, on_change=on_change)
        self.topic_id = topic_id
        self.lag_time_ms = lag_time_ms
        self._clock = clock
        self._alter_partition = alter_partition
        self._min_isr = min_insync_replicas
        self._is_eligible = is_eligible
        self._controller_epoch = controller_epoch or (lambda: -1)
        self._alter_backoff = alter_retry_backoff_ms / 1000.0
        self._leader_state = None        # while leading
        self._following = False
        self._leader = -1                # the leader's id while following
        self._partition_epoch = -1
        self._replicas = ()
        self._follower_isr = ()
        self._storage_hw = -1            # the HW storage must hold (-1: not known yet)
        self._hw_lock = threading.Lock()  # orders the storage threads' HW pins
        self._start_at = None            # after an out-of-range reset: the leader's start
        self._generation = 0             # bumped by every role change
        self._leadership = asyncio.Lock()
        self._ready = asyncio.Event()    # cleared while the role changes
        self._ready.set()
        self._appends = 0
        self._appends_done = asyncio.Event()
        self._appends_done.set()
        self._tasks = set()
        self._alters = set()
        self._parked = None              # (LeaderState, IsrProposal) awaiting metadata
        self._pin_pending = False
        self.isr_shrinks = 0             # committed ISR changes, for the metrics
        self.isr_expands = 0

    # -- Leadership -------------------------------------------------------------------------

    @property
    def is_leader(self):
        return self._leader_state is not None

    @property
    def is_follower(self):
        return self._following

    @property
    def leader_id(self):
        return self._broker_id if self._leader_state is not None else self._leader

    @property
    def partition_epoch(self):
        return self._partition_epoch

    @property
    def replicas(self):
        return list(self._replicas)

    @property
    def isr(self):
        ls = self._leader_state
        return list(ls.isr) if ls is not None else list(self._follower_isr)

    @property
    def offline_replicas(self):
        return [r for r in self._replicas if r != self._broker_id and not self._is_eligible(r)]

    @property
    def under_replicated(self):
        ls = self._leader_state
        return ls is not None and ls.under_replicated

    @property
    def under_min_isr(self):
        ls = self._leading()
        return ls is not None and ls.under_min_isr

    @property
    def checkpoint_high_watermark(self):
        """The HW ``replication-offset-checkpoint`` records for this partition: the one
        storage holds for the role (-1 before the first role: the file keeps its entry)."""
        return self._storage_hw

    @property
    def isr_expiration_interval_ms(self):
        """How often the broker should call :meth:`check_isr` (half the lag time)."""
        return self.lag_time_ms / 2

    def _leading(self):
        """The LeaderState, with the topic's current min.insync.replicas; None if not
        leading."""
        ls = self._leader_state
        if ls is not None:
            ls.min_insync_replicas = self._min_isr()
        return ls

    def _check_leader(self, current_leader_epoch):
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            raise PartitionError(code)
        if self._leader_state is None:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self._broker_id} does not lead "
                                 f"{self.topic}-{self.index}")

    # -- High watermark ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _lease(self):
        with self._db.leased_log(self.topic, self.index) as log:
            with self._hw_lock:
                if self._storage_hw >= 0:
                    log.set_high_watermark(self._storage_hw)
            yield log

    def _set_storage_hw(self, log, hw):
        """Pin ``hw`` in storage and hold it (storage thread); returns the pinned value."""
        with self._hw_lock:
            self._storage_hw = log.set_high_watermark(hw)
            return self._storage_hw

    def _hw_moved(self):
        """The leader state's HW may have moved: hold it, pin it in storage soon, retry
        the delayed operations."""
        ls = self._leader_state
        self.high_watermark = self._storage_hw = ls.high_watermark
        if not self._pin_pending:
            self._pin_pending = True
            self._spawn(self._pin_storage_hw(), self._tasks)
        self._on_change(self)

    async def _pin_storage_hw(self):
        self._pin_pending = False    # later moves need another pin
        try:
            await self._io.run(self._pin_in_thread)
        except (KqliteError, OSError) as exc:   # the next lease pins it
            logger.debug("%s: cannot pin the high watermark: %s", self, exc)

    def _pin_in_thread(self):
        with self._lease():
            pass

    def _leader_saw_end(self, end):
        ls = self._leader_state
        if ls is not None and end > ls.log_end_offset:
            if ls.on_leader_append(end, self._clock()):
                self._hw_moved()

    def observe(self, positions):
        """Fold the positions a storage call saw: the leader's only grow and its log end
        feeds the leader state; a follower's are what its last call left."""
        if positions is None:
            return
        start, hw, end = positions
        if self._leader_state is not None:
            self._leader_saw_end(end)
            start, end = max(start, self.log_start_offset), max(end, self.log_end_offset)
            hw = self._leader_state.high_watermark
        self._set_positions(start, hw, end)

    def _set_positions(self, start, hw, end):
        if (start, hw, end) != (self.log_start_offset, self.high_watermark, self.log_end_offset):
            self.log_start_offset, self.high_watermark, self.log_end_offset = start, hw, end
            self._on_change(self)

    # -- Produce ----------------------------------------------------------------------------

    def check_enough_replicas_reach_offset(self, offset):
        if self.is_deleted:
            return True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ls = self._leading()
        if ls is None:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ls.check_enough_replicas_reach_offset(offset)

    async def append(self, records, *, acks, timeout_ms):
        await self._ready.wait()
        ls = self._leading()
        if ls is None:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                error_message=f"broker {self._broker_id} does not lead "
                                              f"{self.topic}-{self.index}")
        code = ls.can_append(acks)
        if code:
            return AppendResult(code, error_message=f"the ISR {list(ls.isr)} is smaller than "
                                                    f"min.insync.replicas={ls.effective_min_isr()}")
        self._appends += 1
        self._appends_done.clear()
        # The count drops when the storage call ends, even if this coroutine is cancelled
        # first: a role change must wait for the write itself.
        task = asyncio.ensure_future(self._io.run(self._append_as_leader, records))
        task.add_done_callback(self._append_landed)
        result, positions = await asyncio.shield(task)
        self.observe(positions)
        return await self.await_acks(result, acks, timeout_ms)

    def _append_landed(self, _task):
        self._appends -= 1
        if not self._appends:
            self._appends_done.set()

    # -- Fetch ------------------------------------------------------------------------------

    async def read(self, offset, max_bytes, *, isolation=Isolation.HIGH_WATERMARK,
                   replica_id=CONSUMER_REPLICA_ID, current_leader_epoch=-1, zero_copy=True,
                   last_fetched_epoch=-1, follower_log_start_offset=-1):
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            return ReadResult(code)
        ls = self._leader_state
        if ls is None:
            return ReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if replica_id >= 0:
            code = ls.check_follower_fetch(replica_id, current_leader_epoch)
            if code:
                return ReadResult(code)
            isolation = Isolation.LOG_END
        result = await self._io.run(self._read_checked, offset, max_bytes, isolation,
                                    last_fetched_epoch, zero_copy, on_abandon=ReadResult.release)
        if result.log_end_offset >= 0:
            self.observe((result.log_start_offset, result.high_watermark, result.log_end_offset))
        if (replica_id >= 0 and result.error_code == ErrorCode.NONE
                and result.diverging_epoch is None and self._leader_state is ls
                and replica_id in ls.followers):
            outcome = ls.on_follower_fetch(replica_id, offset, follower_log_start_offset,
                                           self._clock(), leader_end_offset=result.log_end_offset)
            if outcome.hw_advanced:
                self._hw_moved()
            if outcome.expand is not None:
                self._spawn(self._alter(ls, outcome.expand), self._alters)
            # The follower learns the HW its own fetch may just have moved.
            result.high_watermark = result.last_stable_offset = ls.high_watermark
        return result

    # -- Offsets (leader only) -------------------------------------------------------------

    async def list_offset(self, timestamp, *, current_leader_epoch=-1,
                          isolation=Isolation.HIGH_WATERMARK):
        self._check_leader(current_leader_epoch)
        ls = self._leader_state
        # KIP-207: while a new leader's HW is below its epoch start, records the old
        # leader may have acknowledged are hidden: the latest offset is not known yet.
        if ls.high_watermark < ls.leader_epoch_start_offset and (
                timestamp == LATEST_TIMESTAMP or timestamp >= 0):
            found = None
            if timestamp >= 0:
                found = await super().list_offset(timestamp,
                                                  current_leader_epoch=current_leader_epoch,
                                                  isolation=isolation)
            if found is None or found[0] < 0:
                raise PartitionError(ErrorCode.OFFSET_NOT_AVAILABLE,
                                     f"the high watermark of {self.topic}-{self.index} is "
                                     f"below the start of leader epoch {ls.leader_epoch}")
            return found
        return await super().list_offset(timestamp, current_leader_epoch=current_leader_epoch,
                                         isolation=isolation)

    async def end_offset_for_epoch(self, epoch, *, current_leader_epoch=-1):
        self._check_leader(current_leader_epoch)
        return await super().end_offset_for_epoch(epoch, current_leader_epoch=current_leader_epoch)

    async def active_producers(self):
        self._check_leader(-1)
        return await super().active_producers()

    async def delete_records(self, offset):
        self._check_leader(-1)
        return await super().delete_records(offset)

    # -- ISR changes ------------------------------------------------------------------------

    async def check_isr(self, now=None):
        """The periodic ISR check: propose dropping the followers that fell behind for
        longer than the lag time; the AlterPartition exchange runs in the background
        (:meth:`isr_updates_settled` awaits it). Returns the proposal, or None."""
        ls = self._leading()
        if ls is None:
            return None
        proposal = ls.propose_shrink(now)
        if proposal is not None:
            self._spawn(self._alter(ls, proposal), self._alters)
        return proposal

    async def isr_updates_settled(self):
        """Wait until no AlterPartition exchange is running."""
        while self._alters:
            await asyncio.gather(*list(self._alters), return_exceptions=True)

    async def _alter(self, ls, proposal):
        """Send ``proposal`` until the controller's answer is not "retry", or the
        leadership it was made under is over. An answer that leaves it in flight parks
        it until a newer controller is heard of (see the module docstring)."""
        self._parked = None     # only one change is in flight: any parked one is over
        while True:
            sent_under = self._controller_epoch()
            try:
                result = await self._alter_partition(proposal)
            except Exception as exc:   # noqa: BLE001 -- unreachable controller: retried
                logger.warning("%s: AlterPartition %s failed: %s", self, proposal, exc)
                result = None
            if self._leader_state is not ls:
                return
            if result is not None:
                ls.min_insync_replicas = self._min_isr()
                outcome = ls.on_alter_partition_result(proposal, result, self._clock())
                if outcome.action is AlterAction.COMMITTED:
                    self._partition_epoch = ls.partition_epoch
                    if proposal.kind == "shrink":
                        self.isr_shrinks += 1
                    else:
                        self.isr_expands += 1
                    logger.info("%s: ISR now %s", self, list(ls.isr))
                    self._hw_moved()
                if outcome.action is not AlterAction.RETRY:
                    if not self._holds(ls, proposal):
                        return
                    if self._controller_epoch() <= sent_under:
                        self._parked = (ls, proposal)
                        return
                    logger.info("%s: AlterPartition %s answered %s by an older controller; "
                                "sending it to the new one", self, proposal,
                                outcome.action.value)
            await asyncio.sleep(self._alter_backoff)
            if not self._holds(ls, proposal):
                return

    def _holds(self, ls, proposal):
        """Whether ``proposal`` is still the change in flight of the current leadership."""
        state = ls.state
        return self._leader_state is ls and state.in_flight and state.proposal == proposal

    def controller_changed(self):
        """A newer controller was heard of: send it the change an older one left waiting
        for metadata, if that change is still in flight (Kafka's AlterPartitionManager
        likewise sends what it holds to whichever controller is current)."""
        parked, self._parked = self._parked, None
        if parked is not None and self._holds(*parked):
            logger.info("%s: AlterPartition %s sent again to the new controller", self,
                        parked[1])
            self._spawn(self._alter(*parked), self._alters)

    def _spawn(self, coro, tasks):
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def close(self):
        """Stop the background work (AlterPartition exchanges, HW pins)."""
        tasks = list(self._tasks | self._alters)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- Follower ---------------------------------------------------------------------------

    def fetch_position(self, isolation):
        """Partition's position for a delayed fetch (event loop, no I/O); (-1, -1) when
        not leading, so that fetches waiting here read again and learn it (Kafka completes
        them when leadership moves)."""
        if self._leader_state is None:
            return -1, -1
        return Partition.fetch_position(self, isolation)
