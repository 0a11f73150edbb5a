"""A transactional id's metadata and the state table it moves through, as Kafka 3.9's
TransactionMetadata holds them. Pure: values in, values out.

Theory of operation
-------------------
Every change of an id's state is prepared, logged, then completed, in three steps:

1. :meth:`TxnMetadata.prepare` checks the target state against the table below (the
   current state must be one of the target's legal previous states, and no other change
   may be pending) and returns the metadata to hold meanwhile -- with ``pending`` set, which
   makes every other request for the id wait (CONCURRENT_TRANSACTIONS) -- and the
   :class:`TxnTransit`, the state to log;
2. the coordinator writes the transit to ``__transaction_state`` (txn/coordinator.py);
3. once the write succeeded, :meth:`TxnMetadata.complete` checks the transit again
   (Kafka's ``completeTransitionTo``: the epoch, the partitions and the timeout may only
   change as the target state allows) and returns the new metadata; after a failed write
   the coordinator holds :meth:`TxnMetadata.write_failed` instead.

The states (``TransactionStatus`` ids) and their legal previous states, Kafka's
``TransactionState.validPreviousStates``:

    state               previous states                          entered by
    Empty               Empty, CompleteCommit, CompleteAbort     InitProducerId
    Ongoing             Ongoing, Empty, CompleteCommit,          AddPartitionsToTxn,
                        CompleteAbort                            AddOffsetsToTxn
    PrepareCommit       Ongoing                                  EndTxn(commit)
    PrepareAbort        Ongoing, PrepareEpochFence               EndTxn(abort), a fence
    CompleteCommit      PrepareCommit                            every marker written
    CompleteAbort       PrepareAbort                             every marker written
    Dead                Empty, CompleteCommit, CompleteAbort     the id expired
    PrepareEpochFence   Ongoing                                  (never logged: a fence
                                                                  logs its PrepareAbort)

What a completed transit may change (``completeTransitionTo``):

    Empty               the epoch by +1, or a new producer id at epoch 0; no partitions;
                        no start timestamp
    Ongoing             nothing of the producer; the partitions only grow; same timeout
    PrepareCommit/Abort nothing of the producer; the same partitions, timeout and start
    CompleteCommit/Abort nothing of the producer; the same timeout; a start timestamp
    Dead, PrepareEpochFence  never completed (Dead removes the id; a fence becomes the
                        PrepareAbort it leads to)

``last_producer_id`` and ``last_producer_epoch`` (KIP-360: what a producer retrying a lost
InitProducerId answer may present) are not in the log's value: an id loaded from the log
has -1 in both, as Kafka's.
"""

import dataclasses
from typing import NamedTuple, Optional

from ....format.transaction_records import (TransactionLogValue, TransactionStatus,
                                            group_partitions)

__all__ = ["TxnMetadata", "TxnTransit", "IllegalTransition", "VALID_PREVIOUS_STATES",
           "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "MAX_PRODUCER_EPOCH", "epoch_exhausted"]

NO_PRODUCER_ID = -1        # WIRE: RecordBatch.NO_PRODUCER_ID
NO_PRODUCER_EPOCH = -1     # WIRE: RecordBatch.NO_PRODUCER_EPOCH
MAX_PRODUCER_EPOCH = 0x7FFF  # Short.MaxValue

S = TransactionStatus
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, \
    PREPARE_EPOCH_FENCE = S

VALID_PREVIOUS_STATES = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}


def epoch_exhausted(epoch):
    """Kafka's TransactionMetadata.isEpochExhausted: no room left to bump the epoch twice
    (once for a fence, once for the InitProducerId that follows)."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalTransition(RuntimeError):
    """A transition the state table forbids: a coordinator bug, never a client's doing
    (Kafka throws IllegalStateException)."""


class TxnTransit(NamedTuple):
    """The state a change logs (Kafka's TxnTransitMetadata)."""
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionStatus
    partitions: frozenset
    start_ms: int
    last_update_ms: int

    def to_value(self):
        """Its ``__transaction_state`` value (the partitions grouped by topic; Empty holds
        none and writes them as null)."""
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.timeout_ms,
                                   self.state, None if self.state is EMPTY else
                                   group_partitions(self.partitions),
                                   self.last_update_ms, self.start_ms)


@dataclasses.dataclass(frozen=True)
class TxnMetadata:
    """What the coordinator holds of one transactional id; see the module docstring.
    ``pending``: the state a change under way goes to (None: none);
    ``failed_epoch_fence``: a fence's write failed after the epoch was raised in memory,
    so the next fence does not raise it again (Kafka's hasFailedEpochFence)."""
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionStatus
    partitions: frozenset
    start_ms: int
    last_update_ms: int
    pending: Optional[TransactionStatus] = None
    failed_epoch_fence: bool = False

    @classmethod
    def new(cls, transactional_id, producer_id, timeout_ms, now):
        """The metadata of an id InitProducerId meets for the first time: Empty, epoch -1."""
        return cls(transactional_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                   NO_PRODUCER_EPOCH, timeout_ms, EMPTY, frozenset(), -1, now)

    @classmethod
    def from_value(cls, transactional_id, value):
        """The metadata a loaded ``__transaction_state`` value stands for (no last producer
        id or epoch: the log has none)."""
        return cls(transactional_id, value.producer_id, NO_PRODUCER_ID, value.producer_epoch,
                   NO_PRODUCER_EPOCH, value.timeout_ms, S(value.status),
                   value.topic_partitions(), value.start_ms, value.last_update_ms)

    def to_value(self):
        """The value this metadata was (or would be) logged as."""
        return self.transit().to_value()

    def transit(self, **changes):
        """This metadata as a TxnTransit, with ``changes``."""
        fields = dict(producer_id=self.producer_id, last_producer_id=self.last_producer_id,
                      producer_epoch=self.producer_epoch,
                      last_producer_epoch=self.last_producer_epoch, timeout_ms=self.timeout_ms,
                      state=self.state, partitions=self.partitions, start_ms=self.start_ms,
                      last_update_ms=self.last_update_ms)
        fields.update(changes)
        return TxnTransit(**fields)

    @property
    def epoch_exhausted(self):
        return epoch_exhausted(self.producer_epoch)

    # -- Preparing and completing a transition ----------------------------------------------

    def prepare(self, state, **changes):
        """``(metadata to hold, TxnTransit to log)`` for a move to ``state`` (Kafka's
        prepareTransitionTo); the transit's last producer id is the current producer id.
        IllegalTransition if a change is pending or the table forbids the move."""
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: preparing {state.state_name} "
                                    f"while {self.pending.state_name} is pending")
        producer_id = changes.get("producer_id", self.producer_id)
        epoch = changes.get("producer_epoch", self.producer_epoch)
        if producer_id < 0:
            raise IllegalTransition(f"{self.transactional_id}: producer id {producer_id}")
        if state is not DEAD and epoch < 0:
            raise IllegalTransition(f"{self.transactional_id}: producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(f"{self.transactional_id}: {state.state_name} cannot "
                                    f"follow {self.state.state_name}")
        transit = self.transit(last_producer_id=self.producer_id, state=state, **changes)
        return dataclasses.replace(self, pending=state), transit

    def complete(self, transit):
        """The metadata once ``transit`` is logged (Kafka's completeTransitionTo);
        IllegalTransition when it is not the pending change or changes what its state
        may not."""
        if self.pending is None or self.pending is not transit.state:
            raise IllegalTransition(f"{self.transactional_id}: completing "
                                    f"{transit.state.state_name}, pending {self.pending}")
        same_producer = (transit.producer_id == self.producer_id
                         and transit.producer_epoch == self.producer_epoch)
        state = transit.state
        if state is EMPTY:
            bumped = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id)
            ok = (transit.producer_epoch == self.producer_epoch or bumped) \
                and not transit.partitions and transit.start_ms == -1
        elif state is ONGOING:
            ok = same_producer and self.partitions <= transit.partitions \
                and self.timeout_ms == transit.timeout_ms
        elif state in (PREPARE_COMMIT, PREPARE_ABORT):
            ok = same_producer and self.partitions == transit.partitions \
                and self.timeout_ms == transit.timeout_ms and self.start_ms == transit.start_ms
        elif state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            ok = same_producer and self.timeout_ms == transit.timeout_ms \
                and transit.start_ms != -1
        else:   # Dead removes the id; a fence is completed as its PrepareAbort
            ok = False
        if not ok:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.state_name} -> "
                                    f"{transit} is not a legal completion")
        return dataclasses.replace(
            self, producer_id=transit.producer_id, last_producer_id=transit.last_producer_id,
            producer_epoch=transit.producer_epoch,
            last_producer_epoch=transit.last_producer_epoch, timeout_ms=transit.timeout_ms,
            state=state, partitions=frozenset(transit.partitions), start_ms=transit.start_ms,
            last_update_ms=transit.last_update_ms, pending=None)

    def write_failed(self, *, keep_pending=False):
        """The metadata after the write of the pending change failed: the change is dropped
        (``keep_pending``: kept, for a write the caller retries)."""
        return self if keep_pending else dataclasses.replace(self, pending=None)
