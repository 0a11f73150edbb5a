"""The leader role of a replicated partition: the leader state's rules applied to the
partition's traffic, and the ISR changes sent to the controller.

Theory of operation. While this broker leads, a
:class:`~kqlite.cluster.rules.leader_state.LeaderState` (``RoleState.leader_state``)
holds the rules: who is in sync, where the high watermark (HW) is, which ISR change to
ask for. The partition (partition.py) does the storage work and tells this role what it
saw:

- the leader's log end after an append or a read (:meth:`LeaderRole.saw_end`), and a
  follower's fetch that passed the checks and was not answered with a DivergingEpoch
  (:meth:`LeaderRole.follower_fetched`): where that follower is. Either may move the
  HW; a fetch may also bring an ISR expansion to propose.
- The HW moves only when the leader state says so. The role then holds the new HW
  (HighWatermarkPin), has it pinned in storage soon after (one pin under way at a time;
  a later move needs another), and tells the partition, which retries the delayed
  produces and fetches watching it.
- ISR changes go to the controller through ``alter_partition`` (AlterPartition), one
  at a time, retried while the controller asks for it; shrinks come from
  :meth:`LeaderRole.check_isr`, which the broker runs every
  ``isr_expiration_interval_ms``. An answer that leaves the change in flight until new
  metadata (a fencing or version error, an answer for other epochs) is only as good as
  the controller that gave it: the change is sent again when a newer controller is
  heard of (:meth:`LeaderRole.controller_changed`), or at once when one was heard of
  while the request was out. Otherwise a change refused by a controller that was
  already on its way out (a half-loaded one, after a session expiry) would wait for a
  LeaderAndIsr that no later controller has any reason to send.

Every exchange belongs to the leadership it was started under: once the role changes
(another LeaderState, or none), its answers are dropped.
"""

import asyncio
import logging

from ...errors import KqliteError
from ...storage.isolation import last_stable_offset
from ..rules.leader_state import AlterAction

__all__ = ["LeaderRole", "ALTER_RETRY_BACKOFF_MS"]

ALTER_RETRY_BACKOFF_MS = 50   # Kafka's DefaultAlterPartitionManager retries after 50 ms

logger = logging.getLogger("kqlite.cluster")


class LeaderRole:
    """The leader's side of one replicated partition (see the module docstring).

    ``role``: the RoleState shared with the partition; ``hw``: its HighWatermarkPin;
    ``clock()`` in ms; ``min_insync_replicas()``: the topic's setting now;
    ``alter_partition(IsrProposal)``: a coroutine answering an IsrCommit or an error code;
    ``controller_epoch()``: the highest controller epoch the broker has heard of;
    ``pin_storage()``: a coroutine pinning the held HW in storage; ``hw_moved(hw)``: the
    partition's HW is now ``hw``; ``owner`` names the partition in log lines.
    """

    def __init__(self, role, hw, *, owner, clock, min_insync_replicas, alter_partition,
                 controller_epoch, pin_storage, hw_moved,
                 alter_retry_backoff_ms=ALTER_RETRY_BACKOFF_MS):
        self._role = role
        self._hw = hw
        self._owner = owner
        self._clock = clock
        self._min_isr = min_insync_replicas
        self._alter_partition = alter_partition
        self._controller_epoch = controller_epoch
        self._pin_storage = pin_storage
        self._hw_moved = hw_moved
        self._alter_backoff = alter_retry_backoff_ms / 1000.0
        self._tasks = set()              # HW pins under way
        self._alters = set()             # AlterPartition exchanges under way
        self._parked = None              # (LeaderState, IsrProposal) awaiting metadata
        self._pin_pending = False
        self.isr_shrinks = 0             # committed ISR changes, for the metrics
        self.isr_expands = 0

    def leading(self):
        """The LeaderState, with the topic's current min.insync.replicas; None if not
        leading."""
        ls = self._role.leader_state
        if ls is not None:
            ls.min_insync_replicas = self._min_isr()
        return ls

    # -- High watermark ---------------------------------------------------------------------

    def hw_moved(self):
        """The leader state's HW may have moved: hold it, pin it in storage soon, tell the
        partition."""
        hw = self._role.leader_state.high_watermark
        self._hw.hold(hw)
        if not self._pin_pending:
            self._pin_pending = True
            self._spawn(self._pin(), self._tasks)
        self._hw_moved(hw)

    async def _pin(self):
        self._pin_pending = False    # later moves need another pin
        try:
            await self._pin_storage()
        except (KqliteError, OSError) as exc:   # the next lease pins it
            logger.debug("%s: cannot pin the high watermark: %s", self._owner, exc)

    def saw_end(self, end):
        """The leader's log ends at ``end`` (seen by an append or a read)."""
        ls = self._role.leader_state
        if ls is not None and end > ls.log_end_offset:
            if ls.on_leader_append(end, self._clock()):
                self.hw_moved()

    def follower_fetched(self, ls, replica_id, fetch_offset, log_start_offset, result, *,
                         leader_end_offset=None, heard=False):
        """Follower ``replica_id`` fetched at ``fetch_offset`` under the leadership ``ls``
        and got ``result`` (a ReadResult without error or DivergingEpoch): the leader state
        hears where it is, and the follower learns the HW its own fetch may just have
        moved. Nothing happens when the leadership changed during the read.

        ``result`` None: the fetch is heard before its read, which only a fetch that
        cannot diverge may be (its last fetched epoch is the leader's own), with
        ``leader_end_offset``, the leader's log end as last observed; ``heard``: it was,
        and its read's ``result`` only learns the HW."""
        if self._role.leader_state is not ls or replica_id not in ls.followers:
            return
        if not heard:
            if result is not None:
                leader_end_offset = result.log_end_offset
            outcome = ls.on_follower_fetch(replica_id, fetch_offset, log_start_offset,
                                           self._clock(), leader_end_offset=leader_end_offset)
            if outcome.hw_advanced:
                self.hw_moved()
            if outcome.expand is not None:
                self._spawn(self._alter(ls, outcome.expand), self._alters)
        if result is not None:
            result.high_watermark = ls.high_watermark
            result.last_stable_offset = last_stable_offset(ls.high_watermark)

    # -- ISR changes ------------------------------------------------------------------------

    async def check_isr(self, now=None):
        """The periodic ISR check: propose dropping the followers that fell behind for
        longer than the lag time; the AlterPartition exchange runs in the background
        (:meth:`isr_updates_settled` awaits it). Returns the proposal, or None."""
        ls = self.leading()
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
                logger.warning("%s: AlterPartition %s failed: %s", self._owner, proposal, exc)
                result = None
            if self._role.leader_state is not ls:
                return
            if result is not None:
                ls.min_insync_replicas = self._min_isr()
                outcome = ls.on_alter_partition_result(proposal, result, self._clock())
                if outcome.action is AlterAction.COMMITTED:
                    self._role.partition_epoch = ls.partition_epoch
                    if proposal.kind == "shrink":
                        self.isr_shrinks += 1
                    else:
                        self.isr_expands += 1
                    logger.info("%s: ISR now %s", self._owner, list(ls.isr))
                    self.hw_moved()
                if outcome.action is not AlterAction.RETRY:
                    if not self._holds(ls, proposal):
                        return
                    if self._controller_epoch() <= sent_under:
                        self._parked = (ls, proposal)
                        return
                    logger.info("%s: AlterPartition %s answered %s by an older controller; "
                                "sending it to the new one", self._owner, proposal,
                                outcome.action.value)
            await asyncio.sleep(self._alter_backoff)
            if not self._holds(ls, proposal):
                return

    def _holds(self, ls, proposal):
        """Whether ``proposal`` is still the change in flight of the current leadership."""
        state = ls.state
        return self._role.leader_state is ls and state.in_flight and state.proposal == proposal

    def controller_changed(self):
        """A newer controller was heard of: send it the change an older one left waiting
        for metadata, if that change is still in flight (Kafka's AlterPartitionManager
        likewise sends what it holds to whichever controller is current)."""
        parked, self._parked = self._parked, None
        if parked is not None and self._holds(*parked):
            logger.info("%s: AlterPartition %s sent again to the new controller", self._owner,
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
