"""Finishing embedded transactions: the markers and Complete* record of a decided
transaction, and the recovery of the ids whose owner died.

Theory of operation
-------------------
What happens to an id is decided by transaction_rules.py (pure); this module carries it
out, as Kafka's coordinator completes a transaction (section 8 of the design notes):

1. with a Plan whose decision was never logged (an Ongoing id, or hanging partitions),
   log PrepareAbort at the plan's epoch;
2. write the COMMIT or ABORT marker (the 78-byte control batch) on each partition, with
   the data dir's coordinator epoch for the id (:func:`coordinator_epoch`). A partition
   whose topic is gone takes no marker (the coordinator drops it too); a partition that
   refuses the marker for an older producer epoch or an older coordinator epoch has
   been decided by someone newer, and is skipped with a warning;
3. log CompleteCommit / CompleteAbort (partitions: the empty array).

None of it is fsynced: a crash before step 3 leaves the logged decision (or the Ongoing
record, or the hanging partition), and the next recovery does it again; a marker where
the transaction is already decided is legal and changes nothing but the epochs.

Coordinator epoch: the latest leader epoch recorded for the id's ``__transaction_state``
partition (its ``leader-epoch-checkpoint``), 0 when none, never higher. A broker later
serving the data dir coordinates with at least that epoch (leader epochs only grow),
so its own markers for the same producer are never refused as fenced. The file is read
once per partition and Database, and the epoch kept (an older one stays a correct
lower bound). Only a marker it makes too old is refused: a broker serving the data dir
meanwhile marked the producer with its newer epoch. Then the file is read again and the
marker retried once; refused again, it is skipped as below.

Recovery (:func:`recover_dead_owners`, run by every ``kqlite.open()`` of a data dir and
so by ``kqlite serve`` before its coordinator loads ``__transaction_state``): for each
embedded-owned id (transaction_owners.py) whose lock it can take, the id's latest record,
the partitions where its producer has a transaction open (only the partitions its owner
record lists are looked at) and, when there are such, the epochs the id's history
committed give the plans (transaction_rules.recovery_plans), carried out under the lock.
The history matters after a power loss, twice. A PrepareCommit is fsynced in the same
round as the records it commits, so a durable PrepareCommit proves nothing alone: its
``kqlite.txn.ends`` header names the last offset written to each partition, and the
commit is *proven* only when every one of those batches is still there (else the round
never ended, commit() never returned, and the transaction is aborted). And markers are
not fsynced: a record logged after them (CompleteCommit, the next transaction's) may
survive where a marker did not; the proven PrepareCommit is still in the log, and the
hanging partition is committed again. Ids a
live handle holds, and ids without an owner record, are not touched (the ownership rule,
transaction_owners.py).
"""

import json
import logging

from ..errors import (CorruptRecordError, InvalidProducerEpochError, KqliteError,
                      TransactionCoordinatorFencedError, UnknownTopicError)
from ..format.batch import now_ms
from ..format.internal_topics import TRANSACTIONS_TOPIC
from ..format.transaction_records import (TransactionLogValue, TransactionStatus,
                                          decode_transaction_key, decode_transaction_value,
                                          group_partitions)
from ..storage.leader_epoch import LeaderEpochCache
from .layout import partition_dir
from .transaction_owners import OwnerLock, owner_ids, read_owner
from .transaction_rules import Action, recovery_plans

__all__ = ["coordinator_epoch", "state_value", "write_markers", "carry_out",
           "hanging_partitions", "proven_commits", "ends_header", "recover_owned",
           "recover_dead_owners"]

log = logging.getLogger("kqlite")

S = TransactionStatus
DEFAULT_TIMEOUT_MS = 60000     # Kafka's producer transaction.timeout.ms default


def coordinator_epoch(db, transactional_id, reread=False):
    """The coordinator epoch the markers of ``transactional_id`` carry: the one kept for
    its partition unless ``reread`` or none is kept yet (see above)."""
    store = db.transaction_state
    index = store.partition_for(transactional_id)
    kept = store.coordinator_epochs.get(index)
    if kept is None or reread:
        cache = LeaderEpochCache(db.fs, partition_dir(db.path, TRANSACTIONS_TOPIC, index))
        kept = store.coordinator_epochs[index] = max(0, cache.latest_epoch)
    return kept


def state_value(producer_id, epoch, status, partitions, timeout_ms, start_ms, now=None):
    """A ``__transaction_state`` value: Empty holds null partitions, Complete* the empty
    array, the others their partitions grouped by topic."""
    now = now_ms() if now is None else now
    if status is S.EMPTY:
        grouped, start_ms = None, -1
    elif status in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        grouped = ()
    else:
        grouped = group_partitions(partitions)
    return TransactionLogValue(producer_id, epoch, timeout_ms, status, grouped, now, start_ms)


def write_markers(db, transactional_id, producer_id, epoch, partitions, commit, lease=None):
    """The markers of one decided transaction on ``partitions`` (step 2 above); ``lease``
    (default ``db.leased_log``) gives each partition's log."""
    lease = lease or db.leased_log
    epoch_of_coordinator = coordinator_epoch(db, transactional_id)
    for topic, partition in sorted(partitions):
        try:
            with lease(topic, partition) as log_:
                try:
                    log_.append_marker(producer_id, epoch, epoch_of_coordinator, commit)
                except TransactionCoordinatorFencedError:
                    newer = coordinator_epoch(db, transactional_id, reread=True)
                    if newer == epoch_of_coordinator:
                        raise
                    epoch_of_coordinator = newer    # the kept epoch was too old: retried
                    log_.append_marker(producer_id, epoch, epoch_of_coordinator, commit)
        except UnknownTopicError:
            log.info("transaction %s: no marker for %s-%d: no such partition any more",
                     transactional_id, topic, partition)
        except (InvalidProducerEpochError, TransactionCoordinatorFencedError) as exc:
            log.warning("transaction %s: the marker for %s-%d was refused (%s): a newer "
                        "producer or coordinator decided it", transactional_id, topic,
                        partition, exc)


def carry_out(db, transactional_id, plan, timeout_ms, start_ms=-1):
    """Carry out ``plan`` (a transaction_rules.Plan) for ``transactional_id``."""
    commit = plan.action is Action.COMMIT
    store = db.transaction_state
    if plan.prepare:
        store.write(transactional_id, state_value(
            plan.producer_id, plan.epoch, S.PREPARE_ABORT, plan.partitions, timeout_ms,
            start_ms if start_ms >= 0 else now_ms()))
    write_markers(db, transactional_id, plan.producer_id, plan.epoch, plan.partitions, commit)
    if not plan.complete:
        return
    store.write(transactional_id, state_value(
        plan.producer_id, plan.epoch, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
        (), timeout_ms, start_ms if start_ms >= 0 else now_ms()))


def hanging_partitions(db, producer_id, partitions):
    """``{(topic, partition): producer epoch}`` of ``partitions`` where ``producer_id``
    has a transaction open. A partition whose last stable offset is its high watermark
    has none open at all, and is passed by without loading its producer state."""
    found = {}
    for topic, partition in sorted(partitions):
        try:
            with db.leased_log(topic, partition) as log_:
                if log_.last_stable_offset >= log_.high_watermark:
                    continue
                for producer in log_.active_producers():
                    if producer.producer_id == producer_id and \
                            producer.current_txn_start_offset >= 0:
                        found[(topic, partition)] = producer.producer_epoch
        except UnknownTopicError:
            continue
    return found


ENDS_HEADER = "kqlite.txn.ends"   # ON-DISK: kqlite's: a PrepareCommit's records' last offsets


def ends_header(ends):
    """The PrepareCommit record's header: ``{(topic, partition): last offset}`` of the
    records the transaction wrote (JSON ``[[topic, partition, last offset], ...]``)."""
    return ((ENDS_HEADER, json.dumps(sorted([t, p, o] for (t, p), o in ends.items()))
             .encode("utf-8")),)


def _ends_of(rec):
    for key, raw in rec.headers or ():
        if key == ENDS_HEADER:
            try:
                return {(t, int(p)): int(o) for t, p, o in json.loads(raw.decode("utf-8"))}
            except (ValueError, TypeError, AttributeError):
                return None
    return None


def _written(db, tp, last_offset, producer_id, epoch):
    """Whether the batch holding ``last_offset`` of partition ``tp`` is still there and
    is the producer's, of that epoch."""
    try:
        with db.leased_log(*tp) as log_:
            if last_offset < log_.start_offset:
                return True                  # retention took it: it was there
            if last_offset >= log_.end_offset:
                return False
            for header in log_.batch_headers(last_offset):
                return header.producer_id == producer_id and \
                    header.producer_epoch == epoch and header.base_offset <= last_offset
            return False
    except UnknownTopicError:
        return True                          # the topic is gone, and its records with it


def proven_commits(db, transactional_id, producer_id):
    """The epochs of ``producer_id`` whose commit ``transactional_id``'s history proves: a
    CompleteCommit logged, or a PrepareCommit whose records (its ends header) are all
    still in their partitions (one without the header was logged by a coordinator that
    wrote it only once its records were safe). Reads the id's whole partition: only
    recovery asks, when it found a PrepareCommit or a hanging partition."""
    index = db.transaction_state.partition_for(transactional_id)
    proven, prepared = set(), {}
    with db.leased_log(TRANSACTIONS_TOPIC, index) as log_:
        for rec in log_.read(log_.start_offset):
            try:
                if decode_transaction_key(rec.key) != transactional_id or rec.value is None:
                    continue
                value = decode_transaction_value(rec.value)
            except CorruptRecordError:
                continue
            if value.producer_id != producer_id:
                continue
            if value.status is S.COMPLETE_COMMIT:
                proven.add(value.producer_epoch)
            elif value.status is S.PREPARE_COMMIT:
                prepared[value.producer_epoch] = _ends_of(rec)
    for epoch, ends in prepared.items():
        if epoch in proven:
            continue
        if ends is None or all(_written(db, tp, last, producer_id, epoch)
                               for tp, last in ends.items()):
            proven.add(epoch)
    return frozenset(proven)


def recover_owned(db, owner):
    """Decide what the dead owner of ``owner`` (an Owner) left open; the Plans carried
    out, in order. The caller holds the id's lock."""
    tid = owner.transactional_id
    value = db.transaction_state.state(tid)
    hanging = hanging_partitions(db, owner.producer_id, owner.partitions)
    wanted = hanging or (value is not None and value.status is S.PREPARE_COMMIT)
    committed = proven_commits(db, tid, owner.producer_id) if wanted else frozenset()
    plans = recovery_plans(value, owner.producer_id, hanging, committed)
    timeout = value.timeout_ms if value is not None else DEFAULT_TIMEOUT_MS
    start = value.start_ms if value is not None else -1
    for plan in plans:
        log.info("transaction %s: its owner is gone; %s at producer %d epoch %d on %s", tid,
                 plan.action.value, plan.producer_id, plan.epoch, sorted(plan.partitions))
        carry_out(db, tid, plan, timeout, start)
    return plans


def recover_dead_owners(db, undecided_only=False):
    """Recover every embedded-owned id of ``db`` whose lock is free; the ids whose Plans
    did something. ``undecided_only`` (a running broker's periodic check) passes by the
    ids whose latest record is decided or Empty without looking for hanging partitions:
    only a power loss leaves those, and every process starts over after one, opening the
    data dir (which looks)."""
    recovered = []
    for tid in owner_ids(db.fs, db.path):
        if undecided_only:
            value = db.transaction_state.state(tid)
            if value is None or value.status not in (S.ONGOING, S.PREPARE_COMMIT,
                                                     S.PREPARE_ABORT):
                continue
        lock = OwnerLock(db.fs, db.path, tid)
        if not lock.try_take():
            lock.close()
            continue
        try:
            owner = read_owner(db.fs, db.path, tid)
            if owner is None:
                continue
            try:
                if recover_owned(db, owner):
                    recovered.append(tid)
            except KqliteError as exc:
                log.error("transaction %s: recovering what its dead owner left failed "
                          "(%s); the next open tries again", tid, exc)
        finally:
            lock.release()
    return recovered
