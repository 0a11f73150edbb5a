"""Transaction markers: what the coordinator asks partition leaders to write, the channel
that delivers them, and what each answer means (Kafka's TransactionMarkerChannelManager
and TransactionMarkerRequestCompletionHandler).

Theory of operation
-------------------
Once an id's PrepareCommit or PrepareAbort is logged, every partition of its transaction
gets one COMMIT or ABORT control batch (a *marker*) carrying the producer id, its epoch
and the coordinator epoch. The coordinator (coordinator.py) keeps the retry and
completion logic; a :class:`MarkerChannel` only delivers "these markers to these
partitions" and reports each partition's error code. Two channels:

- :class:`LocalMarkerChannel`, the single broker's: each marker is appended to this
  broker's own partition through the partition seam (``Partition.append_marker``,
  acks=-1), and a marker on ``__consumer_offsets`` completes the transaction's offsets in
  the group coordinator, as WriteTxnMarkers does (:func:`write_marker`);
- a cluster's, later: WriteTxnMarkers over the network to each partition's leader.

Before each delivery round the coordinator asks :meth:`MarkerChannel.leaders_known`: a
partition without a leader at all (its topic was deleted) leaves the transaction, as
Kafka's channel removes a partition missing from the metadata. Each answer is then
classified by :func:`marker_outcome`, Kafka's completion handler's table:

    NONE                                          DELIVERED: the partition is done
    UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_    RETRY: sent again after a backoff, its
    FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), leader looked up again
    REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR,
    NETWORK_EXCEPTION (a lost connection)
    UNSUPPORTED_FOR_MESSAGE_FORMAT,               DROPPED: the partition leaves the
    UNSUPPORTED_VERSION                           transaction unmarked
    INVALID_PRODUCER_EPOCH,                       ABANDONED: the whole transaction's
    TRANSACTION_COORDINATOR_FENCED                markers stop; the id stays Prepare* with
                                                  its Complete* pending (every request for
                                                  it gets CONCURRENT_TRANSACTIONS) until
                                                  its partition is loaded again
    anything else                                 ABANDONED, logged as an error (Kafka
                                                  throws IllegalStateException)
"""

import abc
import asyncio
import enum
import logging
from typing import NamedTuple

from ....format.internal_topics import OFFSETS_TOPIC
from ....protocol import ErrorCode
from ...partition import PartitionError

__all__ = ["TxnMarker", "MarkerChannel", "LocalMarkerChannel", "MarkerOutcome",
           "marker_outcome", "write_marker"]

log = logging.getLogger("kqlite.server")

E = ErrorCode


class TxnMarker(NamedTuple):
    """One transaction's markers (WriteTxnMarkers' WritableTxnMarker): ``commit`` True
    for COMMIT, ``partitions`` a set of (topic, partition)."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset


class MarkerOutcome(enum.Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DROPPED = "dropped"
    ABANDONED = "abandoned"


_OUTCOMES = {
    E.NONE: MarkerOutcome.DELIVERED,
    **{code: MarkerOutcome.RETRY for code in (
        E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR,
        E.NETWORK_EXCEPTION)},
    E.UNSUPPORTED_FOR_MESSAGE_FORMAT: MarkerOutcome.DROPPED,
    E.UNSUPPORTED_VERSION: MarkerOutcome.DROPPED,
    E.INVALID_PRODUCER_EPOCH: MarkerOutcome.ABANDONED,
    E.TRANSACTION_COORDINATOR_FENCED: MarkerOutcome.ABANDONED,
}


def marker_outcome(code):
    """What a partition's answer to a marker means; see the module docstring."""
    return _OUTCOMES.get(code, MarkerOutcome.ABANDONED)


class MarkerChannel(abc.ABC):
    """Delivers markers to partition leaders; see the module docstring."""

    @abc.abstractmethod
    async def leaders_known(self, partitions):
        """The partitions of ``partitions`` that have a leader (exist) now."""

    @abc.abstractmethod
    async def deliver(self, marker):
        """Write ``marker`` on each of its partitions; ``{(topic, partition): error code}``
        for every one of them."""


async def write_marker(broker, topic, index, marker, *, timeout_ms):
    """Append ``marker``'s control batch to this broker's partition ``topic-index``
    (acks=-1, as WriteTxnMarkers appends it); its error code. A marker on
    ``__consumer_offsets`` then settles the transaction's offsets in the group
    coordinator (Kafka's onTransactionCompleted)."""
    try:
        partition = await broker.replicas.get(topic, index)
    except PartitionError as exc:
        return exc.error_code
    result = await partition.append_marker(marker.producer_id, marker.producer_epoch,
                                           marker.coordinator_epoch, marker.commit,
                                           timeout_ms=timeout_ms)
    if not result.error_code and broker.transactions is not None:
        broker.transactions.counters.marker_written(marker.commit)
    if not result.error_code and topic == OFFSETS_TOPIC:
        await broker.coordinator.offsets.transaction_completed(index, marker.producer_id,
                                                               marker.commit)
    return result.error_code


class LocalMarkerChannel(MarkerChannel):
    """The single broker's channel: every partition is this broker's own (``broker``'s
    replica manager); ``timeout_ms`` bounds each acks=-1 append (Kafka's
    request.timeout.ms)."""

    def __init__(self, broker, timeout_ms=30000):
        self.broker = broker
        self.timeout_ms = timeout_ms

    async def leaders_known(self, partitions):
        known = set()
        counts = {}
        for topic, index in partitions:
            if topic not in counts:
                try:
                    counts[topic] = len((await self.broker.replicas.topic(topic)).partitions)
                except PartitionError:
                    counts[topic] = 0
            if 0 <= index < counts[topic]:
                known.add((topic, index))
        return known

    async def deliver(self, marker):
        keys = sorted(marker.partitions)
        codes = await asyncio.gather(*(write_marker(self.broker, topic, index, marker,
                                                    timeout_ms=self.timeout_ms)
                                       for topic, index in keys))
        return dict(zip(keys, codes))
