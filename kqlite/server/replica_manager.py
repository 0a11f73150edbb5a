"""The replica manager: which partitions this broker serves, topic changes, fetches and
the delayed operations (Kafka's ReplicaManager role, plus its admin manager's topic
creation and deletion).

Theory of operation: request handlers ask :meth:`ReplicaManager.get` for a partition
(``PartitionError(UNKNOWN_TOPIC_OR_PARTITION)`` if there is none) and call it; they
never see a Log or the Database. What is not one partition's -- topic definitions and
configs, the broker's topic defaults, the log dir DescribeLogDirs reports -- they ask
of this object. Partition objects are made on first use and kept: they are small (they
hold no open files, see local_partition.py). Everything that reads topic definitions,
creates, alters or deletes topics, or reads a log runs in a storage thread.

Every method taking a topic name checks it against Kafka's rules first, on the event
loop, and answers ``PartitionError(INVALID_TOPIC_EXCEPTION)``: whatever API a name came
through, it never reaches the disk (the Database checks again below).

Metadata's auto-creation (:meth:`describe_topics`) creates at most
``auto_create_limit`` topics per request, one storage-thread call each, one after the
other, so that a request naming thousands of new topics neither takes every storage
thread nor holds the others' requests behind a long queue; the topics past the limit,
and those another request is creating at that moment, answer
UNKNOWN_TOPIC_OR_PARTITION as Kafka answers topics still being created (clients ask
again, and the next request creates the next ones).

A Produce's appends to partitions that gather them (the single broker's) run in one
storage-thread call for the whole request (:meth:`ReplicaManager.append_gathered`), each
partition's append judged, refused or failed on its own, as the handler would have had
them one call each; the Fetch side does the same for reads.

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
import os
import uuid
from typing import NamedTuple

from ..db.topic_names import InvalidTopicError
from ..errors import ConfigError, KqliteError, TopicExistsError, UnknownTopicError
from ..protocol import ErrorCode, FileRegion
from ..storage import Isolation
from ..storage.config import LogConfig, check_kafka_names
from .config_changes import alter_topic_in_storage
from .local_partition import LocalPartition
from .partition import CONSUMER_REPLICA_ID, PartitionError, ReadResult, RegionBudget
from .purgatory import DelayedFetch, Purgatory
from .topic_checks import check_new_partitions, check_topic

__all__ = ["ReplicaManager", "TopicInfo", "FetchPartition", "INTERNAL_TOPICS",
           "AUTO_CREATE_LIMIT"]

# Kafka's Topic.isInternal: clients may not delete them (the group coordinator's offsets
# and the transaction coordinator's state live there).
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")

AUTO_CREATE_LIMIT = 100   # topics one Metadata request may auto-create

log = logging.getLogger("kqlite.server")


class TopicInfo(NamedTuple):
    """A topic as Metadata reports it."""
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: list          # Partition objects, by index


class FetchPartition(NamedTuple):
    """One partition of a Fetch request (the last two from followers: the epoch of their
    last batch, v12+, and their log start, v5+)."""
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


class ReplicaManager:
    """The partitions of one broker over one Database (single node: all led here)."""

    def __init__(self, db, io, *, broker_id=0, default_partitions=1,
                 other_writers_check_ms=50, auto_create_limit=AUTO_CREATE_LIMIT):
        self.db = db
        self.io = io
        self.broker_id = broker_id
        self.default_partitions = default_partitions
        self.auto_create_limit = auto_create_limit
        self._creating = set()           # topics being auto-created by some request
        self._indexes = {}               # topic -> indexes of its partitions in _partitions
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
        """The partition ``topic-index``; raises PartitionError(UNKNOWN_TOPIC_OR_PARTITION
        or INVALID_TOPIC_EXCEPTION)."""
        partition = self._partitions.get((topic, index))
        if partition is not None:
            return partition
        check_topic(topic)
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
        check_topic(name)
        loaded = await self.io.run(self._load_topic, name, auto_create, self._known(name))
        return self._topic_info(name, loaded)

    def _topic_info(self, name, loaded):
        count, topic_id, epochs = loaded
        self._adopt(name, epochs)
        partitions = [self._partitions[(name, i)] for i in range(count)
                      if (name, i) in self._partitions]
        return TopicInfo(name, topic_id, name in INTERNAL_TOPICS, partitions)

    async def describe_topics(self, names, *, auto_create=False):
        """Metadata's lookup: ``{name: TopicInfo or PartitionError}`` for ``names``
        (distinct), in one storage-thread call, then -- with ``auto_create`` -- the
        creation of at most ``auto_create_limit`` of the unknown ones (see the module
        docstring)."""
        found = {}
        valid = []
        for name in names:
            try:
                check_topic(name)
                valid.append(name)
            except PartitionError as exc:
                found[name] = exc
        loaded = await self.io.run(self._load_topics, valid,
                                   {n: self._known(n) for n in valid})
        unknown = []
        for name, result in loaded.items():
            if isinstance(result, PartitionError):
                found[name] = result
                if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    unknown.append(name)
            else:
                found[name] = self._topic_info(name, result)
        if auto_create and unknown:
            found.update(await self._auto_create(unknown))
        return found

    def _load_topics(self, names, known):
        """_load_topic of each name, in one storage-thread call; a PartitionError (or any
        failure, as one) stands for a topic that cannot be described."""
        out = {}
        for name in names:
            try:
                out[name] = self._load_topic(name, False, known[name])
            except PartitionError as exc:
                out[name] = exc
            except KqliteError as exc:
                log.error("cannot read the definition of topic %s: %s", name, exc)
                out[name] = PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        return out

    async def _auto_create(self, names):
        """Create up to ``auto_create_limit`` of ``names`` (unknown topics), one per
        storage-thread call; ``{name: TopicInfo or PartitionError}`` for every name."""
        out = {}
        chosen = []
        for name in names:
            if name in self._creating or len(chosen) >= self.auto_create_limit:
                out[name] = PartitionError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {name!r} is not created yet; ask again")
            else:
                chosen.append(name)
        self._creating.update(chosen)
        try:
            for name in chosen:
                try:
                    loaded = await self.io.run(self._load_topic, name, True,
                                               self._known(name))
                except PartitionError as exc:
                    out[name] = exc
                except KqliteError as exc:
                    log.error("cannot auto-create topic %s: %s", name, exc)
                    out[name] = PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
                else:
                    out[name] = self._topic_info(name, loaded)
        finally:
            self._creating.difference_update(chosen)
        return out

    def _known(self, topic):
        return frozenset(self._indexes.get(topic, ()))

    def _load_topic(self, name, auto_create, known, index=None):
        """(partition count, topic id, {index: leader epoch} of the partitions not in
        ``known``), in a storage thread. With ``index``, only that partition is wanted."""
        db = self.db
        try:
            count = db.partitions_for(name)
        except InvalidTopicError as exc:
            raise PartitionError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
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
                self._indexes.setdefault(topic, set()).add(index)

    def hosted(self, topic, index):
        """The partition if this broker serves it and has met it already, else None (no
        lookup: a Produce's partitions that need none are appended without a wait)."""
        return self._partitions.get((topic, index))

    def _partition_changed(self, partition):
        """A partition's log start, high watermark or log end moved (or it is gone)."""
        self.delayed_produce.check_and_complete(partition.key)
        self.delayed_fetch.check_and_complete(partition.key)

    def _forget(self, topic):
        for index in self._indexes.pop(topic, ()):
            partition = self._partitions.pop((topic, index))
            partition.is_deleted = True
            self._partition_changed(partition)

    # -- Topics -----------------------------------------------------------------------------

    async def topic_names(self):
        """Every topic, internal ones included."""
        return await self.io.run(self.db.list_topics, internal=True)

    async def create_topic(self, name, partitions, configs, *, validate_only=False):
        """Create ``name``; returns its topic id (None when only validating). Raises
        PartitionError(INVALID_TOPIC_EXCEPTION) or KqliteError (TopicExistsError,
        ConfigError, ...). ``configs`` come from a Kafka client: only Kafka's topic configs
        (kqlite's own settings are for the embedded API)."""
        check_topic(name)
        check_kafka_names(configs)
        return await self.io.run(self._create_topic, name, partitions, configs, validate_only)

    def _create_topic(self, name, partitions, configs, validate_only):
        if validate_only:
            LogConfig(configs)
            try:
                self.db.topic_metadata(name, refresh=True)
            except UnknownTopicError:
                return None
            raise TopicExistsError(f"topic {name!r} already exists")
        self.db.create_topic(name, partitions, configs)
        return _topic_uuid(self.db, name)

    async def delete_topic(self, name):
        """Delete ``name`` and its data; its partitions answer UNKNOWN_TOPIC_OR_PARTITION
        from now on and their waiting operations complete. Raises
        PartitionError(INVALID_TOPIC_EXCEPTION, or TOPIC_DELETION_DISABLED for an
        internal topic) or KqliteError."""
        check_topic(name)
        if name in INTERNAL_TOPICS:
            # Deleting __consumer_offsets would drop every group's committed offsets.
            raise PartitionError(ErrorCode.TOPIC_DELETION_DISABLED,
                                 f"{name} is an internal topic; clients cannot delete it")
        try:
            await self.io.run(self.db.delete_topic, name)
        finally:
            self._forget(name)

    async def create_partitions(self, name, total, *, assignments=None, validate_only=False):
        """Grow ``name`` to ``total`` partitions (only check that it could, with
        ``validate_only``); ``assignments``: the replicas of each new partition, if the
        client chose them. Raises PartitionError (INVALID_TOPIC_EXCEPTION,
        INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT) or KqliteError
        (UnknownTopicError)."""
        check_topic(name)
        await self.io.run(self._create_partitions, name, total, assignments, validate_only)

    def _create_partitions(self, name, total, assignments, validate_only):
        current = self.db.partitions_for(name, refresh=True)
        check_new_partitions(self.broker_id, current, total, assignments)
        if not validate_only:
            self.db.create_partitions(name, total)

    async def topic_names_by_id(self, topic_ids):
        """``{topic id: name}`` of the ``topic_ids`` (UUIDs) that name a topic here."""
        wanted = set(topic_ids)
        return await self.io.run(self._topic_names_by_id, wanted) if wanted else {}

    def _topic_names_by_id(self, wanted):
        found = {}
        for name in self.db.list_topics(internal=True):
            try:
                topic_id = _topic_uuid(self.db, name)
            except UnknownTopicError:
                continue          # deleted meanwhile
            if topic_id in wanted:
                found[topic_id] = name
        return found

    async def topic_config(self, name):
        """(per-topic overrides, effective config dict) of ``name``. Raises
        PartitionError(INVALID_TOPIC_EXCEPTION) or UnknownTopicError."""
        check_topic(name)
        return await self.io.run(self._topic_config, name)

    def _topic_config(self, name):
        overrides = self.db.topic_metadata(name)["config"]
        return overrides, self.db.topic_config(name).as_dict()

    @property
    def topic_defaults(self):
        """The broker's own defaults of topic configs (name -> value): what
        DescribeConfigs reports as STATIC_BROKER_CONFIG."""
        return self.db.defaults

    async def alter_topic_config(self, name, edit, validate_only):
        """Apply ``edit`` (current overrides -> new ones, config_changes.py) to topic
        ``name``, durably, unless ``validate_only``; ``(error code, message)``."""
        return await self.io.run(alter_topic_in_storage, self.db, name, edit, validate_only)

    # -- The log dir (DescribeLogDirs) -------------------------------------------------------

    @property
    def log_dir(self):
        """The broker's one log dir: the data dir's path."""
        return self.db.path

    async def log_dir_topics(self):
        """Every topic defined in the data dir, internal ones included."""
        return await self.io.run(self.db.list_topics, internal=True)

    async def partition_sizes(self, topic, indexes=None):
        """``[(index, bytes on disk)]`` of ``topic``'s partitions in the data dir (those in
        ``indexes``, or all), in one storage-thread call."""
        return await self.io.run(_partition_sizes, self.db, topic, indexes)

    async def log_dir_bytes(self):
        """``(total, usable)`` bytes of the file system holding the log dir."""
        return await self.io.run(_volume_bytes, self.db.path)

    # -- Fetch ------------------------------------------------------------------------------

    async def fetch_messages(self, fetches, *, max_bytes, min_bytes, max_wait_ms,
                             replica_id=CONSUMER_REPLICA_ID,
                             isolation=Isolation.HIGH_WATERMARK, zero_copy=True):
        """Read ``fetches`` (FetchPartition, in request order, each partition once) under
        ``isolation`` (the request's: ``storage.isolation.isolation_of(replica_id,
        isolation_level)``); wait up to ``max_wait_ms`` for ``min_bytes``, a waiting fetch
        woken when the isolation's limit moves. Returns one ReadResult per fetch, in
        order; the caller owns their regions (send or release them). ``zero_copy=False``
        reads bytes only (a caller that rewrites the records)."""
        if not fetches:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000.0
        while True:
            partitions, results = await self._read_all(fetches, max_bytes, isolation,
                                                       replica_id, zero_copy)
            total = sum(r.size for r in results)
            left = deadline - loop.time()
            # As Kafka: partitions it does not know neither end the wait nor wait; an
            # error or a diverging epoch ends it (the follower must truncate first).
            read = [(p, r) for p, r in zip(partitions, results) if p is not None]
            if total >= min_bytes or left <= 0 or self._stopping or not read or \
                    any(r.error_code or r.diverging_epoch is not None for _, r in read):
                return results
            seen = [(p, isolation, r.position(isolation)) for p, r in read]
            # A waiting fetch holds no descriptor: it reads again when woken.
            for r in results:
                r.release()
            op = DelayedFetch(seen, left * 1000.0)
            self._fetch_waiting.set()
            if not await self.delayed_fetch.wait(op, [p.key for p, _, _ in seen]):
                deadline = loop.time()    # expired: read once more and answer

    async def _read_all(self, fetches, max_bytes, isolation, replica_id, zero_copy=True):
        # Partitions not met yet are looked up in one storage-thread call for the whole
        # request, so that naming thousands of unknown ones costs one call.
        unmet = sorted({f.topic for f in fetches
                        if (f.topic, f.partition) not in self._partitions})
        described = await self.describe_topics(unmet) if unmet else {}
        found = [self._partitions.get((f.topic, f.partition)) for f in fetches]
        if replica_id >= 0:
            # Each partition hears where the follower is before any partition is read:
            # an acks=all produce waiting on the last partition of the request is not
            # held back by the storage reads of the ones before it.
            for f, partition in zip(fetches, found):
                if partition is not None:
                    partition.follower_fetch_arrived(
                        f.fetch_offset, replica_id, f.current_leader_epoch,
                        f.last_fetched_epoch, f.log_start_offset)
        if all(p is None or p.gathers_reads for p in found):
            return await self._read_gathered(fetches, found, described, max_bytes, isolation,
                                             zero_copy, replica_id)
        partitions, results, total = [], [], 0
        try:
            for f in fetches:
                partition = self._partitions.get((f.topic, f.partition))
                if partition is None:
                    found = described.get(f.topic)
                    code = found.error_code if isinstance(found, PartitionError) \
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    partitions.append(None)
                    results.append(ReadResult(code, records=b""))
                    continue
                # The first partition with data returns at least one batch, whatever
                # max_bytes says (as Kafka does); later ones only what still fits.
                room = max(max_bytes - total, 1) if total == 0 else max_bytes - total
                region = zero_copy and self.regions.take()
                try:
                    result = await partition.read(
                        f.fetch_offset, min(f.max_bytes, room), isolation=isolation,
                        replica_id=replica_id, current_leader_epoch=f.current_leader_epoch,
                        zero_copy=region, last_fetched_epoch=f.last_fetched_epoch,
                        follower_log_start_offset=f.log_start_offset)
                except BaseException:
                    if region:     # an abandoned read closes its own region
                        self.regions.give_back()
                    raise
                if isinstance(result.records, FileRegion):
                    result.budget = self.regions
                elif region:
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

    async def _read_gathered(self, fetches, found, described, max_bytes, isolation,
                             zero_copy, replica_id):
        """:meth:`_read_all` for partitions that let their reads be gathered: every read
        of the request in one storage-thread call (``_read_in_order``), the same rules
        as one call per partition (each partition's checks before, its positions and a
        leader's follower tracking after: ``before_gathered_read``,
        ``after_gathered_read``)."""
        partitions, results, reads = [], [], []
        for f, partition in zip(fetches, found):
            partitions.append(partition)
            if partition is None:
                found_topic = described.get(f.topic)
                code = found_topic.error_code if isinstance(found_topic, PartitionError) \
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(ReadResult(code, records=b""))
                continue
            code, before = partition.before_gathered_read(f, replica_id)
            if code:
                results.append(ReadResult(code))
                continue
            results.append(None)
            reads.append((len(results) - 1, partition, f, zero_copy and self.regions.take(),
                          before))
        if not reads:
            return partitions, results
        try:
            found_in_memory = _read_recent(reads, max_bytes, isolation, replica_id)
            read, over = found_in_memory if found_in_memory is not None else \
                await self.io.run(_read_in_order, reads, max_bytes, isolation,
                                  on_abandon=_release_all)
        except BaseException:
            for _, _, _, region, _ in reads:
                if region:      # an abandoned read closes its own regions
                    self.regions.give_back()
            raise
        for (at, partition, f, region, before), result, too_much in zip(reads, read, over):
            if isinstance(result.records, FileRegion):
                result.budget = self.regions
            elif region:
                self.regions.give_back()
            if too_much:
                result.release()
            partition.after_gathered_read(result, f, replica_id, before)
            results[at] = result
        return partitions, results

    # -- Produce ----------------------------------------------------------------------------

    async def append_gathered(self, appends):
        """A Produce's appends ``[(partition, records, verification guard)]``, to partitions
        that let their appends be gathered (``gathers_appends``), each named once, in
        one storage-thread call (``_append_in_order``), with the same rules as one call
        per partition (each append judged and refused on its own). Returns their
        AppendResults in order, the positions each saw observed; the acks are the
        caller's (``partition.await_acks``)."""
        appended = await self.io.run(_append_in_order, appends)
        results = []
        for (partition, _, _), (result, positions) in zip(appends, appended):
            partition.observe(positions)
            results.append(result)
        return results

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


def _read_in_order(reads, max_bytes, isolation):
    """In a storage thread: the reads of one Fetch in request order, ``[(index, partition,
    FetchPartition, zero copy, before)]``; returns their ReadResults and, for each,
    whether it is past ``max_bytes`` (the caller releases those)."""
    return _in_order(reads, max_bytes, lambda partition, f, room, zero_copy, min_one:
                     partition.read_in_storage(f.fetch_offset, room, isolation,
                                               f.last_fetched_epoch, zero_copy,
                                               min_one=min_one))


def _read_recent(reads, max_bytes, isolation, replica_id):
    """:func:`_read_in_order` on the loop, when every partition can answer its read
    without storage (``read_recent``: a cluster leader's followers fetching what it just
    appended); else None, and storage reads them all (the size rules span the request)."""
    return _in_order(reads, max_bytes, lambda partition, f, room, _zero_copy, min_one:
                     partition.read_recent(f, replica_id, isolation, room, min_one))


def _in_order(reads, max_bytes, read):
    """The reads of one Fetch in request order, each ``read(partition, FetchPartition,
    room, zero copy, min_one)``, with Kafka's size rules (readFromLocalLog): "Once we read
    from a non-empty partition, we stop ignoring request and partition level size
    limits" -- the first partition with data returns at least one batch, whatever
    max_bytes says; later ones only what still fits (a first batch that does not fit is
    not returned), and once nothing fits their reads look nothing up and only report
    positions and errors. ``(results, past max_bytes for each)``, or None as soon as a
    read answers None."""
    results, over, total = [], [], 0
    try:
        for _, partition, f, zero_copy, _ in reads:
            room = max(max_bytes - total, 1) if total == 0 else max_bytes - total
            result = read(partition, f, min(f.max_bytes, room), zero_copy, total == 0)
            if result is None:
                _release_all((results, over))
                return None
            results.append(result)
            too_much = bool(total) and result.size > max_bytes - total
            over.append(too_much)
            if not too_much:
                total += result.size
    except BaseException:
        _release_all((results, over))
        raise
    return results, over


def _append_in_order(appends):
    """In a storage thread: the appends of one Produce in request order, ``[(partition,
    records, verification guard)]``; ``[(AppendResult, positions or None)]``. A refusal
    or a storage failure of one partition is its AppendResult and the others go on (as
    separate calls would); each log flushes as its own policy says."""
    return [partition.append_in_storage(records, guard)
            for partition, records, guard in appends]


def _release_all(read):
    """Close the regions of a gathered read whose caller is gone (or that failed)."""
    for result in read[0]:
        result.release()


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


def _partition_sizes(db, topic, indexes):
    """[(index, size)] of ``topic``'s partitions (all, or ``indexes``), in a storage thread."""
    try:
        count = db.partitions_for(topic)
    except UnknownTopicError:     # deleted since it was listed
        return []
    if indexes is not None:
        indexes = {i for i in indexes if 0 <= i < count}
    out = []
    for index in range(count):
        if indexes is not None and index not in indexes:
            continue
        try:
            with db.leased_log(topic, index) as lg:
                size = lg.size
        except UnknownTopicError:
            continue
        except KqliteError as exc:    # one unreadable partition does not hide the others
            log.warning("DescribeLogDirs: %s-%d cannot be read: %s", topic, index, exc)
            continue
        out.append((index, size))
    return out


def _volume_bytes(path):
    """(total, usable) bytes of the file system holding ``path``; usable is what an
    unprivileged writer may still use (Java's FileStore.getUsableSpace)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _topic_uuid(db, name):
    """The topic id as a UUID (stored in URL-safe base64, Kafka's text form)."""
    raw = db.topic_metadata(name).get("topic_id", "")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, TypeError):
        return uuid.UUID(int=0)
