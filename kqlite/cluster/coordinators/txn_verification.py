"""KIP-890 part 1 across brokers: a partition leader asks the transaction coordinator of a
producer's transactional id, wherever it runs, whether a partition is in the producer's
transaction (Kafka's AddPartitionsToTxnManager).

Theory of operation. :meth:`ClusterVerification.verify` answers, for the partitions of one
verification:

- a partition of a mirror topic, or any when one is: INVALID_REQUEST for the mirror
  topic's (its config read from ZooKeeper as the verification is made), the others
  OPERATION_NOT_ATTEMPTED, as AddPartitionsToTxn answers a refused partition
  (kqlite/server/mirror_guard.py): no transaction may write to a mirror topic, and the
  answer is the same whichever broker coordinates the id;
- this broker leads the id's ``__transaction_state`` partition (it owns it or is loading
  it): its own coordinator answers (``verify_partitions``: NONE, its refusal, or
  COORDINATOR_LOAD_IN_PROGRESS while it loads);
- another broker leads it (this broker's metadata cache says which): AddPartitionsToTxn
  v4 (or v5) with ``verify_only`` goes to it over the inter-broker listener; the answer's
  per-partition codes are returned, its top-level error code (CLUSTER_AUTHORIZATION_FAILED)
  for every partition when it has one;
- no broker leads it (``__transaction_state`` missing, an election under way):
  COORDINATOR_NOT_AVAILABLE;
- the coordinator's broker cannot be reached, or drops the connection, or gives no
  answer within the request timeout: NETWORK_EXCEPTION, as Kafka's manager answers a
  disconnection.

What the partition side makes of each answer (NOT_ENOUGH_REPLICAS for the retriable
ones, so that the producer retries) is the Produce and TxnOffsetCommit handlers'. Kafka
batches the verifications of many producers into one request per coordinator broker;
here each verification is one request, pipelined with the others on the one connection
to that broker (network/peers.py).
"""

import logging

from ...protocol import ApiKey, ErrorCode
from ...server.coordinator.txn.verification import Verification
from ...server.mirror_guard import transaction_refusals
from ..network.broker_client import BrokerClientError

__all__ = ["ClusterVerification"]

log = logging.getLogger("kqlite.cluster")

E = ErrorCode
_VERSIONS = (4, 5)      # WIRE: the batched, broker-to-broker AddPartitionsToTxn (KIP-890)


class ClusterVerification(Verification):
    """See the module docstring. ``broker``: this cluster broker's Broker (its transaction
    coordinator and runtime); ``peers``: the PeerConnections to the other brokers;
    ``timeout_s``: how long an answer may take."""

    def __init__(self, broker, peers, timeout_s=30.0):
        self.broker = broker
        self.peers = peers
        self.timeout_s = timeout_s

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions):
        refused = await transaction_refusals(self.broker.replicas,
                                             sorted({topic for topic, _ in partitions}))
        if refused:
            return {tp: refused.get(tp[0], E.OPERATION_NOT_ATTEMPTED) for tp in partitions}
        coordinator = self.broker.transactions
        runtime = coordinator.runtime
        if runtime.owner_error(transactional_id) != E.NOT_COORDINATOR:
            return await coordinator.verify_partitions(transactional_id, producer_id,
                                                       producer_epoch, partitions)
        code, node_id, _host, _port = await runtime.coordinator_for(transactional_id)
        if code:
            return dict.fromkeys(partitions, code)
        if node_id == self.broker.broker_id:
            # Elected here, and the election not yet applied: the local answer is
            # NOT_COORDINATOR, which the producer retries.
            return await coordinator.verify_partitions(transactional_id, producer_id,
                                                       producer_epoch, partitions)
        by_topic = {}
        for topic, index in sorted(partitions):
            by_topic.setdefault(topic, []).append(index)
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        try:
            answer = await self.peers.request(node_id, ApiKey.ADD_PARTITIONS_TO_TXN,
                                              _VERSIONS, body, timeout=self.timeout_s)
        except (BrokerClientError, OSError) as exc:
            log.info("verifying %s's partitions with broker %d failed: %s",
                     transactional_id, node_id, exc)
            return dict.fromkeys(partitions, E.NETWORK_EXCEPTION)
        if answer["error_code"]:
            return dict.fromkeys(partitions, answer["error_code"])
        codes = {(t["name"], p["partition_index"]): p["partition_error_code"]
                 for r in answer["results_by_transaction"]
                 if r["transactional_id"] == transactional_id
                 for t in r["topic_results"] for p in t["results_by_partition"]}
        return {tp: codes.get(tp, E.NETWORK_EXCEPTION) for tp in partitions}
