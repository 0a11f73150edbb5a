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
so its own markers for the same producer are never refused as fenced.

Recovery (:func:`recover_dead_owners`, run by every ``kqlite.open()`` of a data dir and
so by ``kqlite serve`` before its coordinator loads ``__transaction_state``): for each
embedded-owned id (transaction_owners.py) whose lock it can take, the id's latest record,
the partitions where its producer has a transaction open (only the partitions its owner
record lists are looked at) and, when there are such, the epochs the id's history
committed give the plans (transaction_rules.recovery_plans), carried out under the lock.
The history matters after a power loss: markers are not fsynced, and a record logged
after them (CompleteCommit, the next transaction's) may survive where a marker did not;
the PrepareCommit that was fsynced before the commit returned is still in the log. Ids a
live handle holds, and ids without an owner record, are not touched (the ownership rule,
transaction_owners.py).
"""

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
           "hanging_partitions", "committed_epochs", "recover_owned", "recover_dead_owners"]

log = logging.getLogger("kqlite")

S = TransactionStatus
DEFAULT_TIMEOUT_MS = 60000     # Kafka's producer transaction.timeout.ms default


def coordinator_epoch(db, transactional_id):
    """The coordinator epoch the markers of ``transactional_id`` carry (see above)."""
    index = db.transaction_state.partition_for(transactional_id)
    cache = LeaderEpochCache(db.fs, partition_dir(db.path, TRANSACTIONS_TOPIC, index))
    return max(0, cache.latest_epoch)


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


def write_markers(db, transactional_id, producer_id, epoch, partitions, commit):
    """The markers of one decided transaction on ``partitions`` (step 2 above)."""
    epoch_of_coordinator = coordinator_epoch(db, transactional_id)
    for topic, partition in sorted(partitions):
        try:
            with db.leased_log(topic, partition) as log_:
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


def committed_epochs(db, transactional_id, producer_id):
    """The epochs of ``producer_id`` whose transaction ``transactional_id``'s history in
    ``__transaction_state`` committed (a PrepareCommit or CompleteCommit logged). Reads the
    id's whole partition: only recovery that found a hanging partition asks."""
    index = db.transaction_state.partition_for(transactional_id)
    epochs = set()
    with db.leased_log(TRANSACTIONS_TOPIC, index) as log_:
        for rec in log_.read(log_.start_offset):
            try:
                if decode_transaction_key(rec.key) != transactional_id or rec.value is None:
                    continue
                value = decode_transaction_value(rec.value)
            except CorruptRecordError:
                continue
            if value.producer_id == producer_id and value.status in (S.PREPARE_COMMIT,
                                                                     S.COMPLETE_COMMIT):
                epochs.add(value.producer_epoch)
    return frozenset(epochs)


def recover_owned(db, owner):
    """Decide what the dead owner of ``owner`` (an Owner) left open; the Plans carried
    out, in order. The caller holds the id's lock."""
    tid = owner.transactional_id
    value = db.transaction_state.state(tid)
    hanging = hanging_partitions(db, owner.producer_id, owner.partitions)
    committed = committed_epochs(db, tid, owner.producer_id) if hanging else frozenset()
    plans = recovery_plans(value, owner.producer_id, hanging, committed)
    timeout = value.timeout_ms if value is not None else DEFAULT_TIMEOUT_MS
    start = value.start_ms if value is not None else -1
    for plan in plans:
        log.info("transaction %s: its owner is gone; %s at producer %d epoch %d on %s", tid,
                 plan.action.value, plan.producer_id, plan.epoch, sorted(plan.partitions))
        carry_out(db, tid, plan, timeout, start)
    return plans


def recover_dead_owners(db, busy=()):
    """Recover every embedded-owned id of ``db`` whose lock is free (``busy``: ids this
    process holds, skipped); the ids whose Plan did something."""
    recovered = []
    for tid in owner_ids(db.fs, db.path):
        if tid in busy:
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
