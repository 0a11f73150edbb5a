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

Whether a handle still owns its id (:func:`fenced`), checked before each record it logs:

    no record (a first write)                       owned
    another producer id or another epoch            fenced: a newer handle bumped the
                                                    epoch, or a broker aborted the
                                                    transaction past its timeout
    same producer and epoch                         owned

What recovery does with an id whose owner is dead (:func:`recovery_plan`; the
coordinator's load and timeout rules, section 8 of the design notes):

    PrepareCommit                   COMMIT markers on its partitions at its epoch, then
                                    CompleteCommit (the decision is durable, so is
                                    the data: it was made durable first)
    PrepareAbort                    ABORT markers at its epoch, then CompleteAbort
    Ongoing                         what the coordinator's timeout does: epoch + 1,
                                    PrepareAbort, ABORT markers, CompleteAbort (over its
                                    partitions and any hanging one)
    no record, Empty, Complete*,    ABORT at an epoch above every one seen (the record
      with hanging partitions       that opened them was lost with the power)
    no record, Empty, Complete*     nothing
      and nothing hanging

A *hanging* partition holds an open transaction of the owner's producer id that the
record does not explain: the Ongoing record naming it was not durable when the power
went, but the data was.
"""

import enum
from typing import NamedTuple

from ..format.transaction_records import TransactionStatus

__all__ = ["NEW_PRODUCER_ID", "MAX_EPOCH", "bump", "fenced", "Action", "Plan",
           "recovery_plan"]

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
    """True when the latest record ``value`` says the handle of ``(producer_id, epoch)``
    no longer owns its id."""
    if value is None:
        return False
    return value.producer_id != producer_id or value.producer_epoch != epoch


class Action(enum.Enum):
    NOTHING = "nothing"
    COMMIT = "commit"
    ABORT = "abort"


class Plan(NamedTuple):
    """What recovery does: the markers' ``action`` at ``epoch`` over ``partitions``; with
    ``prepare`` a PrepareAbort is logged first (the decision was never logged)."""
    action: Action
    producer_id: int
    epoch: int
    partitions: frozenset
    prepare: bool


_NOTHING = Plan(Action.NOTHING, -1, -1, frozenset(), False)


def recovery_plan(value, producer_id, hanging):
    """The Plan for an id whose owner is dead: ``value`` its latest record (None: none),
    ``producer_id`` the owner's, ``hanging`` ``{(topic, partition): producer epoch}`` of
    the partitions where that producer's transaction is open."""
    status = None if value is None else value.status
    if status is S.PREPARE_COMMIT:
        return Plan(Action.COMMIT, value.producer_id, value.producer_epoch,
                    value.topic_partitions(), False)
    if status is S.PREPARE_ABORT:
        return Plan(Action.ABORT, value.producer_id, value.producer_epoch,
                    value.topic_partitions() | frozenset(hanging), False)
    if status is S.ONGOING:
        epoch = max([value.producer_epoch + 1, *hanging.values()])
        return Plan(Action.ABORT, value.producer_id, min(epoch, MAX_EPOCH),
                    value.topic_partitions() | frozenset(hanging), True)
    if not hanging:
        return _NOTHING
    recorded = -1 if value is None or value.producer_id != producer_id \
        else value.producer_epoch
    epoch = max([recorded + 1, *hanging.values()])
    return Plan(Action.ABORT, producer_id, min(epoch, MAX_EPOCH), frozenset(hanging), True)
