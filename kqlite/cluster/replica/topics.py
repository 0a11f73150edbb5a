"""Topics as a cluster broker sees and changes them: Metadata from the metadata cache,
creation, deletion and new partitions through ZooKeeper (Kafka's ZooKeeper mode).

Theory of operation. A cluster broker never answers topic questions from its own data
dir: the controller's UpdateMetadata requests (metadata_cache.py) are the truth it
reports, exactly as Kafka's ZkMetadataCache is. Changes are written to ZooKeeper the way
Kafka's AdminZkClient writes them (the config under ``/config/topics``, then the
assignment under ``/brokers/topics``); the controller's watches do the rest (leaders,
LeaderAndIsr, UpdateMetadata), and the request waits until this broker's cache shows the
result, as Kafka's DelayedCreatePartitions and DelayedDeleteTopics wait.

- CreateTopics, DeleteTopics and CreatePartitions are served only by the active
  controller; the others answer NOT_CONTROLLER and clients resend to the controller
  named in Metadata.
- Metadata's auto-creation is done by whichever broker is asked (Kafka's ZooKeeper-mode
  broker writes the znodes itself); the topic is answered LEADER_NOT_AVAILABLE until
  its leaders are known.
- Config changes (handlers/configs.py) are written to ``/config/topics`` with a change
  notification (:meth:`ClusterTopics.set_config_overrides`); every broker's config
  watcher then tells its replica manager (``ClusterReplicaManager.topic_config_changed``).
- Replicas are placed by Kafka's rack-unaware rule (rules/assignment.py) over the brokers
  registered in ZooKeeper, read when a topic or partitions are created (as Kafka's
  AdminZkClient reads them), not over the cache's live brokers: the cache lags the
  registrations (by seconds on a loaded machine just after a start), and a topic placed
  over a partial set keeps a smaller replication factor for ever.
  ``default.replication.factor`` for auto-created topics is capped at the registered
  broker count.

The replica manager (manager.py) holds one :class:`ClusterTopics` (its ``topics``) and
answers the server's topic questions through it; the cluster's topic handlers
(kqlite/cluster/handlers) call it for the changes.
"""

import logging
import uuid
from typing import NamedTuple

from ...errors import ConfigError, KqliteError, TopicExistsError, UnknownTopicError
from ...protocol import ErrorCode
from ...server.partition import PartitionError
from ...server.replica_manager import INTERNAL_TOPICS, TopicInfo
from ...server.topic_checks import check_topic
from ...storage.config import LogConfig, check_kafka_names
from ..rules.assignment import (InvalidReplicaAssignmentError, InvalidReplicationFactorError,
                                assign_replicas, check_assignment)
from ..zookeeper import znodes as zn
from ..zookeeper.store import ZooKeeperError

__all__ = ["ClusterTopics", "AdvertisedPartition"]

log = logging.getLogger("kqlite.cluster")

_ZERO_UUID = uuid.UUID(int=0)


class AdvertisedPartition(NamedTuple):
    """One partition as this broker advertises it in Metadata: its metadata cache's entry
    (a CachedPartition), a leader that is not a live broker shown as -1 with
    LEADER_NOT_AVAILABLE, in the attributes the Metadata handler reads from a partition."""
    index: int
    leader_id: int
    leader_epoch: int
    replicas: list
    isr: list
    offline_replicas: list
    error_code: int = ErrorCode.NONE


class ClusterTopics:
    """Metadata and topic changes of a cluster broker (see the module docstring).

    ``db``: the broker's Database (its config defaults); ``cache``: the MetadataCache;
    ``zk_request(fn, *args)``: a coroutine running a blocking ZooKeeper call for a
    client's request in a thread; ``store()`` and ``controller()``: the ZkStore and this
    broker's Controller, both made after this object (None until then). Sizes are the
    broker's settings (``default_partitions``, ``default.replication.factor``, the most
    topics one Metadata request auto-creates)."""

    def __init__(self, db, *, broker_id, cache, zk_request, store, controller,
                 default_partitions, default_replication_factor, auto_create_limit):
        self.db = db
        self.broker_id = broker_id
        self.cache = cache
        self._zk_request = zk_request
        self._store = store
        self._controller = controller
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.auto_create_limit = auto_create_limit

    # -- Metadata -----------------------------------------------------------------------

    async def topic_names(self):
        return self.cache.topics()

    async def topic_names_by_id(self, topic_ids):
        out = {}
        for topic_id in set(topic_ids):
            name = self.cache.topic_by_id(topic_id)
            if name is not None:
                out[topic_id] = name
        return out

    async def topic(self, name, *, auto_create=False):
        found = (await self.describe_topics([name], auto_create=auto_create))[name]
        if isinstance(found, PartitionError):
            raise found
        return found

    async def describe_topics(self, names, *, auto_create=False):
        found = {}
        unknown = []
        for name in names:
            try:
                check_topic(name)
            except PartitionError as exc:
                found[name] = exc
                continue
            info = self._topic_info_from_cache(name)
            if info is not None:
                found[name] = info
            elif auto_create:
                unknown.append(name)
            else:
                found[name] = PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             f"unknown topic {name!r}")
        for name in unknown[:self.auto_create_limit]:
            found[name] = await self._auto_create(name)
        for name in unknown[self.auto_create_limit:]:
            found[name] = PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"topic {name!r} is not created yet; ask again")
        return found

    def _topic_info_from_cache(self, name):
        partitions = self.cache.topic_partitions(name)
        if not partitions:
            return None
        views = []
        for index, p in sorted(partitions.items()):
            alive = p.leader >= 0 and self.cache.is_alive(p.leader)
            views.append(AdvertisedPartition(
                index, p.leader if alive else -1, p.leader_epoch, list(p.replicas), list(p.isr),
                list(p.offline_replicas),
                ErrorCode.NONE if alive else ErrorCode.LEADER_NOT_AVAILABLE))
        return TopicInfo(name, self.cache.topic_id(name) or _ZERO_UUID, name in INTERNAL_TOPICS,
                         views)

    async def _auto_create(self, name):
        """Create ``name`` through ZooKeeper with the broker's defaults; the answer is
        LEADER_NOT_AVAILABLE (its leaders are not elected yet), as Kafka's."""
        try:
            live = await self._registered_brokers()
        except KqliteError as exc:
            log.error("cannot auto-create topic %s: %s", name, exc)
            return PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        factor = min(len(live), self.default_replication_factor)
        if factor < 1:
            return PartitionError(ErrorCode.LEADER_NOT_AVAILABLE,
                                  "no live brokers known yet")
        assignment = assign_replicas(self.default_partitions, factor, live)
        try:
            await self._zk_request(self._store().create_topic, name,
                                   zn.TopicAssignment(uuid.uuid4(), assignment), {})
            log.info("auto-created topic %s: %d partitions, replication factor %d", name,
                     len(assignment), factor)
        except TopicExistsError:
            pass    # another broker created it meanwhile
        except KqliteError as exc:
            log.error("cannot auto-create topic %s: %s", name, exc)
            return PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        return PartitionError(ErrorCode.LEADER_NOT_AVAILABLE,
                              f"topic {name!r} is being created")

    async def _registered_brokers(self):
        """The ids of the brokers registered in ZooKeeper now, sorted."""
        return sorted(await self._zk_request(self._store().brokers))

    async def topic_config(self, name):
        """(per-topic overrides, effective config) from ZooKeeper's /config/topics."""
        check_topic(name)
        if not self.cache.topic_partitions(name):
            raise UnknownTopicError(f"unknown topic {name!r}")
        try:
            overrides = await self._zk_request(self._store().topic_config, name)
        except ZooKeeperError as exc:
            # The handlers asking (DescribeConfigs, DeleteRecords, Fetch) answer this
            # per topic or partition, as Kafka answers an exception it did not expect.
            raise PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"cannot read the config of topic {name!r}: {exc}") from None
        merged = dict(self.db.defaults)
        merged.update(overrides)
        try:
            effective = LogConfig(merged).as_dict()
        except ConfigError:      # a setting kqlite does not know: report the defaults
            effective = LogConfig(dict(self.db.defaults)).as_dict()
        return overrides, effective

    async def config_overrides(self, name):
        """The per-topic overrides of ``name`` in ``/config/topics`` for a config change;
        UnknownTopicError when ZooKeeper holds no assignment for it."""
        store = self._store()
        await self._zk_request(store.topic_assignment, name)
        return await self._zk_request(store.topic_config, name)

    async def set_config_overrides(self, name, overrides):
        """Write ``overrides`` as the config of ``name``, with the change notification every
        broker's config watcher follows (Kafka's AdminZkClient.changeTopicConfig)."""
        await self._zk_request(self._store().set_topic_config, name, overrides)

    # -- Changes (active controller only) -------------------------------------------------

    def check_controller(self):
        """Raise NOT_CONTROLLER unless this broker is the active controller, the only one
        that changes topics (Kafka's ZooKeeper mode)."""
        controller = self._controller()
        if controller is None or not controller.is_active:
            raise PartitionError(ErrorCode.NOT_CONTROLLER,
                                 f"broker {self.broker_id} is not the controller "
                                 f"(broker {self.cache.controller_id} is)")

    async def create_topic(self, name, count, factor, configs, *, assignments=None,
                                   validate_only=False):
        """CreateTopics for one topic; returns (partition count, replication factor,
        topic id or None). Raises PartitionError or KqliteError (TopicExistsError,
        ConfigError, ...)."""
        self.check_controller()
        check_topic(name)
        check_kafka_names(configs)
        LogConfig({**self.db.defaults, **configs})
        live = await self._registered_brokers()
        if assignments:
            if count != -1 or factor != -1:
                raise PartitionError(ErrorCode.INVALID_REQUEST,
                                     "both numPartitions or replicationFactor and "
                                     "replicasAssignments were set; both cannot be used at "
                                     "the same time")
            assignment = {p: tuple(r) for p, r in assignments.items()}
            try:
                check_assignment(assignment, live)
            except InvalidReplicaAssignmentError as exc:
                raise PartitionError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None
        else:
            count = self.default_partitions if count == -1 else count
            factor = self.default_replication_factor if factor == -1 else factor
            if count < 1:
                raise PartitionError(ErrorCode.INVALID_PARTITIONS,
                                     "number of partitions must be larger than 0")
            try:
                assignment = assign_replicas(count, factor, live)
            except InvalidReplicationFactorError as exc:
                raise PartitionError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
        count, factor = len(assignment), len(next(iter(assignment.values())))
        if self.cache.topic_partitions(name):
            raise TopicExistsError(f"topic {name!r} already exists")
        if validate_only:
            return count, factor, None
        topic_id = uuid.uuid4()
        await self._zk_request(self._store().create_topic, name,
                               zn.TopicAssignment(topic_id, assignment),
                               {k: str(v) for k, v in configs.items()})
        return count, factor, topic_id

    async def delete_topic(self, name):
        """DeleteTopics for one topic: the deletion marker; the controller does the rest."""
        self.check_controller()
        check_topic(name)
        if name in INTERNAL_TOPICS:
            raise PartitionError(ErrorCode.TOPIC_DELETION_DISABLED,
                                 f"{name} is an internal topic; clients cannot delete it")
        await self._zk_request(self._store().mark_topic_for_deletion, name)

    async def create_partitions(self, name, total, *, assignments=None,
                                        validate_only=False):
        """CreatePartitions for one topic: the grown assignment, written (fenced) by the
        controller; its partition-modification watch elects the new leaders."""
        self.check_controller()
        check_topic(name)
        current = await self._zk_request(self._store().topic_assignment, name)
        have = len(current.partitions)
        if total <= have:
            raise PartitionError(ErrorCode.INVALID_PARTITIONS,
                                 f"topic {name!r} has {have} partitions; it can only grow")
        factor = len(current.partitions[0])
        live = await self._registered_brokers()
        if assignments is not None:
            if len(assignments) != total - have:
                raise PartitionError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"{len(assignments)} assignments for {total - have} new "
                                     f"partitions")
            added = {have + i: tuple(r) for i, r in enumerate(assignments)}
            try:
                check_assignment({**current.partitions, **added}, live + [
                    b for r in current.partitions.values() for b in r])
            except InvalidReplicaAssignmentError as exc:
                raise PartitionError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None
        else:
            try:
                added = assign_replicas(total - have, factor, live, first_partition=have)
            except InvalidReplicationFactorError as exc:
                raise PartitionError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
        if validate_only:
            return
        grown = current._replace(partitions={**current.partitions, **added})
        await self._zk_request(self._store().set_topic_assignment, name, grown,
                               self._controller().context.epoch_zk_version)

    # -- The controller's answer -------------------------------------------------------------

    def topic_ready(self, name, count):
        """Whether the cache shows ``count`` partitions of ``name``, each with a leader."""
        partitions = self.cache.topic_partitions(name)
        return len(partitions) >= count and all(p.leader >= 0 for p in partitions.values())
