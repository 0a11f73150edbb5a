"""Consumer groups in a cluster (Kafka's GroupCoordinator and GroupMetadataManager in
ZooKeeper mode): a group's coordinator is the leader of its ``__consumer_offsets``
partition, and the group lives in that replicated partition.

Theory of operation.

- The offsets topic is an ordinary replicated topic created through ZooKeeper on the
  first FindCoordinator that finds it missing, with ``offsets.topic.num.partitions``
  partitions, ``offsets.topic.replication.factor`` replicas and Kafka's configs
  (compact, 100 MiB segments). With fewer live brokers than the replication factor the
  creation fails (logged) and, as for any FindCoordinator while the topic has no leader
  for the group's partition, the answer is COORDINATOR_NOT_AVAILABLE; clients retry.
- FindCoordinator answers the leader of partition ``group_partition(group)`` as this
  broker's metadata cache (the controller's UpdateMetadata) states it.
- Ownership (:class:`OffsetsOwnership`, pure) follows LeaderAndIsr and StopReplica:
  becoming leader of an offsets partition schedules its load -- every record from the
  log start to the log end (Kafka's doLoadGroupsAndOffsets reads with LOG_END
  isolation) becomes the partition's committed offsets and group metadata
  (:func:`read_offsets_partition`, pure) -- and requests for its groups get
  COORDINATOR_LOAD_IN_PROGRESS meanwhile. Becoming follower or being stopped unloads
  them: the coordinator drops the groups (waiting JoinGroup/SyncGroup get
  NOT_COORDINATOR), and every later request gets NOT_COORDINATOR. Each change carries
  the partition's leader epoch; one older than the latest seen changes nothing.
- Commits and group metadata are appended through the partition seam of the offsets
  partition as a produce with ``acks=-1`` (leader epoch stamped, answered once the high
  watermark passes them, ``offsets.commit.timeout.ms``); followers get them by ordinary
  replication. Append errors are mapped as GroupMetadataManager maps them
  (:data:`GROUP_STORE_ERRORS`, :data:`OFFSET_COMMIT_ERRORS`). A commit is visible to
  OffsetFetch once it is acknowledged.
"""

import asyncio
import collections
import logging
import uuid

from ...format.group_records import (decode_group_key, decode_group_value,
                                      encode_group_key, encode_group_value)
from ...format.internal_topics import (OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                       partition_for_key as group_partition)
from ...format.offset_records import (decode_offset_key as decode_key,
                                      decode_offset_value as decode_value,
                                      encode_offset_key as encode_key,
                                      encode_offset_value as encode_value)
from ...errors import CorruptRecordError, KqliteError, TopicExistsError
from ...format.batch import build_batch, now_ms
from ...format.record import Record
from ...protocol import ErrorCode
from ...server.group_placement import GroupPlacement
from ...server.partition import PartitionError
from ...storage import Isolation
from ..rules.assignment import InvalidReplicationFactorError, assign_replicas
from ..zookeeper import znodes as zn

__all__ = ["ClusterGroupPlacement", "OffsetsOwnership", "read_offsets_partition",
           "GROUP_STORE_ERRORS", "OFFSET_COMMIT_ERRORS", "DEFAULT_OFFSETS_REPLICATION_FACTOR",
           "DEFAULT_COMMIT_TIMEOUT_MS"]

log = logging.getLogger("kqlite.cluster")

DEFAULT_OFFSETS_REPLICATION_FACTOR = 3    # Kafka's offsets.topic.replication.factor
DEFAULT_COMMIT_TIMEOUT_MS = 5000          # Kafka's offsets.commit.timeout.ms
# Kafka's groupMetadataTopicConfigs: OFFSETS_CONFIG plus the producer's compression.
_TOPIC_CONFIG = {**OFFSETS_CONFIG, "compression.type": "producer"}

E = ErrorCode
# GroupMetadataManager.storeGroup's mapping of append errors (Kafka 3.9).
GROUP_STORE_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.REQUEST_TIMED_OUT: E.REBALANCE_IN_PROGRESS,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
}
# GroupMetadataManager.maybeConvertOffsetCommitError (Kafka 3.9); a timeout stays one.
OFFSET_COMMIT_ERRORS = {
    E.NETWORK_EXCEPTION: E.COORDINATOR_LOAD_IN_PROGRESS,
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}


class OffsetsOwnership:
    """Which offsets partitions this broker owns (loaded) or is loading, and the latest
    coordinator epoch (the partition's leader epoch) seen for each; pure (Kafka's
    ownedPartitions, loadingPartitions and epochForPartitionId)."""

    def __init__(self):
        self.owned = set()
        self.loading = set()
        self.epochs = {}

    def _newest(self, partition, epoch):
        """Record ``epoch``; whether it is at least the latest seen."""
        current = self.epochs.get(partition)
        if current is None or epoch > current:
            self.epochs[partition] = epoch
        return current is None or epoch >= current

    def elect(self, partition, epoch):
        """Leadership in ``epoch``: True when a load must start now (not an older
        epoch, not already owned or loading)."""
        if not self._newest(partition, epoch) or partition in self.owned \
                or partition in self.loading:
            return False
        self.loading.add(partition)
        return True

    def loaded(self, partition, epoch):
        """A load of ``epoch`` finished: True (now owned) unless a resignation or a newer
        election came meanwhile."""
        if partition not in self.loading or self.epochs.get(partition) != epoch:
            return False
        self.loading.discard(partition)
        self.owned.add(partition)
        return True

    def resign(self, partition, epoch):
        """Followership or StopReplica in ``epoch``: True (unload) unless the epoch is older
        than the latest seen."""
        if not self._newest(partition, epoch):
            return False
        self.owned.discard(partition)
        self.loading.discard(partition)
        return True

    def error_for(self, partition):
        if partition in self.owned:
            return E.NONE
        if partition in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NOT_COORDINATOR


def read_offsets_partition(records):
    """``({group: {(topic, partition): OffsetAndMetadata}}, {group: GroupMetadataValue})``
    from the records of one offsets partition, oldest first: the latest record of each
    key wins, a tombstone removes it. Unreadable records are skipped (logged)."""
    offsets = {}
    groups = {}
    for rec in records:
        try:
            key = decode_key(rec.key)
            if key is not None:
                group, topic, index = key
                if rec.value is None:
                    offsets.get(group, {}).pop((topic, index), None)
                else:
                    offsets.setdefault(group, {})[(topic, index)] = decode_value(rec.value)
                continue
            group = decode_group_key(rec.key)
            if group is not None:
                if rec.value is None:
                    groups.pop(group, None)
                else:
                    groups[group] = decode_group_value(rec.value)
        except CorruptRecordError as exc:
            log.warning("%s offset %s: skipping an unreadable record: %s", OFFSETS_TOPIC,
                        rec.offset, exc)
    return {g: o for g, o in offsets.items() if o}, groups


class ClusterGroupPlacement(GroupPlacement):
    """The GroupPlacement of a cluster broker; see the module docstring. ``node`` is the
    ClusterNode (its metadata cache, ZooKeeper store and replica manager are read when
    used: they are made after this)."""

    def __init__(self, node, broker, *, num_partitions=OFFSETS_PARTITIONS,
                 replication_factor=DEFAULT_OFFSETS_REPLICATION_FACTOR,
                 commit_timeout_ms=DEFAULT_COMMIT_TIMEOUT_MS):
        self.node = node
        self.broker = broker
        self.coordinator = None
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.commit_timeout_ms = commit_timeout_ms
        self.ownership = OffsetsOwnership()
        self._offsets = {}                      # group -> {(topic, partition): OffsetAndMetadata}
        self._pending = collections.Counter()   # (group, topic, partition) being committed
        self._loads = {}                        # offsets partition -> its load task
        self._creating = None                   # the task creating the offsets topic

    def partition_for(self, group_id):
        count = len(self.node.cache.topic_partitions(OFFSETS_TOPIC)) or self.num_partitions
        return group_partition(group_id, count)

    @property
    def loading(self):
        return bool(self.ownership.loading)

    def owner_error(self, group_id):
        return self.ownership.error_for(self.partition_for(group_id))

    # -- FindCoordinator ----------------------------------------------------------------------

    async def coordinator_for(self, group_id):
        cache = self.node.cache
        partitions = cache.topic_partitions(OFFSETS_TOPIC)
        if not partitions:
            await self._create_offsets_topic()
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        info = partitions.get(group_partition(group_id, len(partitions)))
        endpoint = cache.brokers.get(info.leader) if info is not None else None
        if endpoint is None:
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return E.NONE, endpoint.broker_id, endpoint.host, endpoint.port

    async def _create_offsets_topic(self):
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create())
        await asyncio.shield(self._creating)

    async def _create(self):
        live = sorted(self.node.cache.brokers)
        try:
            assignment = assign_replicas(self.num_partitions, self.replication_factor, live)
        except InvalidReplicationFactorError:
            log.warning("cannot create %s yet: %d live broker(s), below its replication "
                        "factor %d (offsets.topic.replication.factor); this passes once "
                        "enough brokers have started", OFFSETS_TOPIC, len(live),
                        self.replication_factor)
            return
        try:
            await self.node.zk_request(self.node.store.create_topic, OFFSETS_TOPIC,
                                    zn.TopicAssignment(uuid.uuid4(), assignment),
                                    {k: str(v) for k, v in _TOPIC_CONFIG.items()})
            log.info("created %s: %d partitions, replication factor %d", OFFSETS_TOPIC,
                     self.num_partitions, self.replication_factor)
        except TopicExistsError:
            pass
        except (KqliteError, OSError) as exc:
            log.error("cannot create %s: %s", OFFSETS_TOPIC, exc)

    # -- Leadership of offsets partitions -------------------------------------------------------

    def roles_changed(self, leaders, resigned):
        """The replica manager's hook after LeaderAndIsr or StopReplica: ``leaders`` became
        (or stay) leaders here, ``resigned`` follow or stopped (Partition objects)."""
        for partition in resigned:
            if partition.topic == OFFSETS_TOPIC and \
                    self.ownership.resign(partition.index, partition.leader_epoch):
                self._unload(partition.index)
        for partition in leaders:
            if partition.topic == OFFSETS_TOPIC and \
                    self.ownership.elect(partition.index, partition.leader_epoch):
                log.info("loading the groups of %s-%d (leader epoch %d)", OFFSETS_TOPIC,
                         partition.index, partition.leader_epoch)
                self._loads[partition.index] = asyncio.get_running_loop().create_task(
                    self._load(partition.index, partition.leader_epoch))

    async def _load(self, index, epoch):
        try:
            offsets, groups = await self.broker.io.run(self._read_partition, index)
        except asyncio.CancelledError:
            raise
        except Exception:       # noqa: BLE001 -- as Kafka: logged, the partition is owned
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, index)
            offsets, groups = {}, {}
        finally:
            if self._loads.get(index) is asyncio.current_task():
                del self._loads[index]
        if not self.ownership.loaded(index, epoch):
            return
        self._offsets.update(offsets)
        restored = self.coordinator.restore_groups(groups) if self.coordinator else 0
        log.info("loaded %s-%d: %d group(s) with offsets, %d group(s) restored",
                 OFFSETS_TOPIC, index, len(offsets), restored)

    def _read_partition(self, index):
        """In a storage thread: the partition's offsets and groups, to its log end."""
        with self.broker.db.leased_log(OFFSETS_TOPIC, index) as log_:
            return read_offsets_partition(log_.read(log_.start_offset,
                                                    isolation=Isolation.LOG_END))

    def _unload(self, index):
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()

        def belongs(group_id):
            return self.partition_for(group_id) == index
        if self.coordinator is not None:
            self.coordinator.unload_groups(belongs)
        gone = [g for g in self._offsets if belongs(g)]
        for g in gone:
            del self._offsets[g]
        log.info("unloaded %s-%d (%d group(s) with offsets)", OFFSETS_TOPIC, index, len(gone))

    # -- Writes ------------------------------------------------------------------------------

    async def _append(self, group_id, records, acks=-1):
        """Append ``records`` to the group's offsets partition as its leader; the error
        code of the append (not yet mapped)."""
        index = self.partition_for(group_id)
        if self.ownership.error_for(index):
            return E.NOT_LEADER_OR_FOLLOWER
        try:
            partition = await self.node.replicas.get(OFFSETS_TOPIC, index)
        except PartitionError as exc:
            return exc.error_code
        result = await partition.append(build_batch(records), acks=acks,
                                        timeout_ms=self.commit_timeout_ms)
        return result.error_code

    async def store_group(self, group_id, value):
        data = None if value is None else encode_group_value(value)
        code = await self._append(group_id, [Record(key=encode_group_key(group_id), value=data,
                                                    timestamp=now_ms())])
        return GROUP_STORE_ERRORS.get(code, code)

    async def commit(self, group_id, offsets, timestamp):
        records = [Record(key=encode_key(group_id, t, p),
                          value=encode_value(o.offset, o.metadata or "", o.commit_timestamp,
                                             o.leader_epoch), timestamp=timestamp)
                   for (t, p), o in sorted(offsets.items())]
        keys = [(group_id, t, p) for t, p in offsets]
        self._pending.update(keys)
        try:
            code = await self._append(group_id, records)
        finally:
            self._pending.subtract(keys)
            for k in keys:
                if self._pending[k] <= 0:
                    del self._pending[k]
        code = OFFSET_COMMIT_ERRORS.get(code, code)
        # Unloaded meanwhile: the next coordinator reads the commit from the log.
        if not code and not self.owner_error(group_id):
            self._offsets.setdefault(group_id, {}).update(offsets)
        return {tp: code for tp in offsets}

    async def delete_offsets(self, group_id, partitions=None):
        had = dict(self._offsets.get(group_id, {}))
        removed = sorted(had) if partitions is None else [tp for tp in partitions if tp in had]
        if not removed:
            return had, removed
        # As Kafka's cleanupGroupMetadata: out of the cache first; a failed append is
        # only logged.
        left = {tp: o for tp, o in had.items() if tp not in removed}
        if left:
            self._offsets[group_id] = left
        else:
            self._offsets.pop(group_id, None)
        code = await self._append(group_id, [Record(key=encode_key(group_id, t, p), value=None)
                                             for t, p in removed], acks=1)
        if code:
            log.warning("group %s: the tombstones of %d offset(s) were not written: %s",
                        group_id, len(removed), ErrorCode(code).name)
        return had, removed

    # -- Reads --------------------------------------------------------------------------------

    async def load_groups(self):
        return {}    # groups come with the leadership of their offsets partitions

    async def offsets(self, group_id, require_stable=False):
        committed = dict(self._offsets.get(group_id, {}))
        pending = {(t, p) for g, t, p in self._pending if g == group_id} \
            if require_stable else set()
        return committed, pending

    async def groups_with_offsets(self):
        return sorted(g for g, o in self._offsets.items() if o)
