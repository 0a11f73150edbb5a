"""The replica manager: which partitions this broker serves, topic changes, fetches and
the delayed operations (Kafka's ReplicaManager role, plus its admin manager's topic
creation and deletion).

Theory of operation: request handlers ask :meth:`ReplicaManager.get` for a partition
(``PartitionError(UNKNOWN_TOPIC_OR_PARTITION)`` if there is none) and call it; they
never see a Log or the Database. Partition objects are made on first use and kept:
they are small (they hold no open files, see local_partition.py). Everything that
reads topic definitions, creates or deletes topics runs in a storage thread.

A Fetch reads its partitions in request order under the response's ``max_bytes``. If
that gives fewer than ``min_bytes`` it becomes a :class:`~.purgatory.DelayedFetch`
watching exactly those partitions: an append or high-watermark change on one of them
(reported by the partition itself) wakes it and it reads again, until ``max_wait_ms``
passes. Appends made by other processes on the same data dir tell no one, so while
fetches wait, the log ends of the partitions they wait on -- and only those -- are
re-read every ``other_writers_check_ms`` in one storage-thread call.
"""

import asyncio
import base64
import logging
import uuid
from typing import NamedTuple

from ..errors import ConfigError, TopicExistsError, UnknownTopicError
from ..protocol import ErrorCode, FileRegion
from ..storage.config import LogConfig
from .local_partition import LocalPartition
from .partition import (CONSUMER_REPLICA_ID, PartitionError, ReadResult, RegionBudget,
                        fetch_isolation)
from .purgatory import DelayedFetch, Purgatory

__all__ = ["ReplicaManager", "TopicInfo", "FetchPartition", "INTERNAL_TOPICS"]

INTERNAL_TOPICS = ("__consumer_offsets",)

log = logging.getLogger("kqlite.server")


class TopicInfo(NamedTuple):
    """A topic as Metadata reports it."""
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: list          # Partition objects, by index


class FetchPartition(NamedTuple):
    """One partition of a Fetch request."""
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


class ReplicaManager:
    """The partitions of one broker over one Database (single node: all led here)."""

    def __init__(self, db, io, *, broker_id=0, default_partitions=1,
                 other_writers_check_ms=50):
        self.db = db
        self.io = io
        self.broker_id = broker_id
        self.default_partitions = default_partitions
        self.delayed_produce = Purgatory("produce")
        self.delayed_fetch = Purgatory("fetch")
        self.regions = RegionBudget()    # fetch regions open until their response is sent
        self._partitions = {}            # (topic, index) -> Partition
        self._check_interval = other_writers_check_ms / 1000.0
        self._fetch_waiting = asyncio.Event()   # set while some fetch waits
        self._checker = None
        self._stopping = False

    def start(self):
        self._checker = asyncio.get_running_loop().create_task(self._check_other_writers())

    async def stop(self):
        """Answer every waiting operation now; no new one will wait."""
        self._stopping = True
        self.delayed_fetch.expire_all()
        self.delayed_produce.expire_all()
        if self._checker is not None:
            self._checker.cancel()
            try:
                await self._checker
            except asyncio.CancelledError:
                pass

    # -- Partitions -------------------------------------------------------------------------

    async def get(self, topic, index):
        """The partition ``topic-index``; raises PartitionError(UNKNOWN_TOPIC_OR_PARTITION)."""
        partition = self._partitions.get((topic, index))
        if partition is not None:
            return partition
        _count, _topic_id, epochs = await self.io.run(
            self._load_topic, topic, False, self._known(topic), index)
        if index not in epochs and (topic, index) not in self._partitions:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic {topic!r} has no partition {index}")
        self._adopt(topic, epochs)
        return self._partitions[(topic, index)]

    async def topic(self, name, *, auto_create=False):
        """TopicInfo of ``name``, creating it (``default_partitions``) if ``auto_create``.
        Raises PartitionError(UNKNOWN_TOPIC_OR_PARTITION or INVALID_TOPIC_EXCEPTION)."""
        count, topic_id, epochs = await self.io.run(self._load_topic, name, auto_create,
                                                    self._known(name))
        self._adopt(name, epochs)
        partitions = [self._partitions[(name, i)] for i in range(count)
                      if (name, i) in self._partitions]
        return TopicInfo(name, topic_id, name in INTERNAL_TOPICS, partitions)

    def _known(self, topic):
        return frozenset(i for t, i in self._partitions if t == topic)

    def _load_topic(self, name, auto_create, known, index=None):
        """(partition count, topic id, {index: leader epoch} of the partitions not in
        ``known``), in a storage thread. With ``index``, only that partition is wanted."""
        db = self.db
        try:
            count = db.partitions_for(name)
        except UnknownTopicError:
            if not auto_create:
                raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"unknown topic {name!r}") from None
            try:
                db.create_topic(name, self.default_partitions, exist_ok=True)
            except ConfigError as exc:
                raise PartitionError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
            count = db.partitions_for(name)
        wanted = range(count) if index is None else [index] if 0 <= index < count else []
        epochs = {i: LocalPartition.initial_leader_epoch(db, name, i)
                  for i in wanted if i not in known}
        return count, _topic_uuid(db, name), epochs

    def _adopt(self, topic, epochs):
        """Make the partitions a storage thread learnt about (event loop); the first of two
        concurrent lookups wins."""
        for index, epoch in epochs.items():
            if (topic, index) not in self._partitions:
                self._partitions[(topic, index)] = LocalPartition(
                    self.db, self.io, topic, index, broker_id=self.broker_id,
                    leader_epoch=epoch, delayed_produce=self.delayed_produce,
                    on_change=self._partition_changed)

    def _partition_changed(self, partition):
        """A partition's log start, high watermark or log end moved (or it is gone)."""
        self.delayed_produce.check_and_complete(partition.key)
        self.delayed_fetch.check_and_complete(partition.key)

    def _forget(self, topic):
        for key in [k for k in self._partitions if k[0] == topic]:
            partition = self._partitions.pop(key)
            partition.is_deleted = True
            self._partition_changed(partition)

    # -- Topics -----------------------------------------------------------------------------

    async def topic_names(self):
        """Every topic, internal ones included."""
        return await self.io.run(self.db.list_topics, internal=True)

    async def create_topic(self, name, partitions, configs, *, validate_only=False):
        """Create ``name``; returns its topic id (None when only validating). Raises
        KqliteError (TopicExistsError, ConfigError, ...)."""
        return await self.io.run(self._create_topic, name, partitions, configs, validate_only)

    def _create_topic(self, name, partitions, configs, validate_only):
        if validate_only:
            LogConfig(configs)
            if name in self.db.list_topics(internal=True):
                raise TopicExistsError(f"topic {name!r} already exists")
            return None
        self.db.create_topic(name, partitions, configs)
        return _topic_uuid(self.db, name)

    async def delete_topic(self, name):
        """Delete ``name`` and its data; its partitions answer UNKNOWN_TOPIC_OR_PARTITION
        from now on and their waiting operations complete."""
        try:
            await self.io.run(self.db.delete_topic, name)
        finally:
            self._forget(name)

    async def create_partitions(self, name, total):
        """Grow ``name`` to ``total`` partitions."""
        await self.io.run(self.db.create_partitions, name, total)

    async def topic_config(self, name):
        """(per-topic overrides, effective config dict) of ``name``."""
        return await self.io.run(self._topic_config, name)

    def _topic_config(self, name):
        overrides = self.db.topic_metadata(name)["config"]
        return overrides, self.db.topic_config(name).as_dict()

    # -- Fetch ------------------------------------------------------------------------------

    async def fetch_messages(self, fetches, *, max_bytes, min_bytes, max_wait_ms,
                             replica_id=CONSUMER_REPLICA_ID):
        """Read ``fetches`` (FetchPartition, in request order); wait up to ``max_wait_ms``
        for ``min_bytes``. Returns one ReadResult per fetch, in order."""
        isolation = fetch_isolation(replica_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000.0
        while True:
            partitions, results = await self._read_all(fetches, max_bytes, isolation,
                                                       replica_id)
            total = sum(r.size for r in results)
            left = deadline - loop.time()
            if total >= min_bytes or left <= 0 or self._stopping or \
                    any(r.error_code for r in results):
                return results
            seen = [(p, isolation, r.position(isolation))
                    for p, r in zip(partitions, results) if p is not None]
            for r in results:
                r.release()
            op = DelayedFetch(seen, left * 1000.0)
            self._fetch_waiting.set()
            if not await self.delayed_fetch.wait(op, [p.key for p, _, _ in seen]):
                deadline = loop.time()    # expired: read once more and answer

    async def _read_all(self, fetches, max_bytes, isolation, replica_id):
        partitions, results, total = [], [], 0
        try:
            for f in fetches:
                try:
                    partition = await self.get(f.topic, f.partition)
                except PartitionError as exc:
                    partitions.append(None)
                    results.append(ReadResult(exc.error_code))
                    continue
                # The first partition with data returns at least one batch, whatever
                # max_bytes says (as Kafka does); later ones only what still fits.
                room = max(max_bytes - total, 1) if total == 0 else max_bytes - total
                zero_copy = self.regions.take()
                try:
                    result = await partition.read(
                        f.fetch_offset, min(f.max_bytes, room), isolation=isolation,
                        replica_id=replica_id, current_leader_epoch=f.current_leader_epoch,
                        zero_copy=zero_copy)
                except BaseException:
                    if zero_copy:     # an abandoned read closes its own region
                        self.regions.give_back()
                    raise
                if isinstance(result.records, FileRegion):
                    result.budget = self.regions
                elif zero_copy:
                    self.regions.give_back()
                if total and result.size > max_bytes - total:
                    result.release()
                total += result.size
                partitions.append(partition)
                results.append(result)
        except BaseException:
            for r in results:
                r.release()
            raise
        return partitions, results

    async def _check_other_writers(self):
        """While fetches wait, re-read the log ends of the partitions they wait on."""
        while True:
            keys = self.delayed_fetch.watched_keys()
            if not keys:
                self._fetch_waiting.clear()
                await self._fetch_waiting.wait()
                continue
            await asyncio.sleep(self._check_interval)
            watched = [self._partitions[k] for k in self.delayed_fetch.watched_keys()
                       if k in self._partitions]
            if not watched:
                continue
            found = await self.io.run(_positions_of, watched)
            for partition, positions in zip(watched, found):
                partition.observe(positions)


def _positions_of(partitions):
    """Storage positions of each partition (None where they cannot be read), in one
    storage-thread call."""
    found = []
    for partition in partitions:
        try:
            found.append(partition.positions_in_storage())
        except Exception as exc:  # a deleted topic or a damaged log: the fetch's read says
            log.debug("%s: cannot re-read the log end: %s", partition, exc)
            found.append(None)
    return found


def _topic_uuid(db, name):
    """The topic id as a UUID (stored in URL-safe base64, Kafka's text form)."""
    raw = db.topic_metadata(name).get("topic_id", "")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, TypeError):
        return uuid.UUID(int=0)
