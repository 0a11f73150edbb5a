"""The transaction coordinator's marker channel on a cluster broker: WriteTxnMarkers to
each partition's leader, batched per broker (Kafka's TransactionMarkerChannelManager).

Theory of operation. The coordinator (kqlite/server/coordinator/txn/coordinator.py)
decides which partitions still need a marker, retries and completes; this channel only
routes and sends, and turns every failure into the partition answer Kafka's completion
handler sees (markers.py's table then says retry, drop or abandon):

- Routing. Each partition goes to its leader as this broker's metadata cache (the
  controller's UpdateMetadata) states it now, looked up again at every delivery, so a
  marker retried after NOT_LEADER_OR_FOLLOWER follows the leadership. A partition whose
  leader is unknown or not alive (an election under way) is answered
  NOT_LEADER_OR_FOLLOWER without a request: it is retried after the backoff. The
  coordinator's own partitions go over the network too, as Kafka's do: one path.
- Batching. The markers of every transaction delivered in the same turn of the event loop
  go to one broker in one WriteTxnMarkers request (one entry per producer id: two markers
  of one producer never share a request, the answer being keyed by producer id). Requests
  are pipelined on one connection per broker (network/peers.py).
- Failures. A broker that cannot be reached, or a connection lost under the request:
  NETWORK_EXCEPTION for its partitions; no answer within the request timeout (the
  marker's acks=-1 append waits up to ``timeout_ms`` there, this waits that plus a
  margin): REQUEST_TIMED_OUT; a partition missing from the answer: NETWORK_EXCEPTION.
  All of them are retried.
- Deleted partitions (:meth:`ClusterMarkerChannel.leaders_known`). A partition that the
  metadata cache knows stays in the transaction. One it does not know leaves the
  transaction only when ZooKeeper confirms that its topic, or that partition of it, no
  longer exists: a broker elected coordinator may load ``__transaction_state`` before the
  controller's UpdateMetadata told it every topic, and dropping a partition on the
  cache's word alone would leave that partition's transaction open forever. When
  ZooKeeper cannot be asked, the partition stays (retried).

The leaders write each marker with acks=-1 (the WriteTxnMarkers handler,
kqlite/server/handlers/transactions.py) and fence a marker whose coordinator epoch is
below the one they hold for the producer (TRANSACTION_COORDINATOR_FENCED, storage's
rule): the coordinator epoch is the ``__transaction_state`` partition's leader epoch, so a
deposed coordinator's late markers are refused.
"""

import asyncio
import logging

from ...errors import KqliteError, UnknownTopicError
from ...protocol import ApiKey, ErrorCode
from ...server.coordinator.txn.markers import MarkerChannel
from ..network.broker_client import BrokerClientError, BrokerRequestTimeoutError

__all__ = ["ClusterMarkerChannel"]

log = logging.getLogger("kqlite.cluster")

E = ErrorCode
_VERSIONS = (0, 1)           # WIRE: Kafka 3.9 brokers send v1 (MetadataVersion 2.8-IV0+)
_MARGIN_S = 5.0              # the answer may take the leader's whole append timeout


class ClusterMarkerChannel(MarkerChannel):
    """See the module docstring. ``node``: the ClusterNode (its metadata cache, the
    inter-broker listener's name, ZooKeeper); ``peers``: the PeerConnections the requests
    go through; ``timeout_ms``: how long a leader waits for a marker's acks=-1 append
    (Kafka's request.timeout.ms)."""

    def __init__(self, node, peers, timeout_ms=30000):
        self.node = node
        self.peers = peers
        self.timeout_ms = timeout_ms
        self._queues = {}      # broker id -> [(marker, partitions, future)] for this turn
        self._sending = set()  # strong references: the loop keeps only weak ones

    async def leaders_known(self, partitions):
        cache = self.node.cache
        known = {tp for tp in partitions if cache.partition(*tp) is not None}
        for topic in {t for t, _ in partitions} - {t for t, _ in known}:
            indexes = await self._partitions_in_zookeeper(topic)
            known |= {(t, i) for t, i in partitions
                      if t == topic and (indexes is None or i in indexes)}
        return known

    async def _partitions_in_zookeeper(self, topic):
        """The partition indexes ZooKeeper assigns ``topic`` (empty: no such topic), or
        None when ZooKeeper cannot say."""
        try:
            assignment = await self.node.zk_request(self.node.store.topic_assignment, topic)
        except UnknownTopicError:
            return set()
        except (KqliteError, OSError) as exc:
            log.info("cannot tell whether %s still exists (%s): its markers are retried",
                     topic, exc)
            return None
        return set(assignment.partitions)

    async def deliver(self, marker):
        cache = self.node.cache
        results, by_broker = {}, {}
        for tp in marker.partitions:
            info = cache.partition(*tp)
            if info is None or info.leader < 0 or not cache.is_alive(info.leader):
                results[tp] = E.NOT_LEADER_OR_FOLLOWER
            else:
                by_broker.setdefault(info.leader, []).append(tp)
        answers = await asyncio.gather(*(self._queue(broker_id, marker, tps)
                                         for broker_id, tps in by_broker.items()))
        for answer in answers:
            results.update(answer)
        return results

    def _queue(self, broker_id, marker, partitions):
        """The future of ``{partition: code}`` for ``partitions`` of ``marker`` on
        ``broker_id``, sent with whatever else is queued for that broker this turn."""
        future = asyncio.get_running_loop().create_future()
        queue = self._queues.get(broker_id)
        if queue is None:
            queue = self._queues[broker_id] = []
            asyncio.get_running_loop().call_soon(self._flush, broker_id)
        queue.append((marker, partitions, future))
        return future

    def _flush(self, broker_id):
        queue = self._queues.pop(broker_id, [])
        batch, later, producers = [], [], set()
        for item in queue:
            if item[0].producer_id in producers:
                later.append(item)
            else:
                producers.add(item[0].producer_id)
                batch.append(item)
        if later:
            self._queues[broker_id] = later
            asyncio.get_running_loop().call_soon(self._flush, broker_id)
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(broker_id, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, broker_id, batch):
        body = {"markers": [_marker_entry(marker, partitions)
                            for marker, partitions, _future in batch]}
        answer, failure = None, (E.NETWORK_EXCEPTION, None)
        try:
            answer = await self.peers.request(broker_id, ApiKey.WRITE_TXN_MARKERS, _VERSIONS,
                                              body,
                                              timeout=self.timeout_ms / 1000.0 + _MARGIN_S)
        except BrokerRequestTimeoutError as exc:
            failure = (E.REQUEST_TIMED_OUT, exc)
        except (BrokerClientError, OSError) as exc:
            failure = (E.NETWORK_EXCEPTION, exc)
        except BaseException as exc:
            for _marker, partitions, future in batch:
                if not future.done():
                    future.set_exception(exc)
            raise
        if answer is None:
            log.info("WriteTxnMarkers to broker %d failed (%s): its %d marker(s) are retried",
                     broker_id, failure[1], len(batch))
            codes = {}
        else:
            codes = _answer_codes(answer)
        for marker, partitions, future in batch:
            if not future.done():
                future.set_result({tp: codes.get((marker.producer_id, *tp),
                                                 failure[0] if answer is None
                                                 else E.NETWORK_EXCEPTION)
                                   for tp in partitions})


def _marker_entry(marker, partitions):
    by_topic = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return {"producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
            "transaction_result": marker.commit, "coordinator_epoch": marker.coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": indexes}
                       for topic, indexes in by_topic.items()]}


def _answer_codes(answer):
    """``{(producer id, topic, partition): error code}`` of a WriteTxnMarkers answer."""
    return {(m["producer_id"], t["name"], p["partition_index"]): p["error_code"]
            for m in answer["markers"] for t in m["topics"] for p in t["partitions"]}
