"""Which open transactions are hanging: kafka-transactions.sh ``find-hanging``'s rule, pure.

A transaction is open on a partition while the partition's producer state holds its first
offset (DescribeProducers' ``CurrentTxnStartOffset``). Normally its coordinator ends it:
with a marker after EndTxn, or by aborting it once it is open past its timeout. It *hangs*
when no coordinator will: the partition holds the last stable offset at its first offset
for good, and every ``read_committed`` consumer of the partition stops there.

Kafka's tool decides it in two steps (``FindHangingTransactionsCommand``), kept here:

1. **Candidates** (:func:`candidates`): an active producer with an open transaction whose
   last write is older than the longest timeout a transaction may have
   (``now - LastTimestamp > --max-transaction-timeout``, minutes, default 15, Kafka's
   ``transaction.max.timeout.ms``). A younger one may still be ended by its producer.
2. **Hanging** (:func:`hanging`), per candidate, from ListTransactions filtered by the
   candidates' producer ids and DescribeTransactions of the ids found:

   no transactional id has the producer id     hanging: no coordinator knows the producer
   the id is not found (TRANSACTIONAL_ID_NOT_FOUND)
                                               hanging
   the id's partitions do not include this one hanging: the coordinator has moved on (a
                                               later transaction, or its marker here
                                               was already written or lost)
   the id's partitions include this one        not hanging: the coordinator still owes
                                               this partition its marker (Ongoing, or
                                               Prepare* with the marker pending)

The remedy is ``abort``: an ABORT marker written with the producer's id, epoch and
coordinator epoch from the partition's producer state (the row this rule prints).
"""

from typing import NamedTuple

__all__ = ["ProducerState", "OpenTransaction", "candidates", "hanging"]

NO_OFFSET = -1       # WIRE: DescribeProducers' CurrentTxnStartOffset when none is open


class ProducerState(NamedTuple):
    """One active producer of a partition, as DescribeProducers answers it."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int          # of the producer's last marker here; -1 before any
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int   # NO_OFFSET: no open transaction


class OpenTransaction(NamedTuple):
    topic: str
    partition: int
    producer: ProducerState


def candidates(producers_by_partition, now_ms, max_timeout_ms):
    """The OpenTransaction s of ``{(topic, partition): [ProducerState]}`` whose last write
    is more than ``max_timeout_ms`` old, in partition order."""
    out = []
    for (topic, partition), producers in sorted(producers_by_partition.items()):
        for p in producers:
            if p.current_txn_start_offset != NO_OFFSET and \
                    now_ms - p.last_timestamp > max_timeout_ms:
                out.append(OpenTransaction(topic, partition, p))
    return out


def hanging(open_transactions, transactional_ids, partitions_of):
    """The hanging ones of ``open_transactions``. ``transactional_ids``: ``{producer id:
    transactional id}`` from ListTransactions; ``partitions_of``: ``{transactional id:
    set of (topic, partition), or None when TRANSACTIONAL_ID_NOT_FOUND}`` from
    DescribeTransactions. See the module docstring's table."""
    out = []
    for txn in open_transactions:
        tid = transactional_ids.get(txn.producer.producer_id)
        if tid is None:
            out.append(txn)
            continue
        partitions = partitions_of.get(tid)
        if partitions is None or (txn.topic, txn.partition) not in partitions:
            out.append(txn)
    return out
