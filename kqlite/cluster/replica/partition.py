"""ReplicatedPartition: one partition of a cluster broker, as leader or as follower
(Kafka's ``Partition`` in ZooKeeper mode), behind the same seam as the single broker's.

Theory of operation. The object is the server's partition seam
(kqlite/server/partition.py, by way of LocalPartition's storage calls) and the
fetcher's FollowerReplica. It holds two role objects over the state they share, passed
to each explicitly: the RoleState (role_state.py: which role is in force, the epochs,
the replicas) and the HighWatermarkPin (high_watermark.py: the HW storage must keep).

- As leader, the :class:`~kqlite.cluster.replica.leader_role.LeaderRole` applies the
  leader state's rules: produce appends with the leader epoch (refused up front with
  NOT_ENOUGH_REPLICAS when an ``acks=-1`` produce finds the ISR below
  ``min.insync.replicas``); a follower's fetch (``read`` with its replica id) first
  checks its epochs, then may be answered with a DivergingEpoch instead of records,
  else reads to the log end (its isolation, LOG_END, is the request's:
  ``storage.isolation.isolation_of``) and tells the leader role where the follower is.
  The HW moves only when the leader state says so, and the last stable offset with it
  (``storage.isolation.last_stable_offset`` over the first unstable offset storage last
  reported); then the delayed produces and fetches watching the partition are retried.
  A transaction is stable only once the HW passes its marker, which storage learns when
  the new HW is pinned: the positions that pin reads are observed too, so a
  read_committed fetch waiting here wakes when the marker's HW advance moves the last
  stable offset (Kafka's DelayedFetch, which compares the LSO for read_committed). ISR
  changes go to the controller from the leader role (leader_role.py).
- An offset-preserving mirror's append (``append_as_mirror``, kqlite/server/mirror_append.py)
  is a leader append like a produce: admitted as an ``acks=-1`` one, the batches keep
  their offsets, producer ids, sequences and CRCs and take the leader's epoch, the
  followers fetch them as any batches, and the answer waits for the HW.
- As follower, the :class:`~kqlite.cluster.replica.follower_role.FollowerRole` does
  what the fetcher asks (follower_role.py): where to fetch from, append the leader's
  batches as they are, truncate by leader epoch, start over when out of range.

The role changes are the partition's own. The controller decides the role
(LeaderAndIsr: ``become_leader``, ``become_follower``; StopReplica: ``stop_replica``),
each refused for an older leader or partition epoch. A role change first waits until
the appends in flight have landed and holds new ones back (``_quiesce``), so that a new
leader epoch starts exactly at the log end and a new follower's first fetch starts at a
log end nothing will move. Then:

- becoming leader with a new epoch records ``(epoch, log end)`` in the leader-epoch
  cache (a storage thread) and starts a LeaderState in which the followers in the ISR
  count as caught up now; already leading, a new epoch resets the followers' clocks and
  the same epoch only takes the new assignment and ISR (LeaderState.update_leadership);
- becoming follower drops the leader state (waiting acks=-1 produces then complete with
  NOT_LEADER_OR_FOLLOWER) and, for a new epoch on a log that has no leader epoch at
  all, truncates to the high watermark (truncation.initial_fetch_state);
- either way, the high watermark a role starts with is the one the partition held, or
  after a restart the last checkpointed one (log_rules.checkpointed_high_watermark).

An application thread of the in-process broker (in_process.py) appends without the
event loop's hops: :meth:`append_in_process` admits the append under ``_admission`` (a
thread lock the role changes take too, so an admitted append is one ``_quiesce`` waits
for and a refused one never starts), writes it in the application's own thread (a
storage call like any other: the event loop still never waits on disk) and hands only
the positions and the acks wait to the loop, where the acks=-1 wait is a callback in the
delayed-produce purgatory (Purgatory.watch): the check that sees the HW pass the records
answers the application's thread, with no task to resume in between.

A follower's Fetch is heard by every partition it names as it arrives
(:meth:`follower_fetch_arrived`, called by the replica manager before any partition of
the request is read), so the HW of the request's last partition does not wait for the
storage reads of the ones before it; and the reads themselves are gathered into one
storage-thread call per Fetch, as a single broker's are (``gathers_reads``: the leader's
work around each read, before and after, is :meth:`read`'s own).

Storage stays off the event loop (every log operation runs in a storage thread on a
leased log), and so does the HW: each lease first pins the log's HW at the value the
partition holds, because a log that was closed and reopened would otherwise let its HW
follow the log end.
"""

import asyncio
import contextlib
import logging
import threading

from ...errors import KqliteError, UnknownTopicError
from ...format.validate import AppendOrigin
from ...protocol import ErrorCode
from ...server.local_partition import LATEST_TIMESTAMP, LocalPartition
from ...server.partition import (CONSUMER_REPLICA_ID, AppendResult, Partition, PartitionError,
                                 ReadResult)
from ...storage import Isolation
from ...storage.isolation import OffsetSnapshot, last_stable_offset
from ..fetcher.follower import FollowerReplica
from ..rules.leader_state import DEFAULT_LAG_TIME_MS, LeaderState
from ..rules.truncation import initial_fetch_state
from .follower_role import FollowerRole
from .high_watermark import HighWatermarkPin
from .leader_role import ALTER_RETRY_BACKOFF_MS, LeaderRole
from .log_rules import checkpointed_high_watermark, open_leader_epoch, truncate_replica
from .recent_batches import RecentBatches
from .role_state import RoleState

__all__ = ["ReplicatedPartition"]

logger = logging.getLogger("kqlite.cluster")

# How many consistent (last fetched epoch, offset) pairs a leader remembers between role
# changes: one per idle follower of the partition is what is needed.
_AGREED_LIMIT = 16


class ReplicatedPartition(LocalPartition, FollowerReplica):
    """A partition replicated over several brokers. Besides LocalPartition's arguments:
    ``clock()`` in ms; ``alter_partition(IsrProposal)``, a coroutine answering an
    IsrCommit or an error code; ``min_insync_replicas()``, the topic's setting now;
    ``is_eligible(broker_id)``, whether that broker may join the ISR (alive in the
    metadata cache); ``lag_time_ms``, Kafka's replica.lag.time.max.ms. ``leader_epoch``
    is the epoch known before the first LeaderAndIsr (-1, as a new Kafka Partition).
    ``controller_epoch()``, the highest controller epoch the broker has heard of (default:
    never changes); the broker calls :meth:`controller_changed` when it grows.
    ``producer_ids()``, the broker's producer id allocator (ZooKeeper's blocks), in which
    a mirror append reserves the producer ids it copies (default: the data dir's).
    ``recent_budget``, the broker's MemoryBudget for the leaders' last appends
    (recent_batches.py; default: this partition's own).

    ``leader_role`` and ``follower_role`` are the two role objects (see the module
    docstring)."""

    def __init__(self, db, io, topic, index, *, broker_id, delayed_produce, on_change, clock,
                 alter_partition, min_insync_replicas, is_eligible, leader_epoch=-1,
                 lag_time_ms=DEFAULT_LAG_TIME_MS, alter_retry_backoff_ms=ALTER_RETRY_BACKOFF_MS,
                 topic_id=None, controller_epoch=None, producer_ids=None, recent_budget=None):
        super().__init__(db, io, topic, index, broker_id=broker_id, leader_epoch=leader_epoch,
                         delayed_produce=delayed_produce, on_change=on_change)
        self.topic_id = topic_id
        self._producer_ids = producer_ids or (lambda: None)
        self.lag_time_ms = lag_time_ms
        self._clock = clock
        self._min_isr = min_insync_replicas
        self._is_eligible = is_eligible
        self._role = RoleState(broker_id, leader_epoch)
        self._hw = HighWatermarkPin()
        # The first unstable offset storage last reported below its HW (None: none there).
        self._first_unstable = None
        self.leader_role = LeaderRole(
            self._role, self._hw, owner=self, clock=clock,
            min_insync_replicas=min_insync_replicas, alter_partition=alter_partition,
            controller_epoch=controller_epoch or (lambda: -1),
            alter_retry_backoff_ms=alter_retry_backoff_ms, pin_storage=self._pin_storage,
            hw_moved=self._show_high_watermark)
        self.follower_role = FollowerRole(
            self._role, self._hw, topic=topic, index=index, run_on_log=self._run_on_log,
            set_positions=self._set_positions)
        self._leadership = asyncio.Lock()
        self._ready = asyncio.Event()    # cleared while the role changes
        self._ready.set()
        self._appends = 0
        self._appends_done = asyncio.Event()
        self._appends_done.set()
        # _ready for threads outside the loop, and the lock guarding it and _appends.
        self._admission = threading.Lock()
        self._admitting = True
        # The leader's last appends, for its followers' next fetch (recent_batches.py),
        # and the (last fetched epoch, fetch offset) pairs a storage read of this role
        # found not diverging, so an idle follower's fetch needs no storage; both are
        # forgotten at each role change (_forget_recent).
        self._recent = RecentBatches(budget=recent_budget)
        self._agreed = set()
        self.recent_reads = 0         # follower reads answered from memory, counted

    # -- Leadership -------------------------------------------------------------------------

    @property
    def is_leader(self):
        return self._role.leading

    @property
    def is_follower(self):
        return self._role.following

    @property
    def leader_id(self):
        role = self._role
        return role.broker_id if role.leading else role.leader

    @property
    def leader_epoch(self):
        return self._role.leader_epoch

    @property
    def partition_epoch(self):
        return self._role.partition_epoch

    @property
    def replicas(self):
        return list(self._role.replicas)

    @property
    def isr(self):
        ls = self._role.leader_state
        return list(ls.isr) if ls is not None else list(self._role.follower_isr)

    @property
    def offline_replicas(self):
        return [r for r in self._role.replicas
                if r != self._broker_id and not self._is_eligible(r)]

    @property
    def under_replicated(self):
        ls = self._role.leader_state
        return ls is not None and ls.under_replicated

    @property
    def under_min_isr(self):
        ls = self.leader_role.leading()
        return ls is not None and ls.under_min_isr

    @property
    def checkpoint_high_watermark(self):
        """The HW ``replication-offset-checkpoint`` records for this partition: the one
        storage holds for the role (-1 before the first role: the file keeps its entry)."""
        return self._hw.value

    @property
    def isr_expiration_interval_ms(self):
        """How often the broker should call :meth:`check_isr` (half the lag time)."""
        return self.lag_time_ms / 2

    @property
    def isr_shrinks(self):
        """ISR shrinks the controller committed while this partition led, for the metrics."""
        return self.leader_role.isr_shrinks

    @property
    def isr_expands(self):
        """ISR expansions the controller committed while this partition led."""
        return self.leader_role.isr_expands

    def _check_leader(self, current_leader_epoch):
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            raise PartitionError(code)
        if not self._role.leading:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self._broker_id} does not lead "
                                 f"{self.topic}-{self.index}")

    # -- Positions and the high watermark ---------------------------------------------------

    @contextlib.contextmanager
    def _lease(self):
        with self._db.leased_log(self.topic, self.index) as log:
            self._hw.apply(log)
            yield log

    async def _pin_storage(self):
        positions = await self._io.run(self._pin_in_thread)
        if self._role.leader_state is not None:
            self.observe(positions)

    def _pin_in_thread(self):
        """Pin the held HW; the positions storage has under it (its last stable offset is
        the one the new HW makes: a transaction whose marker it passed is stable now)."""
        with self._lease() as log:
            return self._positions(log)

    async def _run_on_log(self, action, fn, *args):
        return await self._io.run(self._storage_call, action, fn, *args)

    def _show_high_watermark(self, hw):
        """The leader role moved the HW: the delayed operations watching us are retried."""
        self._recent.discard_below(hw)
        self.high_watermark = hw
        self.last_stable_offset = last_stable_offset(hw, self._first_unstable)
        self._on_change(self)

    def _stable_under(self, positions, hw):
        """The last stable offset under the leader's ``hw``, learning the first unstable
        offset from ``positions`` (storage's, under the HW it had pinned): storage's LSO
        below its HW is that offset; equal to it, none is known below. A transaction
        begun past storage's HW is then unknown until the next pin reads it (the fetches
        woken meanwhile read again, as Kafka's do on any change)."""
        if positions.last_stable_offset < positions.high_watermark:
            self._first_unstable = positions.last_stable_offset
        else:
            self._first_unstable = None
        return last_stable_offset(hw, self._first_unstable)

    def observe(self, positions):
        """Fold the positions a storage call saw (an OffsetSnapshot): the leader's only
        grow and its log end feeds the leader role; a follower's are what its last call
        left."""
        if positions is None:
            return
        ls = self._role.leader_state
        if ls is not None:
            self.leader_role.saw_end(positions.log_end_offset)
            positions = self._as_leader(positions, ls)
        self._set_positions(positions)

    def _as_leader(self, positions, ls):
        """``positions`` with the leader state's HW, which may be ahead of the one storage
        kept (pinned later), and the last stable offset that follows it; the log start
        and end never go back."""
        hw = ls.high_watermark
        return OffsetSnapshot(max(positions.log_start_offset, self.log_start_offset),
                              self._stable_under(positions, hw), hw,
                              max(positions.log_end_offset, self.log_end_offset))

    def _set_positions(self, positions):
        if positions != self.offsets():
            self.log_start_offset, self.last_stable_offset, self.high_watermark, \
                self.log_end_offset = positions
            self._on_change(self)

    # -- Produce ----------------------------------------------------------------------------

    def check_enough_replicas_reach_offset(self, offset):
        if self.is_deleted:
            return True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ls = self.leader_role.leading()
        if ls is None:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ls.check_enough_replicas_reach_offset(offset)

    gathers_appends = False   # a leader's append checks its role and the ISR around it

    async def append(self, records, *, acks, timeout_ms, verification_guard=None):
        return await self._leader_append(acks, timeout_ms, self._append_as_leader, records,
                                         verification_guard)

    async def append_as_coordinator(self, records, *, acks, timeout_ms, verification_guard=None):
        return await self._leader_append(acks, timeout_ms, self._append_as_leader, records,
                                         verification_guard, AppendOrigin.COORDINATOR)

    async def append_marker(self, producer_id, producer_epoch, coordinator_epoch, commit, *,
                            timeout_ms):
        return await self._leader_append(-1, timeout_ms, self._append_marker, producer_id,
                                         producer_epoch, coordinator_epoch, commit)

    async def append_as_mirror(self, records, *, timeout_ms):
        """An offset-preserving mirror's batches at their own offsets, on the leader only,
        stamped with its leader epoch (mirror_append.py's leader-epoch rule), replicated as
        any batch and answered once the HW covers them: acks=-1, refused up front under
        ``min.insync.replicas``."""
        return await self._leader_append(-1, timeout_ms, self._append_mirrored_as_leader,
                                         records)

    def _append_mirrored_as_leader(self, records):
        # In the storage thread of an admitted append: the epoch cannot change under it.
        return self._append_mirrored(records, self.leader_epoch)

    def _mirror_producer_ids(self):
        return self._producer_ids() or self._db.producer_ids

    async def begin_verification(self, producer_id, sequence, epoch):
        self._check_leader(-1)
        return await super().begin_verification(producer_id, sequence, epoch)

    async def _leader_append(self, acks, timeout_ms, append, *args):
        """``append(*args)`` (one of LocalPartition's storage calls) as this partition's
        leader: refused when it does not lead, or when the ISR is too small for ``acks``."""
        await self._ready.wait()
        ls = self.leader_role.leading()
        if ls is None:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                error_message=f"broker {self._broker_id} does not lead "
                                              f"{self.topic}-{self.index}")
        code = ls.can_append(acks)
        if code:
            return AppendResult(code, error_message=f"the ISR {list(ls.isr)} is smaller than "
                                                    f"min.insync.replicas={ls.effective_min_isr()}")
        with self._admission:
            self._appends += 1
            self._appends_done.clear()
        # The count drops when the storage call ends, even if this coroutine is cancelled
        # first: a role change must wait for the write itself.
        task = asyncio.ensure_future(self._io.run(append, *args))
        task.add_done_callback(self._append_landed)
        result, positions = await asyncio.shield(task)
        self.observe(positions)
        return await self.await_acks(result, acks, timeout_ms)

    def _append_landed(self, _task):
        with self._admission:
            self._appends -= 1
            if not self._appends:
                self._appends_done.set()

    def append_in_process(self, records, acks, timeout_ms, loop, answer):
        """The leader append of an application thread (see the module docstring): False
        when it is not admitted (a role changing, not leading, an ISR too small), and the
        caller takes the event loop's path, which answers with the reason. Otherwise the
        records are written here and ``answer`` (a concurrent Future) gets the AppendResult
        on the loop once ``acks`` is satisfied (at once for acks 0 and 1 and for a refused
        write)."""
        with self._admission:
            if not self._admitting:
                return False
            ls = self.leader_role.leading()
            if ls is None or ls.can_append(acks):
                return False
            self._appends += 1
            self._appends_done.clear()
        try:
            result, positions = self._append_as_leader(records)
        except BaseException:
            loop.call_soon_threadsafe(self._append_landed, None)
            raise
        loop.call_soon_threadsafe(self._landed_in_process, result, positions, acks,
                                  timeout_ms, answer)
        return True

    def _landed_in_process(self, result, positions, acks, timeout_ms, answer):
        # The answer is set from the purgatory's check that sees the HW pass the records:
        # the application's thread wakes in the loop iteration that moved the HW.
        self._append_landed(None)
        self.observe(positions)
        self.watch_acks(result, acks, timeout_ms, answer.set_result)

    # -- Fetch ------------------------------------------------------------------------------

    # The replica manager gathers the reads of a Fetch into one storage-thread call; the
    # leader's work around each (epochs, the follower heard) is the same as :meth:`read`'s.
    gathers_reads = True

    async def read(self, offset, max_bytes, *, isolation=Isolation.HIGH_WATERMARK,
                   replica_id=CONSUMER_REPLICA_ID, current_leader_epoch=-1, zero_copy=True,
                   last_fetched_epoch=-1, follower_log_start_offset=-1):
        code, before = self._before_read(offset, replica_id, current_leader_epoch,
                                         last_fetched_epoch, follower_log_start_offset)
        if code:
            return ReadResult(code)
        result = await self._io.run(self._read_checked, offset, max_bytes, isolation,
                                    last_fetched_epoch, zero_copy, on_abandon=ReadResult.release)
        self._after_read(result, offset, replica_id, follower_log_start_offset, before)
        return result

    def before_gathered_read(self, fetch, replica_id):
        return self._before_read(fetch.fetch_offset, replica_id, fetch.current_leader_epoch,
                                 fetch.last_fetched_epoch, fetch.log_start_offset)

    def after_gathered_read(self, result, fetch, replica_id, before):
        self._after_read(result, fetch.fetch_offset, replica_id, fetch.log_start_offset,
                         before)
        ls = before[0]
        if (replica_id >= 0 and 0 <= fetch.last_fetched_epoch != ls.leader_epoch
                and not result.error_code and result.diverging_epoch is None
                and self._role.leader_state is ls):
            self._agree(fetch.last_fetched_epoch, fetch.fetch_offset)

    def _agree(self, epoch, offset):
        # Within one leadership the leader-epoch cache only gains the leader's own epoch
        # at the log end, which never makes a pair found consistent diverge. (A fetch
        # whose last epoch is the leader's own needs no memory: read_recent.)
        if len(self._agreed) >= _AGREED_LIMIT:
            self._agreed.clear()
        self._agreed.add((epoch, offset))

    def _forget_recent(self):
        """A role change: what the last appends and the consistency checks of the role
        before said is not used under the new one."""
        self._recent.clear()
        self._agreed.clear()

    def read_recent(self, fetch, replica_id, isolation, max_bytes, min_one):
        """On the loop, after ``before_gathered_read`` let ``fetch`` through: a follower's
        read answered without storage, from the batches this leader appended last
        (recent_batches.py), or with no records when it asks for the log end; None when
        only a storage read can answer it (a consumer's read, an isolation whose limit is
        not the log end, an offset the run does not start a batch at, a last fetched
        epoch whose consistency storage must check). ``max_bytes`` and ``min_one`` as for
        ``read_in_storage``."""
        ls = self._role.leader_state
        if replica_id < 0 or ls is None:
            return None
        positions = self.offsets()
        offset, end = fetch.fetch_offset, positions.log_end_offset
        if positions.read_limit(isolation) != end or \
                not positions.log_start_offset <= offset <= end:
            return None
        epoch = fetch.last_fetched_epoch
        if epoch >= 0 and epoch != ls.leader_epoch and (epoch, offset) not in self._agreed:
            return None
        if offset == end:
            records = b""
        else:
            records = self._recent.read(self._role.generation, offset, end, max_bytes,
                                        min_one)
            if records is None:
                return None
            self.recent_reads += 1
        result = ReadResult(records=records, size=len(records))
        result.set_offsets(positions)
        return result

    def _wrote(self, info):
        # In the thread of an admitted leader append: the role generation cannot change
        # before it lands (_quiesce waits for it).
        self._recent.add(self._role.generation, info.first_offset, info.last_offset + 1,
                         info.written)

    def _before_read(self, offset, replica_id, current_leader_epoch, last_fetched_epoch,
                     follower_log_start_offset):
        """On the loop, before a read's storage call: ``(error code refusing it, (the
        leader state read under, whether the follower was heard already))``."""
        code = self.check_leader_epoch(current_leader_epoch)
        if code:
            return code, None
        ls = self._role.leader_state
        if ls is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        heard = False
        if replica_id >= 0:
            code = ls.check_follower_fetch(replica_id, current_leader_epoch)
            if code:
                return code, None
            heard = self._hear_follower(ls, offset, replica_id, last_fetched_epoch,
                                        follower_log_start_offset)
        return ErrorCode.NONE, (ls, heard)

    def _after_read(self, result, offset, replica_id, follower_log_start_offset, before):
        """On the loop, after a read's storage call: its positions observed, and a
        follower's fetch told to the leader state it was read under."""
        ls, heard = before
        if result.log_end_offset >= 0:
            self.observe(result.offsets())
        if (replica_id >= 0 and result.error_code == ErrorCode.NONE
                and result.diverging_epoch is None):
            self.leader_role.follower_fetched(ls, replica_id, offset, follower_log_start_offset,
                                              result, heard=heard)

    def follower_fetch_arrived(self, offset, replica_id, current_leader_epoch,
                               last_fetched_epoch, follower_log_start_offset):
        """The replica manager's call for each partition of a follower's Fetch before
        any is read: the follower is heard here as :meth:`read` would hear it (hearing it
        again there changes nothing)."""
        ls = self._role.leader_state
        if ls is not None and self.check_leader_epoch(current_leader_epoch) == 0 \
                and ls.check_follower_fetch(replica_id, current_leader_epoch) == 0:
            self._hear_follower(ls, offset, replica_id, last_fetched_epoch,
                                follower_log_start_offset)

    def _hear_follower(self, ls, offset, replica_id, last_fetched_epoch,
                       follower_log_start_offset):
        """Whether the follower's fetch at ``offset`` was heard before its read: when its
        last batch is of this leadership, its log cannot diverge from ours, and with the
        offset in range its position counts now, and the HW an acks=all produce waits
        for moves without waiting for a storage thread."""
        if last_fetched_epoch != ls.leader_epoch or \
                not self.log_start_offset <= offset <= self.log_end_offset:
            return False
        self.leader_role.follower_fetched(ls, replica_id, offset, follower_log_start_offset,
                                          None, leader_end_offset=self.log_end_offset)
        return True

    def fetch_position(self, isolation):
        """Partition's position for a delayed fetch (event loop, no I/O); (-1, -1) when
        not leading, so that fetches waiting here read again and learn it (Kafka completes
        them when leadership moves)."""
        if not self._role.leading:
            return -1, -1
        return Partition.fetch_position(self, isolation)

    # -- Offsets (leader only) -------------------------------------------------------------

    async def list_offset(self, timestamp, *, current_leader_epoch=-1,
                          isolation=Isolation.HIGH_WATERMARK):
        self._check_leader(current_leader_epoch)
        ls = self._role.leader_state
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

    # -- ISR changes (the leader role's) ----------------------------------------------------

    async def check_isr(self, now=None):
        """The periodic ISR check (LeaderRole.check_isr); the proposal, or None."""
        return await self.leader_role.check_isr(now)

    async def isr_updates_settled(self):
        """Wait until no AlterPartition exchange is running."""
        await self.leader_role.isr_updates_settled()

    def controller_changed(self):
        """A newer controller was heard of (LeaderRole.controller_changed)."""
        self.leader_role.controller_changed()

    async def close(self):
        """Stop the background work (AlterPartition exchanges, HW pins), and give the
        last appends kept back to the broker's budget."""
        self._recent.close()
        await self.leader_role.close()

    # -- Following (the fetcher's FollowerReplica, done by the follower role) ---------------

    async def next_fetch_position(self):
        return await self.follower_role.next_fetch_position()

    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        return await self.follower_role.append_as_follower(
            records, high_watermark=high_watermark, log_start_offset=log_start_offset)

    async def truncate_for_diverging_epoch(self, epoch, end_offset):
        return await self.follower_role.truncate_for_diverging_epoch(epoch, end_offset)

    async def reset_for_out_of_range(self, leader_log_start_offset, leader_log_end_offset):
        return await self.follower_role.reset_for_out_of_range(leader_log_start_offset,
                                                               leader_log_end_offset)

    # -- Role changes -----------------------------------------------------------------------

    async def become_leader(self, leader_epoch, isr, replicas, partition_epoch, topic_id=None):
        """LeaderAndIsr making this broker the leader (Kafka's makeLeader). Returns an error
        code: STALE_CONTROLLER_EPOCH for an older leader epoch, NONE (and nothing
        changes) for an older partition epoch, UNKNOWN_TOPIC_OR_PARTITION when this
        broker is not a replica. A new epoch is recorded in the leader-epoch cache at the
        log end; the same epoch only updates the assignment and the ISR. Raises
        ValueError when the ISR does not hold this broker (no controller sends that)."""
        role = self._role
        async with self._leadership:
            if leader_epoch < role.leader_epoch:
                return ErrorCode.STALE_CONTROLLER_EPOCH
            if partition_epoch < role.partition_epoch:
                logger.info("%s: ignoring leadership at partition epoch %d, already at %d",
                            self, partition_epoch, role.partition_epoch)
                return ErrorCode.NONE
            if self._broker_id not in replicas:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if topic_id is not None:
                self.topic_id = topic_id
            ls = role.leader_state
            await self._quiesce()
            try:
                if ls is None or leader_epoch > ls.leader_epoch:
                    try:
                        seen = await self._io.run(self._open_epoch, leader_epoch)
                        end = seen.log_end_offset
                    except UnknownTopicError:
                        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    except (KqliteError, OSError) as exc:
                        logger.error("%s: cannot start leader epoch %d: %s", self,
                                     leader_epoch, exc)
                        return ErrorCode.KAFKA_STORAGE_ERROR
                if ls is None:
                    ls = LeaderState(self._broker_id, replicas, isr, leader_epoch, partition_epoch,
                                     end, end, seen.high_watermark,
                                     lag_time_ms=self.lag_time_ms, clock=self._clock,
                                     min_insync_replicas=self._min_isr(),
                                     is_eligible=self._is_eligible)
                    hw = ls.high_watermark
                    self._set_positions(OffsetSnapshot(seen.log_start_offset,
                                                       self._stable_under(seen, hw), hw, end))
                else:
                    if leader_epoch > ls.leader_epoch:
                        self.leader_role.saw_end(end)
                    ls.min_insync_replicas = self._min_isr()
                    if not ls.update_leadership(replicas, isr, leader_epoch, partition_epoch):
                        return ErrorCode.NONE
                role.leader_state = ls
                role.following, role.leader = False, self._broker_id
                role.leader_epoch, role.partition_epoch = leader_epoch, partition_epoch
                role.replicas = tuple(replicas)
                role.generation += 1
                self._forget_recent()
                self.leader_role.hw_moved()
            finally:
                self._reopen()
        logger.info("%s: leader with ISR %s", self, list(ls.isr))
        return ErrorCode.NONE

    def _open_epoch(self, epoch):
        """In a storage thread: record ``epoch`` at the log end; the OffsetSnapshot then."""
        with self._lease() as log:
            end = open_leader_epoch(log, epoch)
            self._hw.set(log, self._known_hw(log, log.start_offset, end))
            return log.offset_snapshot()

    async def become_follower(self, leader_id, leader_epoch, isr, replicas, partition_epoch):
        """LeaderAndIsr making this broker a follower of ``leader_id`` (Kafka's
        makeFollower). Returns True when the leader epoch increased: the fetcher must
        start over from :meth:`next_fetch_position`. An older leader or partition epoch
        changes nothing (False). Produces waiting for acks=-1 complete with
        NOT_LEADER_OR_FOLLOWER."""
        role = self._role
        async with self._leadership:
            if leader_epoch < role.leader_epoch or partition_epoch < role.partition_epoch:
                return False
            new_epoch = leader_epoch > role.leader_epoch
            await self._quiesce()
            try:
                role.leader_state = None
                role.following, role.leader = True, leader_id
                role.leader_epoch, role.partition_epoch = leader_epoch, partition_epoch
                role.replicas, role.follower_isr = tuple(replicas), tuple(isr)
                role.generation += 1
                self._forget_recent()
                self._on_change(self)
                try:
                    positions = await self._io.run(self._start_following, new_epoch)
                except (KqliteError, OSError) as exc:
                    logger.error("%s: cannot read the log to follow %d: %s", self, leader_id, exc)
                else:
                    self._set_positions(positions)
            finally:
                self._reopen()
        logger.info("%s: following broker %d", self, leader_id)
        return new_epoch

    def _start_following(self, new_epoch):
        """In a storage thread: the follower's HW, and -- for a new epoch on a log
        without leader epochs -- the truncation to it (truncation.initial_fetch_state)."""
        with self._lease() as log:
            start, end = log.start_offset, log.end_offset
            hw = self._hw.set(log, self._known_hw(log, start, end))
            if new_epoch:
                begin = initial_fetch_state(log.epochs.latest_epoch, end, hw)
                if begin.truncate_first and begin.offset < end:
                    truncate_replica(log, begin.offset)
                    self._hw.set(log, log.high_watermark)
            return log.offset_snapshot()

    async def stop_replica(self):
        """StopReplica without deletion: neither lead nor follow any more."""
        role = self._role
        async with self._leadership:
            await self._quiesce()
            try:
                role.leader_state, role.following, role.leader = None, False, -1
                role.generation += 1
                self._forget_recent()
            finally:
                self._reopen()
        self._on_change(self)

    async def _quiesce(self):
        with self._admission:
            self._admitting = False
        self._ready.clear()
        await self._appends_done.wait()

    def _reopen(self):
        with self._admission:
            self._admitting = True
        self._ready.set()

    def _known_hw(self, log, start, end):
        """The HW to start a role with: the one held, else the last checkpointed."""
        hw = self._hw.value
        if hw < 0:
            hw = checkpointed_high_watermark(self._db.fs, self._db.path, self.topic,
                                             self.index, start, end)
        return max(start, min(hw, end))

