"""The transaction coordinator's asyncio shell around its pure transitions (Kafka's
TransactionCoordinator and TransactionStateManager).

Theory of operation
-------------------
What a request does to a transactional id is decided by transitions.py (pure, the clock
passed in as ``now``: milliseconds of ``clock()``, the wall clock by default, since the
timestamps are logged). This shell

- answers first whether this broker coordinates the id now (:meth:`owner_error`): the
  runtime's NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, or LOAD_IN_PROGRESS while the
  id's partition of ``__transaction_state`` is not loaded yet;
- logs every change before acting on it (:meth:`_log`): the decision's metadata is held
  with its change pending, the transit is appended to the id's partition with acks=-1 and
  the transaction's timeout as Kafka does (errors mapped by append_errors.py), and only
  then is the change completed and the request answered. After the append it checks, as
  Kafka does, that the partition is still loaded in the same coordinator epoch; if not,
  the answer is NOT_COORDINATOR and nothing is completed (the next owner reads the log);
- once a PrepareCommit or PrepareAbort is logged, prepares the Complete* and hands the
  markers to a task (:meth:`_complete`), and answers the EndTxn NONE at once, before any
  marker is written, as Kafka does: the producer's wait for a commit is the logging of
  its decision. The producer's next request for the id (its next transaction's
  AddPartitionsToTxn, a retried EndTxn, an InitProducerId) finds the id still completing
  when it comes sooner than the markers are written; Kafka answers it
  CONCURRENT_TRANSACTIONS, after which the client backs off (librdkafka 20 ms for
  AddPartitionsToTxn, several whole transactions on a single broker). kqlite first waits for
  the completion, at most ``completion_wait_ms`` (:meth:`_after_completion`): on a single
  broker the markers are local appends, written while the producer prepares its next
  transaction. The task delivers them through the marker channel (markers.py: which
  outcome retries, drops or abandons), removes each partition once its marker is written
  (so DescribeTransactions lists only those still waiting), and logs the Complete* when
  none is left, retrying that write while the log is unavailable;
- every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, fences and aborts
  the transactions open past their timeout (:meth:`abort_timed_out`; on the single
  broker it first has the data dir decide what dead embedded owners left), and every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` expires the ids idle for
  ``transactional.id.expiration.ms`` (:meth:`remove_expired`: their tombstones, one batch
  per partition).

It is the coordinator runtime's CoordinatorState for ``__transaction_state``
(kqlite/server/coordinator/runtime.py): :meth:`load` takes a partition's ids over with the
coordinator epoch the runtime owns it in and resends the markers of every id found in
PrepareCommit or PrepareAbort (Ongoing ones are left to the timeout; on a shared data
dir, not those of an id a live embedded handle owns, which is writing them itself);
:meth:`unload` drops them and cancels their markers.

Other writers. On a cluster the partition's leader is its only writer, so what was loaded
and logged since is the whole state. The single broker's ``__transaction_state`` is the
data dir's, which embedded processes write too (``StateLog.shared_database``): before
every request and every scan the shell catches the partition up through the data dir's
store (``Database.transaction_state``, kqlite/db/transaction_state.py) and takes over, for
each id without a change in flight, a latest record that is not the state it holds
(another process wrote it); a tombstone forgets the id. Its own records, read back,
match what it holds and change nothing.
"""

import asyncio
import dataclasses
import logging
import time

from ....db.transaction_owners import held_by_live_owner
from ....db.transaction_recovery import recover_dead_owners
from ....db.transaction_state import read_transaction_records, transaction_record
from ....errors import KqliteError
from ....format.transaction_records import TransactionStatus
from ....protocol import ErrorCode
from ..runtime import CoordinatorState
from ..state_log import data_records
from .append_errors import TXN_APPEND_ERRORS
from .config import TransactionConfig
from .markers import MarkerOutcome, TxnMarker, marker_outcome
from .metrics import TransactionCounters
from .metadata import IllegalTransition, TxnMetadata
from .transitions import (NEED_PRODUCER_ID, abort_timed_out, add_partitions, end_txn,
                          expire, init_producer_id, prepare_complete, timed_out,
                          valid_timeout, verify_partitions)

__all__ = ["TransactionCoordinator"]

log = logging.getLogger("kqlite.server")

E = ErrorCode
S = TransactionStatus
_NO_PRODUCER = (-1, -1)


class TransactionCoordinator(CoordinatorState):
    """The transaction coordinator of one broker over ``runtime`` (the CoordinatorRuntime
    of ``__transaction_state``); see the module docstring. ``allocate_producer_id`` is an
    async callable returning a new producer id (the data dir's allocator on the single
    broker); ``markers`` the MarkerChannel; ``clock`` seconds on the wall clock."""

    def __init__(self, runtime, allocate_producer_id, markers, config=None, *, clock=time.time):
        self.runtime = runtime
        self.config = config or TransactionConfig()
        self.markers = markers
        self._allocate = allocate_producer_id
        self._clock = clock
        self._ids = {}          # transactional id -> TxnMetadata
        self._epochs = {}       # partition -> the coordinator epoch it was loaded in
        self._seen = {}         # transactional id -> offset of the stored record reconciled
        self._reconciled = {}   # partition -> every record up to this offset reconciled
        self._completions = {}  # transactional id -> the task writing its markers
        self._resends = set()   # tasks deciding whether to resend a loaded decision
        database = runtime.state_log.shared_database
        self._store = None if database is None else database.transaction_state
        self._tasks = []
        self._stopped = False
        self.counters = TransactionCounters()    # for /metrics (metrics.py)
        runtime.attach(self)

    def now(self):
        return int(self._clock() * 1000)

    # -- Lifecycle ----------------------------------------------------------------------------

    def start(self):
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._load_at_start()),
                       loop.create_task(self._every(self.config.abort_timed_out_interval_ms,
                                                    self.abort_timed_out)),
                       loop.create_task(self._every(self.config.remove_expired_interval_ms,
                                                    self.remove_expired))]

    async def _load_at_start(self):
        try:
            await self.runtime.load_at_start()
        except Exception:
            log.exception("transaction coordinator: loading %s failed; its transactions are "
                          "not served", self.runtime.topic.name)

    async def loaded(self):
        """Return once what the runtime loads at start is loaded."""
        if self._tasks:
            await asyncio.wait({self._tasks[0]})

    async def _every(self, interval_ms, job):
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await job()
            except Exception:
                log.exception("transaction coordinator: %s failed", job.__name__)

    async def stop(self):
        self._stopped = True
        await self.runtime.stop()
        tasks = self._tasks + list(self._completions.values()) + list(self._resends)
        self._tasks = []
        self._resends.clear()
        self._completions.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- The runtime's partitions (CoordinatorState) -------------------------------------

    def replay(self, batches):
        return read_transaction_records(data_records(batches))

    def load(self, index, replayed):
        epoch = self.runtime.coordinator_epoch(index)
        self._epochs[index] = epoch
        for tid, stored in replayed.items():
            self._seen[tid] = stored.offset
            if stored.value is None:
                self._ids.pop(tid, None)
            else:
                self._ids[tid] = TxnMetadata.from_value(tid, stored.value)
        resent = 0
        for tid, meta in list(self._ids.items()):
            if self.runtime.partition_for(tid) == index and meta.state in (
                    S.PREPARE_COMMIT, S.PREPARE_ABORT):
                if self._store is None:
                    self._after_prepare(tid, meta.producer_id, meta.producer_epoch,
                                        meta.state is S.PREPARE_COMMIT)
                else:
                    self._resends.add(asyncio.get_running_loop().create_task(
                        self._resend_unless_owned(tid, meta)))
                resent += 1
        log.debug("transaction coordinator: %s-%d loaded in coordinator epoch %s: %d id(s), "
                  "markers resent for %d", self.runtime.topic.name, index, epoch,
                  len(replayed), resent)

    async def _resend_unless_owned(self, tid, loaded):
        """On a shared data dir, the markers of a decision found at load are resent unless
        a live embedded handle owns the id (kqlite/db/transaction_owners.py): that handle
        is writing them, and would find its next transaction fenced by a late Complete*
        of ours. If it dies meanwhile, the next timed-out-transactions check finishes it."""
        try:
            try:
                alive = await self.runtime.state_log.run(
                    held_by_live_owner, self._store.db.fs, self._store.db.path, tid)
            except (KqliteError, OSError) as exc:
                log.warning("transaction coordinator: %s: cannot tell whether an embedded "
                            "owner holds it (%s); resending its markers", tid, exc)
                alive = False
            meta = self._ids.get(tid)
            if alive or meta is None or meta.pending is not None or \
                    (meta.state, meta.producer_epoch) != (loaded.state, loaded.producer_epoch):
                return
            self._after_prepare(tid, meta.producer_id, meta.producer_epoch,
                                meta.state is S.PREPARE_COMMIT)
        finally:
            self._resends.discard(asyncio.current_task())

    def unload(self, index):
        self._epochs.pop(index, None)
        self._reconciled.pop(index, None)
        for tid in [t for t in self._ids if self.runtime.partition_for(t) == index]:
            del self._ids[tid]
            self._seen.pop(tid, None)
            task = self._completions.pop(tid, None)
            if task is not None:
                task.cancel()

    # -- Ownership and other writers ------------------------------------------------------------

    async def owner_error(self, transactional_id):
        """NONE when this broker coordinates ``transactional_id`` now (its partition loaded
        and, on a shared data dir, caught up), else the code to answer with."""
        if self._stopped:
            return E.COORDINATOR_NOT_AVAILABLE
        code = self.runtime.owner_error(transactional_id)
        if code:
            return code
        index = self.runtime.partition_for(transactional_id)
        if index not in self._epochs:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if self._store is not None:
            await self._catch_up([index])
        return E.NONE

    async def _catch_up(self, indexes):
        """Take over what other processes wrote to the partitions ``indexes``; see the module
        docstring."""
        since = {index: self._reconciled.get(index, -1) for index in indexes}
        stored = await self.runtime.state_log.run(self._read_stored, since)
        for index, states in stored.items():
            if index not in self._epochs or not states:
                continue
            deferred = []
            for tid, record in reversed(states.items()):      # oldest first
                if record.offset <= self._seen.get(tid, -1):
                    continue
                held = self._ids.get(tid)
                if held is not None and held.pending is not None:
                    deferred.append(record.offset)  # our change in flight: looked at again
                    continue
                self._seen[tid] = record.offset
                if record.value is None:
                    if held is not None:
                        log.info("transaction coordinator: %s expired by another process", tid)
                        self._ids.pop(tid, None)
                elif held is None or held.to_value() != record.value:
                    self._ids[tid] = TxnMetadata.from_value(tid, record.value)
            newest = max(r.offset for r in states.values())
            self._reconciled[index] = min(deferred) - 1 if deferred else newest

    def _read_stored(self, since):
        """``{index: the ids of partition index whose latest record lies past since[index]}``
        from the data dir's store (in a storage thread)."""
        return {index: self._store.partition_states(index, newer_than=offset)
                for index, offset in since.items()}

    # -- Logging a change -----------------------------------------------------------------------

    async def _log(self, tid, hold, transit, *, on_failure=None, keep_pending=()):
        """Hold ``hold`` (a change to ``transit`` pending), log ``transit`` and complete
        it; the error code (NONE: logged and completed). See the module docstring."""
        index = self.runtime.partition_for(tid)
        epoch = self._epochs.get(index)
        if epoch is None:
            return E.NOT_COORDINATOR
        self._ids[tid] = hold
        record = transaction_record(tid, transit.to_value(), self.now())
        try:
            code = await self.runtime.append(tid, [record], timeout_ms=transit.timeout_ms,
                                             errors=TXN_APPEND_ERRORS)
        except (KqliteError, OSError) as exc:
            log.warning("transaction coordinator: logging %s %s failed: %s", tid,
                        transit.state.state_name, exc)
            code = E.COORDINATOR_NOT_AVAILABLE
        if self._epochs.get(index) != epoch:
            # Unloaded or loaded again meanwhile: the partition's next owner reads the log.
            return code or E.NOT_COORDINATOR
        current = self._ids.get(tid)
        if current is None or current.pending is not transit.state:
            log.warning("transaction coordinator: %s changed while %s was logged", tid,
                        transit.state.state_name)
            return E.NOT_COORDINATOR
        if code:
            self._ids[tid] = on_failure if on_failure is not None else \
                current.write_failed(keep_pending=code in keep_pending)
            log.info("transaction coordinator: %s: logging %s failed: %s", tid,
                     transit.state.state_name, ErrorCode(code).name)
            return code
        self._ids[tid] = current.complete(transit)
        return E.NONE

    async def _apply(self, tid, decision):
        """Hold and log what ``decision`` decided; its answer code."""
        if decision.transit is None:
            if decision.hold is not None:
                self._ids[tid] = decision.hold
            return decision.error
        code = await self._log(tid, decision.hold, decision.transit,
                               on_failure=decision.on_failure)
        return code or decision.error

    # -- Requests -------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id, timeout_ms, expected=None):
        """InitProducerId with a transactional id: ``(error, producer id, epoch)``;
        ``expected`` an ExpectedProducer (v3+) or None."""
        if not transactional_id:
            return (E.INVALID_REQUEST, *_NO_PRODUCER)
        if not valid_timeout(timeout_ms, self.config.max_timeout_ms):
            return (E.INVALID_TRANSACTION_TIMEOUT, *_NO_PRODUCER)
        new_producer_id = None
        await self._after_completion(transactional_id)
        while True:
            code = await self.owner_error(transactional_id)
            if code:
                return (code, *_NO_PRODUCER)
            try:
                decision = init_producer_id(self._ids.get(transactional_id), transactional_id,
                                            timeout_ms, expected, self.now(),
                                            max_timeout_ms=self.config.max_timeout_ms,
                                            new_producer_id=new_producer_id)
            except IllegalTransition as exc:
                # Kafka throws IllegalStateException (an epoch that cannot be bumped): the
                # request fails with UNKNOWN_SERVER_ERROR.
                log.error("InitProducerId %s: %s", transactional_id, exc)
                return (E.UNKNOWN_SERVER_ERROR, *_NO_PRODUCER)
            if decision is not NEED_PRODUCER_ID:
                break
            if new_producer_id is not None:
                raise RuntimeError(f"{transactional_id}: a second producer id was needed")
            try:
                new_producer_id = await self._allocate()
            except KqliteError as exc:
                # Kafka answers the allocator's exception (UNKNOWN_SERVER_ERROR).
                log.warning("InitProducerId %s: no producer id: %s", transactional_id, exc)
                return (E.UNKNOWN_SERVER_ERROR, *_NO_PRODUCER)
        transit = decision.transit
        if transit is None:
            await self._apply(transactional_id, decision)
            return (decision.error, *_NO_PRODUCER)
        code = await self._log(transactional_id, decision.hold, transit,
                               on_failure=decision.on_failure)
        if code:
            return (code, *_NO_PRODUCER)
        if transit.state is S.PREPARE_ABORT:       # an open transaction was fenced
            code = self._after_prepare(transactional_id, transit.producer_id,
                                       transit.producer_epoch, commit=False)
            return (code or E.CONCURRENT_TRANSACTIONS, *_NO_PRODUCER)
        meta = self._ids[transactional_id]
        log.info("transaction coordinator: initialized %s with producer id %d, epoch %d",
                 transactional_id, meta.producer_id, meta.producer_epoch)
        return E.NONE, meta.producer_id, meta.producer_epoch

    async def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        """AddPartitionsToTxn (and AddOffsetsToTxn's partition): the one error code of the
        request. ``partitions``: (topic, partition) pairs."""
        if not transactional_id:
            return E.INVALID_REQUEST
        await self._after_completion(transactional_id)
        code = await self.owner_error(transactional_id)
        if code:
            return code
        decision = add_partitions(self._ids.get(transactional_id), transactional_id,
                                  producer_id, producer_epoch, partitions, self.now())
        return await self._apply(transactional_id, decision)

    async def verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        """AddPartitionsToTxn v4+ VerifyOnly: ``{(topic, partition): error code}``."""
        if transactional_id:
            code = await self.owner_error(transactional_id)
            if code:
                return {tp: code for tp in partitions}
        return verify_partitions(self._ids.get(transactional_id), transactional_id,
                                 producer_id, producer_epoch, partitions)

    async def end_txn(self, transactional_id, producer_id, producer_epoch, commit):
        """EndTxn: the error code (NONE once the decision is logged: the markers follow)."""
        if not transactional_id:
            return E.INVALID_REQUEST
        await self._after_completion(transactional_id)
        code = await self.owner_error(transactional_id)
        if code:
            return code
        decision = end_txn(self._ids.get(transactional_id), transactional_id, producer_id,
                           producer_epoch, commit, self.now())
        code = await self._apply(transactional_id, decision)
        if code or decision.transit is None:
            return code
        return self._after_prepare(transactional_id, producer_id,
                                   decision.transit.producer_epoch, commit)

    async def _after_completion(self, transactional_id):
        """Wait, at most ``completion_wait_ms``, for the markers and the Complete* of the
        id's decided transaction when they are being written (see the module docstring)."""
        completion = self._completions.get(transactional_id)
        if completion is not None and not completion.done() and \
                self.config.completion_wait_ms:
            await asyncio.wait({completion}, timeout=self.config.completion_wait_ms / 1000.0)

    async def describe(self, transactional_id):
        """DescribeTransactions of one id: ``(error, TxnMetadata or None)``."""
        if not transactional_id:
            return E.INVALID_REQUEST, None
        code = await self.owner_error(transactional_id)
        if code:
            return code, None
        meta = self._ids.get(transactional_id)
        if meta is None or meta.state is S.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, meta

    async def list_transactions(self, state_names=(), producer_ids=(), duration_ms=-1):
        """ListTransactions over the partitions this broker coordinates: ``(error, unknown
        state names, [TxnMetadata])`` (Kafka's listTransactionStates: no Dead id;
        COORDINATOR_LOAD_IN_PROGRESS while a partition loads)."""
        if self.runtime.loading or (self._tasks and not self._tasks[0].done()):
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        if self._store is not None:
            await self._catch_up(list(self._epochs))
        states, unknown = set(), []
        for name in state_names:
            status = S.from_state_name(name)
            if status is None:
                unknown.append(name)
            else:
                states.add(status)
        now = self.now()
        wanted_pids = set(producer_ids)
        found = [meta for meta in self._ids.values()
                 if meta.state is not S.DEAD
                 and (not wanted_pids or meta.producer_id in wanted_pids)
                 and (not state_names or meta.state in states)
                 and not (duration_ms >= 0 and now - meta.start_ms <= duration_ms)]
        return E.NONE, unknown, sorted(found, key=lambda m: m.transactional_id)

    def metadata(self, transactional_id):
        """The id's metadata as held now (None: none); for tests and metrics."""
        return self._ids.get(transactional_id)

    def held(self):
        """Every id's metadata as held now (for metrics: no catching up, no I/O)."""
        return self._ids.values()

    def partitions_loaded(self):
        """``(loaded, loading)``: partitions of ``__transaction_state`` served now and
        being loaded (all that are not yet, while the start-up load runs)."""
        loaded = len(self._epochs)
        if self._tasks and not self._tasks[0].done() and self.runtime.ownership.loads_at_start:
            return loaded, max(0, self.runtime.placement.partition_count() - loaded)
        return loaded, len(self.runtime.ownership.loading)

    # -- Markers and completion ---------------------------------------------------------------

    def _after_prepare(self, tid, producer_id, producer_epoch, commit):
        """A Prepare* of ``tid`` is logged: prepare its Complete*, start its markers, and
        return the code the request answers (NONE unless the id changed meanwhile)."""
        decision = prepare_complete(self._ids.get(tid), producer_id, producer_epoch, commit,
                                    self.now())
        if decision.transit is None:
            return decision.error
        index = self.runtime.partition_for(tid)
        self._ids[tid] = decision.hold
        stale = self._completions.pop(tid, None)
        if stale is not None:
            stale.cancel()
        self._completions[tid] = asyncio.get_running_loop().create_task(
            self._complete(tid, index, self._epochs[index], commit, decision.transit))
        return E.NONE

    def _still_completing(self, tid, index, epoch, transit):
        meta = self._ids.get(tid)
        return not self._stopped and self._epochs.get(index) == epoch and meta is not None \
            and meta.pending is transit.state

    async def _complete(self, tid, index, epoch, commit, transit):
        """Write the markers of ``tid``'s decided transaction, then log ``transit`` (its
        Complete*); see the module docstring."""
        backoff = self.config.retry_backoff_ms / 1000.0
        try:
            while self._still_completing(tid, index, epoch, transit):
                meta = self._ids[tid]
                if not meta.partitions:
                    break
                known = await self.markers.leaders_known(meta.partitions)
                if not self._still_completing(tid, index, epoch, transit):
                    return
                meta = self._ids[tid]
                gone = meta.partitions - known
                if gone:
                    log.info("transaction coordinator: %s: no marker for %s: no such "
                             "partition any more", tid, sorted(gone))
                    meta = dataclasses.replace(meta, partitions=meta.partitions - gone)
                    self._ids[tid] = meta
                if not meta.partitions:
                    break
                marker = TxnMarker(meta.producer_id, meta.producer_epoch, epoch, commit,
                                   frozenset(meta.partitions))
                try:
                    results = await self.markers.deliver(marker)
                except Exception:    # noqa: BLE001 -- logged; every partition is retried
                    log.exception("transaction coordinator: %s: writing markers failed", tid)
                    results = dict.fromkeys(marker.partitions, E.KAFKA_STORAGE_ERROR)
                if not self._still_completing(tid, index, epoch, transit):
                    return
                if self._settle(tid, results):
                    return
                if self._ids[tid].partitions:
                    await asyncio.sleep(backoff)
            await self._log_completion(tid, index, epoch, transit, backoff)
        finally:
            if self._completions.get(tid) is asyncio.current_task():
                del self._completions[tid]

    def _settle(self, tid, results):
        """Drop the partitions whose marker is written (or will never be); True when the
        transaction's markers are abandoned."""
        meta = self._ids[tid]
        done = set()
        for tp, code in results.items():
            outcome = marker_outcome(code)
            if outcome is MarkerOutcome.ABANDONED:
                level = logging.WARNING if code in (E.INVALID_PRODUCER_EPOCH,
                                                    E.TRANSACTION_COORDINATOR_FENCED) \
                    else logging.ERROR
                log.log(level, "transaction coordinator: %s: the marker for %s-%d was "
                        "refused with %s; its markers are abandoned until %s is loaded "
                        "again", tid, tp[0], tp[1], ErrorCode(code).name,
                        self.runtime.topic.name)
                return True
            if outcome is MarkerOutcome.DROPPED:
                log.warning("transaction coordinator: %s: %s-%d takes no marker (%s)", tid,
                            tp[0], tp[1], ErrorCode(code).name)
            if outcome is not MarkerOutcome.RETRY:
                done.add(tp)
        self._ids[tid] = dataclasses.replace(meta, partitions=meta.partitions - done)
        return False

    async def _log_completion(self, tid, index, epoch, transit, backoff):
        while self._still_completing(tid, index, epoch, transit):
            code = await self._log(tid, self._ids[tid], transit,
                                   keep_pending=(E.COORDINATOR_NOT_AVAILABLE,
                                                 E.UNKNOWN_SERVER_ERROR))
            if code == E.NONE:
                self.counters.transaction_completed(transit.state is S.COMPLETE_COMMIT)
            if code in (E.NONE, E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
                return
            await asyncio.sleep(backoff)

    # -- Timeouts and expiration --------------------------------------------------------------

    async def abort_timed_out(self):
        """Fence and abort every transaction open past its timeout (Kafka's
        abortTimedOutTransactions); the ids aborted. On a shared data dir, first decide
        what dead embedded owners left (kqlite/db/transaction_recovery.py: only ids with
        an owner record whose lock is free), as any open of the data dir does."""
        if self._store is not None:
            await self.runtime.state_log.run(recover_dead_owners, self._store.db, True)
            await self._catch_up(list(self._epochs))
        aborted = []
        for tid in [t for t, m in self._ids.items() if timed_out(m, self.now())]:
            decision = abort_timed_out(self._ids.get(tid), self.now())
            if decision is None:
                continue
            code = await self._apply(tid, decision)
            if code:
                log.info("transaction coordinator: aborting %s past its timeout failed: %s",
                         tid, ErrorCode(code).name)
                continue
            transit = decision.transit
            log.info("transaction coordinator: %s was open past its timeout of %d ms: "
                     "aborted with producer epoch %d", tid, transit.timeout_ms,
                     transit.producer_epoch)
            self._after_prepare(tid, transit.producer_id, transit.producer_epoch, commit=False)
            self.counters.timed_out += 1
            aborted.append(tid)
        return aborted

    async def remove_expired(self):
        """Expire the ids idle for transactional.id.expiration.ms: their tombstones, one
        append per partition; the ids forgotten."""
        if self._store is not None:
            await self._catch_up(list(self._epochs))
        now = self.now()
        by_partition = {}
        for tid, meta in list(self._ids.items()):
            hold = expire(meta, now, self.config.id_expiration_ms)
            if hold is not None:
                self._ids[tid] = hold
                by_partition.setdefault(self.runtime.partition_for(tid), {})[tid] = hold
        removed = []
        for index, held in by_partition.items():
            removed += await self._write_tombstones(index, held)
        return removed

    async def _write_tombstones(self, index, held):
        epoch = self._epochs.get(index)
        tids = sorted(held)
        try:
            code = await self.runtime.append(tids[0], [transaction_record(t, None) for t in tids],
                                             timeout_ms=self.config.request_timeout_ms,
                                             errors=TXN_APPEND_ERRORS)
        except (KqliteError, OSError) as exc:
            log.warning("transaction coordinator: expiring %d id(s) failed: %s", len(tids), exc)
            code = E.COORDINATOR_NOT_AVAILABLE
        if self._epochs.get(index) != epoch:
            return []
        removed = []
        for tid in tids:
            current = self._ids.get(tid)
            if current is None or current.pending is not S.DEAD:
                continue
            if not code and current.producer_epoch == held[tid].producer_epoch:
                del self._ids[tid]
                removed.append(tid)
            else:
                self._ids[tid] = dataclasses.replace(current, pending=None)
        if removed:
            log.info("transaction coordinator: expired %d transactional id(s)", len(removed))
        return removed
