"""What each transaction request does to a transactional id's metadata: Kafka 3.9's
TransactionCoordinator, request by request, as pure functions of (metadata, request,
now). No I/O, no clock: the shell (coordinator.py) logs what they decide and answers.

Each function returns a :class:`Decision`: the code to answer, and, when the request
changes the id's state, the metadata to hold while the change is logged (its ``pending``
state set) and the :class:`~.metadata.TxnTransit` to log; the answer goes out once the
transit is written (a failed write answers the write's error, and the coordinator holds
``on_failure``). Every branch below is Kafka's, in Kafka's order, and has a name in the
tests (tests/server/test_txn_transitions.py).

InitProducerId (``handleInitProducerId``, ``prepareInitProducerIdTransit``):

    empty id                                    INVALID_REQUEST
    timeout <= 0 or > transaction.max.timeout   INVALID_TRANSACTION_TIMEOUT
    no metadata                                 a new producer id, epoch -1, Empty; go on
    a change pending                            CONCURRENT_TRANSACTIONS
    expected pid/epoch not valid (*)            PRODUCER_FENCED
    PrepareCommit, PrepareAbort                 CONCURRENT_TRANSACTIONS
    Empty, CompleteCommit, CompleteAbort:
      epoch exhausted, expected epoch (if any)  a new producer id at epoch 0 (last epoch:
        is the current one                        the old one if one was expected)
      no expected epoch                         epoch + 1, last epoch -1
      expected == current, or current is -1     epoch + 1, last epoch = current
      expected == last epoch                    the current epoch again (a retry)
      otherwise                                 PRODUCER_FENCED
      -> log Empty (no partitions, the new timeout), answer the producer id and epoch
    Ongoing                                     fence: epoch + 1 (not again after a
                                                fence whose write failed), log
                                                PrepareAbort, answer
                                                CONCURRENT_TRANSACTIONS; the markers
                                                follow, and the retry finds CompleteAbort

(*) valid: the current epoch is -1 (new metadata), or the expected producer id is the
current one, or it is the last one and the expected epoch is exhausted (a retry after a
producer id rotation whose answer was lost).

AddPartitionsToTxn / AddOffsetsToTxn (``handleAddPartitionsToTransaction``):

    empty id                                    INVALID_REQUEST
    no metadata, another producer id            INVALID_PRODUCER_ID_MAPPING
    another epoch                               PRODUCER_FENCED
    a change pending, PrepareCommit/Abort       CONCURRENT_TRANSACTIONS
    Ongoing with every partition in it          NONE, nothing logged
    otherwise                                   log Ongoing with the union (start: now,
                                                coming from Empty/Complete*), NONE

Verification (AddPartitionsToTxn v4+ VerifyOnly, ``handleVerifyPartitionsInTransaction``):
the same id, producer and epoch checks and CONCURRENT_TRANSACTIONS in Prepare* (a
pending change is deliberately not checked), then per partition NONE if it is in the
transaction, else TRANSACTION_ABORTABLE. Nothing is logged.

EndTxn (``endTransaction``; ``from_client`` False for the coordinator's own aborts):

    empty id                                    INVALID_REQUEST
    no metadata, another producer id            INVALID_PRODUCER_ID_MAPPING
    a client's epoch != current, any epoch      PRODUCER_FENCED
      below the current one
    a change pending (other than a fence)       CONCURRENT_TRANSACTIONS
    Ongoing                                     log PrepareCommit / PrepareAbort, NONE
    CompleteCommit + commit, CompleteAbort      NONE (a retry), nothing logged
      + abort
    PrepareCommit + commit, PrepareAbort        CONCURRENT_TRANSACTIONS
      + abort
    anything else, Empty                        INVALID_TXN_STATE

Once a Prepare* is logged, :func:`prepare_complete` checks the id again (producer, epoch,
nothing pending, the Prepare* of that result) and prepares the Complete* that the markers
lead to; the client is answered NONE then, before any marker is written.

Timeouts (``abortTimedOutTransactions``): an Ongoing id with nothing pending whose
``start + timeout < now`` is fenced and aborted as InitProducerId fences it
(:func:`abort_timed_out`). Expiration (``removeExpiredTransactionalIds``): an Empty,
CompleteCommit or CompleteAbort id with nothing pending whose last update is at least
``transactional.id.expiration.ms`` old goes pending Dead; its tombstone is written and
the id forgotten (:func:`expire`).
"""

import dataclasses
from typing import NamedTuple, Optional

from ....format.transaction_records import TransactionStatus
from ....protocol import ErrorCode
from .metadata import (NO_PRODUCER_EPOCH, IllegalTransition, TxnMetadata, TxnTransit,
                       epoch_exhausted)

__all__ = ["Decision", "NEED_PRODUCER_ID", "ExpectedProducer", "init_producer_id",
           "add_partitions", "verify_partitions", "end_txn", "prepare_complete",
           "abort_timed_out", "timed_out", "expire", "valid_timeout"]

E = ErrorCode
S = TransactionStatus
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, \
    PREPARE_EPOCH_FENCE = S
_PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
_COMPLETED_OR_EMPTY = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)


class Decision(NamedTuple):
    """See the module docstring. ``hold``: the metadata to hold from now on (None:
    unchanged); ``transit``: to log before answering ``error`` (None: answer at once);
    ``on_failure``: the metadata to hold if that write fails (None: ``hold`` with its
    pending change dropped)."""
    error: ErrorCode
    hold: Optional[TxnMetadata] = None
    transit: Optional[TxnTransit] = None
    on_failure: Optional[TxnMetadata] = None

    def failed(self, keep_pending=False):
        """The metadata to hold after the transit's write failed."""
        if self.on_failure is not None:
            return self.on_failure
        return self.hold.write_failed(keep_pending=keep_pending)


class ExpectedProducer(NamedTuple):
    """InitProducerId v3+'s ProducerId and ProducerEpoch (KIP-360)."""
    producer_id: int
    producer_epoch: int


class _NeedProducerId:
    def __repr__(self):
        return "NEED_PRODUCER_ID"


# What init_producer_id answers when it needs a producer id it was not given: the caller
# allocates one and asks again with it.
NEED_PRODUCER_ID = _NeedProducerId()


def valid_timeout(timeout_ms, max_timeout_ms):
    """TransactionStateManager.validateTransactionTimeoutMs."""
    return 0 < timeout_ms <= max_timeout_ms


def init_producer_id(meta, transactional_id, timeout_ms, expected, now, *, max_timeout_ms,
                     new_producer_id=None):
    """InitProducerId with a transactional id; ``meta`` is the id's metadata (None: none),
    ``expected`` an ExpectedProducer or None. Returns a Decision (whose success answer is
    ``hold``'s producer id and epoch once its transit is logged), or NEED_PRODUCER_ID."""
    if not transactional_id:
        return Decision(E.INVALID_REQUEST)
    if not valid_timeout(timeout_ms, max_timeout_ms):
        return Decision(E.INVALID_TRANSACTION_TIMEOUT)
    created = meta is None
    if created:
        if new_producer_id is None:
            return NEED_PRODUCER_ID
        meta = TxnMetadata.new(transactional_id, new_producer_id, timeout_ms, now)
        new_producer_id = None
    decision = _init_existing(meta, timeout_ms, expected, now, new_producer_id)
    if created and decision is not NEED_PRODUCER_ID and decision.hold is None:
        # Kafka keeps the metadata it created even when the request fails.
        decision = decision._replace(hold=meta)
    return decision


def _init_existing(meta, timeout_ms, expected, now, new_producer_id):
    if meta.pending is not None:
        return Decision(E.CONCURRENT_TRANSACTIONS)
    if expected is not None and not _valid_expected_producer(meta, expected):
        return Decision(E.PRODUCER_FENCED)
    if meta.state in _PREPARED:
        return Decision(E.CONCURRENT_TRANSACTIONS)
    if meta.state in _COMPLETED_OR_EMPTY:
        if meta.epoch_exhausted and (expected is None
                                     or expected.producer_epoch == meta.producer_epoch):
            if new_producer_id is None:
                return NEED_PRODUCER_ID
            hold, transit = meta.prepare(
                EMPTY, producer_id=new_producer_id, producer_epoch=0,
                last_producer_epoch=meta.producer_epoch if expected is not None
                else NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1,
                last_update_ms=now)
            return Decision(E.NONE, hold, transit)
        bump = _epoch_bump(meta, expected)
        if bump is None:
            return Decision(E.PRODUCER_FENCED)
        epoch, last_epoch = bump
        hold, transit = meta.prepare(EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                                     timeout_ms=timeout_ms, partitions=frozenset(),
                                     start_ms=-1, last_update_ms=now)
        return Decision(E.NONE, hold, transit)
    if meta.state is ONGOING:
        decision = _fence_and_abort(meta, now)
        return decision._replace(error=E.CONCURRENT_TRANSACTIONS)
    raise IllegalTransition(f"{meta.transactional_id}: InitProducerId in state "
                            f"{meta.state.state_name}, which is never held")


def _valid_expected_producer(meta, expected):
    return (meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected.producer_id == meta.producer_id
            or (expected.producer_id == meta.last_producer_id
                and epoch_exhausted(expected.producer_epoch)))


def _epoch_bump(meta, expected):
    """``(epoch, last epoch)`` of Kafka's prepareIncrementProducerEpoch, None to fence."""
    if meta.epoch_exhausted:
        raise IllegalTransition(f"{meta.transactional_id}: no epoch left for producer id "
                                f"{meta.producer_id}")
    bumped = meta.producer_epoch + 1
    if expected is None:
        return bumped, NO_PRODUCER_EPOCH
    if meta.producer_epoch == NO_PRODUCER_EPOCH or expected.producer_epoch == meta.producer_epoch:
        return bumped, meta.producer_epoch
    if expected.producer_epoch == meta.last_producer_epoch:
        return meta.producer_epoch, meta.last_producer_epoch
    return None


def _fence_and_abort(meta, now):
    """Kafka's prepareFenceProducerEpoch (the epoch + 1, not again after a fence whose
    write failed) followed by endTransaction(ABORT, isFromClient = false) with that
    epoch."""
    if meta.producer_epoch >= 0x7FFF:
        raise IllegalTransition(f"{meta.transactional_id}: cannot fence epoch "
                                f"{meta.producer_epoch}")
    epoch = meta.producer_epoch if meta.failed_epoch_fence else meta.producer_epoch + 1
    fencing, fence = meta.prepare(PREPARE_EPOCH_FENCE, producer_epoch=epoch,
                                  last_producer_epoch=NO_PRODUCER_EPOCH)
    return end_txn(fencing, meta.transactional_id, fence.producer_id, fence.producer_epoch,
                   False, now, from_client=False)


def add_partitions(meta, transactional_id, producer_id, epoch, partitions, now):
    """AddPartitionsToTxn (and AddOffsetsToTxn's one partition): ``partitions`` a set of
    (topic, partition)."""
    if not transactional_id:
        return Decision(E.INVALID_REQUEST)
    if meta is None or meta.producer_id != producer_id:
        return Decision(E.INVALID_PRODUCER_ID_MAPPING)
    if meta.producer_epoch != epoch:
        return Decision(E.PRODUCER_FENCED)
    if meta.pending is not None or meta.state in _PREPARED:
        return Decision(E.CONCURRENT_TRANSACTIONS)
    partitions = frozenset(partitions)
    if meta.state is ONGOING and partitions <= meta.partitions:
        return Decision(E.NONE)
    start = now if meta.state in _COMPLETED_OR_EMPTY else meta.start_ms
    hold, transit = meta.prepare(ONGOING, partitions=meta.partitions | partitions,
                                 start_ms=start, last_update_ms=now)
    return Decision(E.NONE, hold, transit)


def verify_partitions(meta, transactional_id, producer_id, epoch, partitions):
    """AddPartitionsToTxn v4+ with VerifyOnly: ``{partition: code}``."""
    if not transactional_id:
        code = E.INVALID_REQUEST
    elif meta is None or meta.producer_id != producer_id:
        code = E.INVALID_PRODUCER_ID_MAPPING
    elif meta.producer_epoch != epoch:
        code = E.PRODUCER_FENCED
    elif meta.state in _PREPARED:
        code = E.CONCURRENT_TRANSACTIONS
    else:
        return {tp: E.NONE if tp in meta.partitions else E.TRANSACTION_ABORTABLE
                for tp in partitions}
    return {tp: code for tp in partitions}


def end_txn(meta, transactional_id, producer_id, epoch, commit, now, *, from_client=True):
    """EndTxn: commit (True) or abort the id's transaction."""
    if not transactional_id:
        return Decision(E.INVALID_REQUEST)
    if meta is None or meta.producer_id != producer_id:
        return Decision(E.INVALID_PRODUCER_ID_MAPPING)
    if (from_client and epoch != meta.producer_epoch) or epoch < meta.producer_epoch:
        return Decision(E.PRODUCER_FENCED)
    if meta.pending is not None and meta.pending is not PREPARE_EPOCH_FENCE:
        return Decision(E.CONCURRENT_TRANSACTIONS)
    state = meta.state
    if state is ONGOING:
        if not commit and meta.pending is PREPARE_EPOCH_FENCE:
            # The fence gives way to its PrepareAbort, and its raised epoch goes into the
            # metadata now: held even if the write fails (then marked, so that the next
            # fence does not raise it again).
            fenced = dataclasses.replace(meta, pending=None, producer_epoch=epoch,
                                         last_producer_epoch=NO_PRODUCER_EPOCH)
            hold, transit = fenced.prepare(PREPARE_ABORT, last_update_ms=now)
            return Decision(E.NONE, hold, transit,
                            on_failure=dataclasses.replace(fenced, failed_epoch_fence=True))
        hold, transit = meta.prepare(PREPARE_COMMIT if commit else PREPARE_ABORT,
                                     last_update_ms=now)
        return Decision(E.NONE, hold, transit)
    if state is (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
        return Decision(E.NONE)
    if state is (PREPARE_COMMIT if commit else PREPARE_ABORT):
        return Decision(E.CONCURRENT_TRANSACTIONS)
    if state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT, PREPARE_COMMIT, PREPARE_ABORT):
        return Decision(E.INVALID_TXN_STATE)
    raise IllegalTransition(f"{meta.transactional_id}: EndTxn in state "
                            f"{state.state_name}, which is never held")


def prepare_complete(meta, producer_id, epoch, commit, now):
    """After a Prepare* of ``commit`` was logged for producer ``producer_id`` at ``epoch``:
    the Complete* to log once the markers are written (Kafka's sendTxnMarkersCallback and
    prepareComplete), with the error the EndTxn then answers (NONE: send the markers)."""
    if meta is None or meta.producer_id != producer_id:
        return Decision(E.INVALID_PRODUCER_ID_MAPPING)
    if meta.producer_epoch != epoch:
        return Decision(E.PRODUCER_FENCED)
    if meta.pending is not None:
        return Decision(E.CONCURRENT_TRANSACTIONS)
    if meta.state is not (PREPARE_COMMIT if commit else PREPARE_ABORT):
        if meta.state in (DEAD, PREPARE_EPOCH_FENCE):
            raise IllegalTransition(f"{meta.transactional_id}: completing from "
                                    f"{meta.state.state_name}")
        return Decision(E.INVALID_TXN_STATE)
    cleared = dataclasses.replace(meta, failed_epoch_fence=False)
    hold, transit = cleared.prepare(COMPLETE_COMMIT if commit else COMPLETE_ABORT,
                                    partitions=frozenset(), last_update_ms=now)
    return Decision(E.NONE, hold, transit)


def timed_out(meta, now):
    """Whether the timeout abort takes this id now (TransactionStateManager
    timedOutTransactions)."""
    return meta.pending is None and meta.state is ONGOING \
        and meta.start_ms + meta.timeout_ms < now


def abort_timed_out(meta, now):
    """The fence and abort of a timed-out transaction (its PrepareAbort, with the raised
    epoch that fences the producer on every partition it wrote), or None when the id is
    not timed out (any more)."""
    if not timed_out(meta, now):
        return None
    return _fence_and_abort(meta, now)


def expire(meta, now, expiration_ms):
    """The metadata to hold (pending Dead) while an expired id's tombstone is written, or
    None when the id may not expire now."""
    if meta.pending is not None or meta.state not in _COMPLETED_OR_EMPTY \
            or meta.last_update_ms > now - expiration_ms:
        return None
    hold, _transit = meta.prepare(DEAD, partitions=frozenset())
    return hold
