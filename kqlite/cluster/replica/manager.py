"""The replica manager of a cluster broker (Kafka's ReplicaManager in ZooKeeper mode):
which partitions this broker hosts, as leader or follower, as the controller says.

Theory of operation. Partitions are not found on disk: a partition exists here once the
controller's LeaderAndIsr names this broker among its replicas. Handling one:

1. any request, once the broker is stopping, is refused whole with
   BROKER_NOT_AVAILABLE (so is a LeaderAndIsr the stop began under, once its reads of
   step 3 are done: the stop waits for it before closing the fetchers and partitions),
   one from an older controller (controller epoch below the highest seen) with
   STALE_CONTROLLER_EPOCH, one addressed to an older incarnation of this broker (broker
   epoch below ours, -1 meaning "no check") with STALE_BROKER_EPOCH;
2. per partition, a leader epoch not above the one held is refused with
   STALE_CONTROLLER_EPOCH (as Kafka 3.9 in ZooKeeper mode), and a partition whose
   replicas do not include this broker with UNKNOWN_TOPIC_OR_PARTITION;
3. the topic is created in the local data dir when missing, with the topic id and
   partition count of its ZooKeeper assignment and the configs of ``/config/topics``
   (ZooKeeper is read in a thread, the data dir in a storage thread); a local topic
   with another id refuses its partitions with INCONSISTENT_TOPIC_ID, as Kafka does,
   and a topic that cannot be made (its assignment gone, a storage failure) with
   KAFKA_STORAGE_ERROR;
4. each partition becomes leader or follower (partition.py), then the
   fetchers follow: leaders' partitions leave them, followers are added to their
   leader's fetcher (fetcher/manager.py).

StopReplica is refused whole as LeaderAndIsr is (step 1), and per partition when its
leader epoch is below the one held (FENCED_LEADER_EPOCH; -1 and the deletion marker skip
the check); otherwise it stops the partition (and with ``delete`` drops it, and the local
topic once no partition of it is left). UpdateMetadata, refused with STALE_BROKER_EPOCH or
STALE_CONTROLLER_EPOCH as above (and applied while stopping), fills the metadata cache,
from which Metadata is answered (``topics``, a
:class:`~kqlite.cluster.replica.topics.ClusterTopics`, which also makes the topic changes
through ZooKeeper). A partition the cache knows but this broker
does not host answers NOT_LEADER_OR_FOLLOWER, one it does not know
UNKNOWN_TOPIC_OR_PARTITION. A topic config change (the config watcher) reaches this
broker's replicas of the topic here.

Other brokers are reached on the inter-broker listener (``inter_broker``,
network/inter_broker.py): the fetchers connect to their leader's endpoint of it, with its
TLS and SASL, as does the channel to the controller.

Leaders check their ISR every ``replica.lag.time.max.ms / 2``. Their ISR changes go to
the controller: a local event when this broker is the active controller, else an
AlterPartition request on a channel to the controller the cache names (re-pointed when
the controller moves); the answer comes back as an IsrCommit or an error code. A newer
controller epoch, heard in any controller request, resends the changes an older
controller left waiting for metadata (ReplicatedPartition.controller_changed).
"""

import asyncio
import functools
import logging
import time

from ...errors import ConfigError, KqliteError, UnknownTopicError
from ...protocol import ApiKey, ErrorCode
from ...server.partition import PartitionError, ReadResult
from ...server.replica_manager import AUTO_CREATE_LIMIT, ReplicaManager
from ...server.topic_checks import check_topic
from ..fetcher.manager import ReplicaFetcherManager
from ..network.broker_client import BrokerConnectError
from ..network.channels import ChannelManager
from ..network.inter_broker import InterBrokerListener
from ..rules.leader_state import DEFAULT_LAG_TIME_MS, IsrCommit
from ..rules.partition_state import LEADER_DURING_DELETE
from ..zookeeper.config_watcher import apply_topic_config
from ..zookeeper.znodes import uuid_to_text
from .metadata_cache import BrokerEndpoint
from .partition import ReplicatedPartition
from .recent_batches import MemoryBudget
from .topics import ClusterTopics

__all__ = ["ClusterReplicaManager"]

log = logging.getLogger("kqlite.cluster")

_NO_EPOCH = -1               # WIRE: LeaderAndIsr.NoEpoch, StopReplica's "no epoch check"
_CONTROLLER_ANSWER_TIMEOUT = 30.0


class ClusterReplicaManager(ReplicaManager):
    """Partitions hosted by one cluster broker. ``cache``: the MetadataCache;
    ``store``: the ZkStore; ``zk(fn, *args)``: a coroutine running a blocking ZooKeeper
    call in a thread; ``zk_request``: the same for a client's request, failing at once
    while ZooKeeper is unreachable (default: ``zk``); ``controller``: this broker's
    Controller (set once made), through which its broker epoch is known. Sizes and times
    are Kafka's settings. ``topics``: the ClusterTopics answering the server's topic
    questions and making the topic changes. ``inter_broker``: the InterBrokerListener
    other brokers are reached on (PLAINTEXT by default)."""

    def __init__(self, db, io, *, broker_id, cache, store, zk, zk_request=None,
                 inter_broker=None, default_partitions=1,
                 default_replication_factor=1, lag_time_ms=DEFAULT_LAG_TIME_MS,
                 fetcher_options=None, auto_create_limit=AUTO_CREATE_LIMIT):
        # Nobody else writes a cluster broker's data dir: the re-read of log ends for
        # waiting fetches is only a safety net here.
        super().__init__(db, io, broker_id=broker_id, default_partitions=default_partitions,
                         other_writers_check_ms=1000, auto_create_limit=auto_create_limit)
        self.cache = cache
        self.store = store
        self._zk = zk
        self._zk_request = zk if zk_request is None else zk_request
        self.controller = None
        # The broker's producer id allocator (ZooKeeper's blocks), set with the store: a
        # mirror append reserves the ids it copies there.
        self.producer_ids = None
        # What the partitions this broker leads may keep of their last appends together.
        self._recent_budget = MemoryBudget()
        self.topics = ClusterTopics(
            db, broker_id=broker_id, cache=cache,
            zk_request=zk if zk_request is None else zk_request,
            store=lambda: self.store, controller=lambda: self.controller,
            default_partitions=default_partitions,
            default_replication_factor=default_replication_factor,
            auto_create_limit=auto_create_limit)
        self.lag_time_ms = lag_time_ms
        self.controller_epoch = -1        # the highest seen in LeaderAndIsr / StopReplica
        self._min_isr = {}                # topic -> min.insync.replicas
        self._leader_endpoints = {}       # broker id -> (host, port), from LeaderAndIsr
        self._roles = asyncio.Lock()      # one LeaderAndIsr / StopReplica at a time
        self._metadata_updated = asyncio.Event()
        self.inter_broker = inter_broker or InterBrokerListener.plaintext()
        self._to_controller = ChannelManager(client_id=f"kqlite-broker-{broker_id}-to-controller",
                                             negotiate=True,
                                             connector=self.inter_broker.connect)
        self._controller_channel = -1
        self.fetchers = ReplicaFetcherManager(broker_id, broker_epoch=-1,
                                              connect=self._connect_to_leader,
                                              **(fetcher_options or {}))
        self._isr_task = None
        self._closing = set()             # closes of dropped partitions under way
        # on_roles_changed(leaders, others): called after LeaderAndIsr and StopReplica with
        # the partitions that lead here and those that follow or stopped (the coordinators
        # load and unload their state partitions from it: coordinators/roles.py).
        self.on_roles_changed = None

    @property
    def broker_epoch(self):
        return self.controller.broker_epoch if self.controller is not None else -1

    def start(self):
        super().start()
        self._isr_task = asyncio.get_running_loop().create_task(self._check_isrs(),
                                                                name="kqlite-isr-expiration")

    async def stop(self):
        await super().stop()
        if self._isr_task is not None:
            self._isr_task.cancel()
            await asyncio.gather(self._isr_task, return_exceptions=True)
        # A LeaderAndIsr or StopReplica under way ends first: it refuses itself once it
        # sees the broker stopping (leader_and_isr), or finishes a change the closes below
        # then take down, never one half made on closed fetchers.
        async with self._roles:
            await self.fetchers.close()
            await asyncio.gather(*(p.close() for p in self._partitions.values()),
                                 *self._closing, return_exceptions=True)
        await self._to_controller.close()

    def _clock_ms(self):
        return time.monotonic() * 1000.0

    # -- Topics (answered by ``topics``) ----------------------------------------------------

    async def topic_names(self):
        return await self.topics.topic_names()

    async def topic_names_by_id(self, topic_ids):
        return await self.topics.topic_names_by_id(topic_ids)

    async def topic(self, name, *, auto_create=False):
        return await self.topics.topic(name, auto_create=auto_create)

    async def describe_topics(self, names, *, auto_create=False):
        return await self.topics.describe_topics(names, auto_create=auto_create)

    async def topic_config(self, name):
        return await self.topics.topic_config(name)

    async def topic_config_changed(self, topic):
        """``/config/topics/<topic>`` changed (zookeeper/config_watcher.py): this broker's
        replicas of the topic take the new config, and its controller, if active, hears of
        it."""
        config = await self._zk(self.store.topic_config, topic)
        min_isr = await self.io.run(apply_topic_config, self.db, topic, config)
        if min_isr is not None:
            self._min_isr[topic] = min_isr
        if self.controller is not None:
            self.controller.post("topic_config_change", topic)

    # -- Partitions -------------------------------------------------------------------------

    def hosted_replicas(self):
        """The replicated partitions this broker hosts now (the high-watermark
        checkpoint's list)."""
        return [p for p in self._partitions.values() if isinstance(p, ReplicatedPartition)]

    def hosted(self, topic, index):
        """The partition if this broker hosts it, else None (any thread: a dict read)."""
        return self._partitions.get((topic, index))

    async def get(self, topic, index):
        partition = self._partitions.get((topic, index))
        if partition is not None:
            return partition
        check_topic(topic)
        raise PartitionError(self._absent_code(topic, index),
                             f"broker {self.broker_id} does not host {topic}-{index}")

    def _absent_code(self, topic, index):
        if self.cache.partition(topic, index) is not None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    async def _read_all(self, fetches, max_bytes, isolation, replica_id, zero_copy=True):
        """Hosted partitions are read as the single broker reads them; the others answer
        at once with what the cache says of them."""
        hosted = [f for f in fetches if (f.topic, f.partition) in self._partitions]
        if len(hosted) == len(fetches):
            return await super()._read_all(fetches, max_bytes, isolation, replica_id,
                                           zero_copy)
        partitions, results = (await super()._read_all(hosted, max_bytes, isolation,
                                                       replica_id, zero_copy)
                               if hosted else ([], []))
        read = iter(zip(partitions, results))
        out_partitions, out_results = [], []
        for f in fetches:
            if (f.topic, f.partition) in self._partitions:
                p, r = next(read)
            else:
                p, r = None, ReadResult(self._absent_code(f.topic, f.partition), records=b"")
            out_partitions.append(p)
            out_results.append(r)
        return out_partitions, out_results

    def _make_partition(self, topic, index, topic_id):
        return ReplicatedPartition(
            self.db, self.io, topic, index, broker_id=self.broker_id,
            delayed_produce=self.delayed_produce, on_change=self._partition_changed,
            clock=self._clock_ms,
            alter_partition=functools.partial(self._alter_partition, topic, index),
            min_insync_replicas=lambda: self._min_isr.get(topic, 1),
            is_eligible=self.cache.is_alive, lag_time_ms=self.lag_time_ms, topic_id=topic_id,
            controller_epoch=lambda: self.controller_epoch,
            producer_ids=lambda: self.producer_ids, recent_budget=self._recent_budget)

    # -- LeaderAndIsr -------------------------------------------------------------------------

    def _stale(self, body):
        """The top-level refusal of a controller request, or NONE."""
        if self._stopping:      # fetchers and partitions are closing: nothing can move
            return ErrorCode.BROKER_NOT_AVAILABLE
        if body["controller_epoch"] < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        epoch = body.get("broker_epoch", _NO_EPOCH)
        if epoch != _NO_EPOCH and epoch < self.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        return ErrorCode.NONE

    async def leader_and_isr(self, body):
        """Apply a LeaderAndIsr body (v2+ layout: ``topic_states``); returns
        ``(top-level error, [(topic, topic_id, index, error code)])``."""
        states = [(t["topic_name"], t.get("topic_id"), p)
                  for t in body["topic_states"] for p in t["partition_states"]]
        async with self._roles:
            code = self._stale(body)
            if code:
                return code, [(t, tid, p["partition_index"], code) for t, tid, p in states]
            self._heard_controller_epoch(body["controller_epoch"])
            self.fetchers.broker_epoch = self.broker_epoch
            for leader in body.get("live_leaders") or ():
                self._leader_endpoints[leader["broker_id"]] = (leader["host_name"],
                                                               leader["port"])
            errors = {}
            wanted = []
            for topic, topic_id, p in states:
                key = (topic, p["partition_index"])
                held = self._partitions.get(key)
                if self.broker_id not in p["replicas"]:
                    errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif held is not None and p["leader_epoch"] <= held.leader_epoch:
                    errors[key] = ErrorCode.STALE_CONTROLLER_EPOCH
                else:
                    wanted.append((topic, topic_id, p))
            for topic, topic_id in {t: tid for t, tid, _ in wanted}.items():
                try:
                    code = await self._ensure_local_topic(topic, topic_id)
                except (KqliteError, OSError) as exc:
                    log.error("cannot create topic %s locally: %s", topic, exc)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                if code:
                    for t, _, p in wanted:
                        if t == topic:
                            errors[(t, p["partition_index"])] = code
            wanted = [w for w in wanted if (w[0], w[2]["partition_index"]) not in errors]
            if self._stopping:
                # The broker began to stop while ZooKeeper and the data dir were read: it
                # refuses as it refuses a request arriving now (step 1), not with a change
                # its closing fetchers and partitions would leave half made.
                log.info("broker %d: LeaderAndIsr refused: the broker is stopping",
                         self.broker_id)
                code = ErrorCode.BROKER_NOT_AVAILABLE
                return code, [(t, tid, p["partition_index"], code) for t, tid, p in states]
            await self._change_roles(wanted, errors)
        return ErrorCode.NONE, [(t, tid, p["partition_index"],
                                 errors.get((t, p["partition_index"]), ErrorCode.NONE))
                                for t, tid, p in states]

    async def _ensure_local_topic(self, topic, topic_id=None):
        """The topic in the local data dir, with the topic id, partition count and configs
        that ZooKeeper holds; remembers its min.insync.replicas. Returns
        INCONSISTENT_TOPIC_ID when the local topic has another id than ``topic_id`` (the
        request's, else ZooKeeper's), as Kafka refuses such a LeaderAndIsr."""
        assignment = await self._zk(self.store.topic_assignment, topic)
        configs = await self._zk(self.store.topic_config, topic)
        if topic_id is None or topic_id.int == 0:
            topic_id = assignment.topic_id
        wanted = uuid_to_text(topic_id) if topic_id is not None else None
        min_isr, local_id = await self.io.run(self._create_locally, topic,
                                              len(assignment.partitions), configs, wanted)
        if wanted is not None and local_id != wanted:
            log.error("topic %s: the local data dir holds topic id %s, ZooKeeper %s; its "
                      "partitions are refused (INCONSISTENT_TOPIC_ID) until the stale local "
                      "topic is deleted", topic, local_id, wanted)
            return ErrorCode.INCONSISTENT_TOPIC_ID
        self._min_isr[topic] = min_isr
        return ErrorCode.NONE

    def _create_locally(self, topic, count, configs, topic_id=None):
        db = self.db
        try:
            current = db.partitions_for(topic, refresh=True)
        except UnknownTopicError:
            try:
                db.create_topic(topic, count, configs, exist_ok=True, topic_id=topic_id)
            except ConfigError as exc:
                log.warning("topic %s: configs %s not usable here (%s); created with the "
                            "broker's defaults", topic, configs, exc)
                db.create_topic(topic, count, exist_ok=True, topic_id=topic_id)
        else:
            if current < count:
                db.create_partitions(topic, count)
            # Configs changed while this broker was away are caught up here.
            apply_topic_config(db, topic, configs)
        return (int(db.topic_config(topic)["min.insync.replicas"]),
                db.topic_metadata(topic)["topic_id"])

    async def _change_roles(self, wanted, errors):
        leaders, followers = [], {}
        for topic, topic_id, p in wanted:
            key = (topic, p["partition_index"])
            partition = self._partitions.get(key)
            if partition is None:
                partition = self._make_partition(topic, key[1], topic_id)
                self._partitions[key] = partition
                self._indexes.setdefault(topic, set()).add(key[1])
            elif topic_id is not None:
                partition.topic_id = topic_id
            args = (p["leader_epoch"], p["isr"], p["replicas"], p["partition_epoch"])
            if p["leader"] == self.broker_id:
                # Out of the fetchers before leading: no fetch may append meanwhile.
                await self.fetchers.remove_partitions([key])
                code = await partition.become_leader(*args, topic_id=topic_id)
                if code:
                    errors[key] = code
                else:
                    leaders.append(key)
            else:
                await partition.become_follower(p["leader"], *args)
                followers.setdefault(p["leader"], []).append(partition)
        if self.on_roles_changed is not None:     # the coordinators' loads and unloads
            self.on_roles_changed([self._partitions[k] for k in leaders],
                                  [p for ps in followers.values() for p in ps])
        no_leader = [(p.topic, p.index) for p in followers.pop(-1, [])]
        if no_leader:
            await self.fetchers.remove_partitions(no_leader)
        if followers:
            await self.fetchers.add_partitions(followers)
        if leaders or followers:
            log.info("broker %d leads %s, follows %s", self.broker_id, leaders,
                     {b: [(p.topic, p.index) for p in ps] for b, ps in followers.items()})

    async def _connect_to_leader(self, leader_id):
        endpoint = self.cache.endpoint(leader_id, self.inter_broker.name) or \
            self._leader_endpoints.get(leader_id)
        if endpoint is None:
            raise BrokerConnectError(f"broker {leader_id} has no known address on listener "
                                     f"{self.inter_broker.name}", f"broker {leader_id}")
        return await self.inter_broker.connect(
            *endpoint, broker_id=leader_id, client_id=f"kqlite-replica-fetcher-{self.broker_id}")

    # -- StopReplica ---------------------------------------------------------------------------

    async def stop_replicas(self, body):
        """Apply a StopReplica body (v3+ layout: ``topic_states``); returns
        ``(top-level error, [(topic, index, error code)])``."""
        items = [(t["topic_name"], p["partition_index"], p.get("leader_epoch", _NO_EPOCH),
                  p["delete_partition"])
                 for t in body["topic_states"] for p in t["partition_states"]]
        async with self._roles:
            code = self._stale(body)
            if code:
                return code, [(t, i, code) for t, i, _, _ in items]
            self._heard_controller_epoch(body["controller_epoch"])
            answers = []
            emptied = set()
            for topic, index, epoch, delete in items:
                partition = self._partitions.get((topic, index))
                if partition is not None and epoch not in (LEADER_DURING_DELETE, _NO_EPOCH) \
                        and epoch < partition.leader_epoch:
                    answers.append((topic, index, ErrorCode.FENCED_LEADER_EPOCH))
                    continue
                await self.fetchers.remove_partitions([(topic, index)])
                if partition is not None:
                    await partition.stop_replica()
                    if self.on_roles_changed is not None:
                        self.on_roles_changed([], [partition])
                if delete:
                    self._drop(topic, index)
                    if not self._indexes.get(topic):
                        emptied.add(topic)
                answers.append((topic, index, ErrorCode.NONE))
            for topic in sorted(emptied):
                try:
                    await self.io.run(self.db.delete_topic, topic)
                except UnknownTopicError:
                    pass
                except (KqliteError, OSError) as exc:
                    log.error("cannot delete topic %s locally: %s", topic, exc)
        return ErrorCode.NONE, answers

    def _drop(self, topic, index):
        partition = self._partitions.pop((topic, index), None)
        indexes = self._indexes.get(topic)
        if indexes is not None:
            indexes.discard(index)
            if not indexes:
                del self._indexes[topic]
        if partition is not None:
            partition.is_deleted = True
            self._partition_changed(partition)
            task = asyncio.get_running_loop().create_task(partition.close())
            self._closing.add(task)       # the loop keeps only a weak reference
            task.add_done_callback(self._closing.discard)

    # -- UpdateMetadata -----------------------------------------------------------------------

    def update_metadata(self, body):
        """Apply an UpdateMetadata body (v5+ layout); returns the top-level error code."""
        epoch = body.get("broker_epoch", _NO_EPOCH)
        if epoch != _NO_EPOCH and epoch < self.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        if body["controller_epoch"] < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        code = self.cache.update(body)
        if code == ErrorCode.NONE:
            # As Kafka's ReplicaManager: a new controller heard through UpdateMetadata alone
            # fences its predecessor's LeaderAndIsr and StopReplica too.
            self._heard_controller_epoch(body["controller_epoch"])
            self._point_controller_channel()
            self._metadata_changed()
        return code

    async def live_brokers(self, listener_name, me):
        """``(live BrokerEndpoints sorted by id, controller id)`` for Metadata and
        DescribeCluster on ``listener_name``: the brokers that have that listener, at its
        address; ``me`` is this broker's own endpoint on it.

        The cache answers once a controller has spoken. Before its first UpdateMetadata
        reaches this broker (milliseconds after a start, seconds on a loaded machine) the
        cache knows nobody, and an answer naming no broker and no controller is taken by
        librdkafka as a partial answer that it does not ask again for: an admin request
        waiting for the controller then times out though the cluster formed long before.
        Meanwhile the registrations under ``/brokers/ids`` and ``/controller`` are read
        from ZooKeeper, where the controller itself reads them. This broker is in every
        answer it gives (it listens before it registers), and a controller that is not
        among the registered brokers is not named (a client could not reach it)."""
        if self.cache.heard_from_controller:
            return self.cache.alive_brokers(listener_name), self.cache.controller_id
        try:
            registered = await self._zk_request(self.store.brokers)
            controller_id = await self._zk_request(self.store.controller_id)
        except KqliteError as exc:
            log.debug("broker %d: live brokers not read from ZooKeeper: %s", self.broker_id,
                      exc)
            registered, controller_id = {}, -1
        live = {b: BrokerEndpoint(b, e.host, e.port, info.rack)
                for b, info in registered.items()
                if (e := info.endpoint(listener_name)) is not None}
        live[me.broker_id] = me
        return sorted(live.values()), controller_id if controller_id in live else -1

    async def wait_for_metadata(self, predicate, timeout_ms):
        """Wait until ``predicate()`` holds after some UpdateMetadata, or ``timeout_ms``
        passes; returns whether it holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000.0
        while not predicate():
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(asyncio.shield(self._metadata_updated.wait()), left)
            except asyncio.TimeoutError:
                return predicate()
        return True

    def _metadata_changed(self):
        event, self._metadata_updated = self._metadata_updated, asyncio.Event()
        event.set()

    def _heard_controller_epoch(self, epoch):
        """A request from the controller of ``epoch`` (not older than any seen) was
        accepted; a newer one gets the ISR changes its predecessors left pending."""
        newer = epoch > self.controller_epoch
        self.controller_epoch = epoch
        if newer:
            for partition in self.hosted_replicas():
                partition.controller_changed()

    def _point_controller_channel(self):
        controller_id = self.cache.controller_id
        endpoint = self.cache.endpoint(controller_id, self.inter_broker.name)
        if controller_id != self._controller_channel:
            if self._controller_channel >= 0:
                self._to_controller.remove_broker(self._controller_channel)
            self._controller_channel = -1
        if endpoint is not None and controller_id >= 0:
            self._to_controller.add_broker(controller_id, *endpoint)
            self._controller_channel = controller_id

    # -- Requests to the controller -------------------------------------------------------------

    def _local_controller(self):
        c = self.controller
        return c if c is not None and c.is_active and not c.stopped else None

    async def ask_controller(self, kind, *payload):
        """Post an event to this broker's own active controller and await its answer."""
        future = asyncio.get_running_loop().create_future()
        self.controller.post(kind, *payload, future)
        return await asyncio.wait_for(future, _CONTROLLER_ANSWER_TIMEOUT)

    async def send_to_controller(self, api_key, versions, body):
        """A request to the controller the cache names; its response body. Raises
        PartitionError(NOT_CONTROLLER) when no controller is known, and the channel's
        errors (BrokerClientError) when it cannot be reached."""
        if self._controller_channel < 0:
            raise PartitionError(ErrorCode.NOT_CONTROLLER, "no controller is known yet")
        return await self._to_controller.send(self._controller_channel, api_key, versions,
                                              body, timeout=_CONTROLLER_ANSWER_TIMEOUT,
                                              retry=False)

    async def _alter_partition(self, topic, index, proposal):
        """A leader's ISR change, to the controller; an IsrCommit or an error code."""
        # A leader's proposal always ends recovery (Kafka's Partition asks for RECOVERED).
        items = [(topic, index, proposal.leader_epoch, tuple(proposal.isr),
                  proposal.partition_epoch, False)]
        if self._local_controller() is not None:
            answer = await self.ask_controller("alter_partition", self.broker_id,
                                               self.broker_epoch, items)
            if isinstance(answer, dict):      # it stopped being the controller meanwhile
                return answer["error_code"]
            code, answers = answer
            if code:
                return code
            code, state = answers[0]
            if code:
                return code
            return IsrCommit(state.leader_epoch, tuple(state.isr), state.partition_epoch)
        topic_id = self._partitions[(topic, index)].topic_id \
            if (topic, index) in self._partitions else None
        versions = (2, 3) if topic_id is not None else (0, 1)
        try:
            response = await self.send_to_controller(
                ApiKey.ALTER_PARTITION, versions,
                lambda v: alter_partition_body(self.broker_id, self.broker_epoch, topic,
                                               topic_id, index, proposal, v))
        except PartitionError as exc:
            return exc.error_code
        if response["error_code"]:
            return response["error_code"]
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["partition_index"] == index:
                    if p["error_code"]:
                        return p["error_code"]
                    return IsrCommit(p["leader_epoch"], tuple(p["isr"]), p["partition_epoch"])
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # -- ISR expiration -------------------------------------------------------------------------

    async def _check_isrs(self):
        while True:
            await asyncio.sleep(self.lag_time_ms / 2000.0)
            for partition in list(self._partitions.values()):
                if partition.is_leader:
                    try:
                        await partition.check_isr()
                    except Exception:      # one partition's trouble must not stop the rest
                        log.exception("%s: ISR check failed", partition)


def alter_partition_body(broker_id, broker_epoch, topic, topic_id, index, proposal, version):
    """AlterPartition for one partition in ``version``'s layout (v3: the ISR with broker
    epochs, -1 from a ZooKeeper-mode leader)."""
    isr = list(proposal.isr)
    return {"broker_id": broker_id, "broker_epoch": broker_epoch, "topics": [{
        "topic_name": topic, "topic_id": topic_id, "partitions": [{
            "partition_index": index, "leader_epoch": proposal.leader_epoch,
            "new_isr": isr,
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in isr],
            "leader_recovery_state": 0, "partition_epoch": proposal.partition_epoch}]}]}
