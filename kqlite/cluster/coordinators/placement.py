"""Where a coordinator's state topic is led in a cluster (Kafka's coordinators in ZooKeeper
mode): the coordinator of a key is the leader of the key's partition of the state topic,
and the topic is an ordinary replicated topic.

Theory of operation.

- The state topic (``__consumer_offsets`` for the groups, ``__transaction_state`` for the
  transactions) is created through ZooKeeper on the first FindCoordinator that finds it
  missing, with its configured partition count and replication factor
  (``offsets.topic.num.partitions``, ``offsets.topic.replication.factor``;
  ``transaction.state.log.num.partitions``, ``transaction.state.log.replication.factor``)
  and Kafka's configs for it (compact, 100 MiB segments; the producer's compression for
  the offsets, none and ``min.insync.replicas`` = ``transaction.state.log.min.isr`` for
  the transactions, whose every record is written with acks=-1). With fewer live
  brokers than the replication factor the creation fails (logged) and, as for any
  FindCoordinator while the topic has no leader for the key's partition, the answer is
  COORDINATOR_NOT_AVAILABLE; clients retry.
- FindCoordinator answers the leader of the key's partition as this broker's metadata
  cache (the controller's UpdateMetadata) states it; keys are placed by the partition
  count the cache states, or the configured one before the topic is known.
- Everything else -- which partitions this broker owns and loads, the records and their
  appends through the partition seam with acks=-1 -- is the coordinator runtime's
  (kqlite/server/coordinator/), fed the leadership changes by roles.py; before a load,
  the records kqlite's legacy placement left elsewhere are brought in (relocation.py).
"""

import asyncio
import logging
import uuid

from ...errors import KqliteError, TopicExistsError
from ...format.internal_topics import OFFSETS_CONFIG, OFFSETS_TOPIC
from ...protocol import ErrorCode
from ...server.coordinator.ownership import Ownership
from ...server.coordinator.placement import Placement
from ...server.coordinator.runtime import CoordinatorRuntime
from ...server.coordinator.state_log import PartitionStateLog
from ..rules.assignment import InvalidReplicationFactorError, assign_replicas
from ..zookeeper import znodes as zn
from .relocation import PartnerRelocation

__all__ = ["ClusterPlacement", "cluster_runtime", "DEFAULT_OFFSETS_REPLICATION_FACTOR"]

log = logging.getLogger("kqlite.cluster")

DEFAULT_OFFSETS_REPLICATION_FACTOR = 3    # Kafka's offsets.topic.replication.factor
# The configs Kafka creates a state topic with, where they differ from the topic's own
# (groupMetadataTopicConfigs: the offsets topic's plus the producer's compression).
_CREATION_CONFIGS = {OFFSETS_TOPIC: {**OFFSETS_CONFIG, "compression.type": "producer"}}

E = ErrorCode


class ClusterPlacement(Placement):
    """The Placement of a state topic on a cluster broker; see the module docstring.
    ``node`` is the ClusterNode (its metadata cache and ZooKeeper store are read when
    used: they are made after this)."""

    def __init__(self, node, topic, *, replication_factor, creation_config=None):
        self.node = node
        self.topic = topic
        self.replication_factor = replication_factor
        self.creation_config = creation_config or _CREATION_CONFIGS.get(topic.name,
                                                                        topic.config)
        self._creating = None                   # the task creating the topic

    def partition_count(self):
        return len(self.node.cache.topic_partitions(self.topic.name)) or self.topic.partitions

    async def coordinator_for(self, index):
        cache = self.node.cache
        partitions = cache.topic_partitions(self.topic.name)
        if not partitions:
            await self._create_topic()
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        info = partitions.get(index)
        endpoint = cache.endpoint(info.leader, self.node.inter_broker.name) \
            if info is not None else None
        if endpoint is None:
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return E.NONE, info.leader, *endpoint

    async def _create_topic(self):
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create())
        await asyncio.shield(self._creating)

    async def _create(self):
        name, live = self.topic.name, sorted(self.node.cache.brokers)
        try:
            assignment = assign_replicas(self.topic.partitions, self.replication_factor, live)
        except InvalidReplicationFactorError:
            log.warning("cannot create %s yet: %d live broker(s), below its replication "
                        "factor %d; this passes once enough brokers have started", name,
                        len(live), self.replication_factor)
            return
        config = self.creation_config
        try:
            await self.node.zk_request(self.node.store.create_topic, name,
                                       zn.TopicAssignment(uuid.uuid4(), assignment),
                                       {k: str(v) for k, v in config.items()})
            log.info("created %s: %d partitions, replication factor %d", name,
                     self.topic.partitions, self.replication_factor)
        except TopicExistsError:
            pass
        except (KqliteError, OSError) as exc:
            log.error("cannot create %s: %s", name, exc)


def cluster_runtime(node, broker, topic, *, replication_factor, creation_config=None):
    """The runtime of a coordinator's state topic on a cluster broker: placed by the
    cluster's metadata, owned as leadership moves, written through the partition seam;
    for ``__consumer_offsets``, a partition's records that kqlite's legacy placement left
    in its partner are brought in before each load (relocation.py). ``creation_config``:
    the topic configs it is created with (by default Kafka's for that topic)."""
    placement = ClusterPlacement(node, topic, replication_factor=replication_factor,
                                 creation_config=creation_config)
    state_log = PartitionStateLog(topic, broker)
    relocation = PartnerRelocation(node, topic, state_log=state_log, placement=placement) \
        if topic.name == OFFSETS_TOPIC else None
    return CoordinatorRuntime(topic, placement=placement, ownership=Ownership(),
                              state_log=state_log, relocation=relocation)
