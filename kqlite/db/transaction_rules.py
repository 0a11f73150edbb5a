"""The embedded transaction's rules, pure: what a handle's open does to its transactional
id's producer, whether a handle still owns its id, and what recovery does with the id's
latest ``__transaction_state`` record.

Theory of operation
-------------------
An embedded transaction is its own transaction coordinator (transaction.py), so it
applies a few of the coordinator's rules itself; they are Kafka 3.9's
(TransactionCoordinator), trimmed to what one owner of an id meets. Values in, values
out; the clock is passed in.

The producer a handle's open gets (:func:`bump`; InitProducerId without an expected
epoch, Kafka's ``prepareInitProducerIdTransit``):

    no record, or a record of another producer id   the owner's producer id, epoch 0
    epoch exhausted (>= 32766)                      NEW_PRODUCER_ID: a new producer
                                                    id, epoch 0
    otherwise                                       the same producer id, epoch + 1

Whether a handle whose transaction is open still owns its id (:func:`fenced`), checked
before it logs more (its last record is Ongoing):

    no record                                       owned
    another producer id or another epoch            fenced: a newer handle bumped the
                                                    epoch, or a broker aborted the
                                                    transaction past its timeout
    same producer and epoch, not Ongoing            fenced: another coordinator decided
                                                    the transaction
    same producer and epoch, Ongoing                owned

What recovery does with an id whose owner is dead (:func:`recovery_plans`; the
coordinator's load and timeout rules, section 8 of the design notes), in this order:

1. each *hanging* partition (one where the owner's producer has a transaction open)
   whose epoch the id's history shows committed (*proven*: a CompleteCommit of that
   producer and epoch, or a PrepareCommit whose records are all in their partitions),
   and that the latest record does not cover: COMMIT markers at that epoch, nothing
   logged (the latest record is newer). Its marker was not durable when the power
   went, but later records were;
2. by the latest record:

    PrepareCommit, proven           COMMIT markers on its partitions at its epoch, then
                                    CompleteCommit
    PrepareCommit, not proven       as Ongoing: its commit's fsync round did not end
                                    (the PrepareCommit is fsynced in the same round as
                                    the records it commits), so commit() never returned
    PrepareAbort                    ABORT markers at its epoch, then CompleteAbort
    Ongoing                         what the coordinator's timeout does: epoch + 1,
                                    PrepareAbort, ABORT markers, CompleteAbort (over its
                                    partitions and the other hanging ones); done
3. the other hanging partitions (whose transaction no record explains: the record that
   opened them was lost with the power): ABORT at an epoch above every one seen,
   logged as PrepareAbort then CompleteAbort. Nothing when there are none.

A hanging partition the latest record covers is one that names it at the epoch open
there.

Step 1 comes first: an abort marker would end the open transaction of a partition
whatever its epoch.
"""

import enum
from typing import NamedTuple

from ..format.transaction_records import TransactionStatus

__all__ = ["NEW_PRODUCER_ID", "MAX_EPOCH", "bump", "fenced", "Action", "Plan",
           "recovery_plans"]

S = TransactionStatus
MAX_EPOCH = 0x7FFF                # Short.MaxValue
_EXHAUSTED = MAX_EPOCH - 1        # TransactionMetadata.isEpochExhausted: room for two bumps


class _NewProducerId:
    def __repr__(self):
        return "NEW_PRODUCER_ID"


NEW_PRODUCER_ID = _NewProducerId()


def bump(value, producer_id):
    """``(producer id, epoch)`` of a handle's open, given the id's latest record ``value``
    (None: none) and the owner's ``producer_id``; NEW_PRODUCER_ID when the epoch is
    exhausted."""
    if value is None or value.producer_id != producer_id:
        return producer_id, 0
    if value.producer_epoch >= _EXHAUSTED:
        return NEW_PRODUCER_ID
    return producer_id, value.producer_epoch + 1


def fenced(value, producer_id, epoch):
    """True when the latest record ``value`` says the handle of ``(producer_id, epoch)``,
    whose transaction is open, no longer owns its id."""
    if value is None:
        return False
    if value.producer_id != producer_id or value.producer_epoch != epoch:
        return True
    return value.status is not S.ONGOING


class Action(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"


class Plan(NamedTuple):
    """What recovery does: the markers' ``action`` at ``epoch`` over ``partitions``; with
    ``prepare`` a PrepareAbort is logged first (the decision was never logged), with
    ``complete`` the Complete* after the markers."""
    action: Action
    producer_id: int
    epoch: int
    partitions: frozenset
    prepare: bool
    complete: bool = True


def recovery_plans(value, producer_id, hanging, committed_epochs=frozenset()):
    """The Plans, in order, for an id whose owner is dead: ``value`` its latest record
    (None: none), ``producer_id`` the owner's, ``hanging`` ``{(topic, partition):
    producer epoch}`` of the partitions where that producer's transaction is open,
    ``committed_epochs`` the epochs of that producer whose commit is proven."""
    status = None if value is None else value.status
    open_record = status in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.ONGOING)
    covered = value.topic_partitions() if open_record else frozenset()
    late, rest = {}, {}
    for tp, epoch in hanging.items():
        if tp in covered and epoch == value.producer_epoch:
            continue
        if epoch in committed_epochs:
            late.setdefault(epoch, set()).add(tp)
        else:
            rest[tp] = epoch
    plans = [Plan(Action.COMMIT, producer_id, epoch, frozenset(tps), False, False)
             for epoch, tps in sorted(late.items())]
    recorded = -1 if value is None or value.producer_id != producer_id \
        else value.producer_epoch
    if status is S.ONGOING or (status is S.PREPARE_COMMIT and
                               value.producer_epoch not in committed_epochs):
        epoch = max([value.producer_epoch + 1, *rest.values()])
        return plans + [Plan(Action.ABORT, value.producer_id, min(epoch, MAX_EPOCH),
                             covered | frozenset(rest), True)]
    if status in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        plans.append(Plan(Action.COMMIT if status is S.PREPARE_COMMIT else Action.ABORT,
                          value.producer_id, value.producer_epoch, covered, False))
    if not rest:
        return plans
    epoch = max([recorded + 1, *rest.values()])
    return plans + [Plan(Action.ABORT, producer_id, min(epoch, MAX_EPOCH), frozenset(rest),
                         True)]
