"""One broker of a cluster (``kqlite serve --zookeeper``): the single broker of
kqlite/server with the cluster parts plugged into its seams.

Theory of operation. Start-up follows Kafka's KafkaServer in ZooKeeper mode:

1. a kazoo session (``zookeeper.session.timeout.ms``; the chroot of the connect string
   is created if missing, as Kafka creates it);
   A data dir written by the embedded API or a single broker (no replicated mark), or
   one with an adoption journal, is adopted then, before any log opens
   (adoption/steps.py); its committed offsets are carried into the cluster once the
   broker has joined (adoption/carry_offsets.py);
2. the broker, whose replica manager is a :class:`ClusterReplicaManager` (partitions
   made by LeaderAndIsr, Metadata from the metadata cache), whose extra request handlers
   are the inter-broker ones and whose ApiVersions advertises ``CLUSTER_SUPPORTED``;
   producer ids come in blocks from ``/latest_producer_id_block``;
3. once it listens, the Controller registers the broker (``/brokers/ids/N``, ephemeral;
   its creation zxid is the broker epoch) with every advertised listener, and runs for
   controller. From then on the active controller tells every broker what to lead and
   follow, and every broker's endpoints on every listener;
4. the config watcher follows ``/config/changes`` (zookeeper/config_watcher.py), so topic config
   changes made through any broker reach this one's replicas, client quota changes its
   quota managers (zookeeper/client_quotas.py), and SCRAM credential changes its SASL
   listeners (zookeeper/credentials.py: ``/config/users``, with the server secret unknown
   users' answers are derived from, shared by the cluster).

The broker's ACLs (when it has the ACL authorizer) and client quotas are ZooKeeper's:
``/kafka-acl`` with its change notifications (zookeeper/acls.py) and ``/config/users``,
``/config/clients``, read when the broker starts, which is after the ZooKeeper session is
up.

The coordinators are the server's, on this broker's state partitions
(coordinators/): the group coordinator over ``__consumer_offsets`` and the transaction
coordinator over ``__transaction_state``, each loaded and unloaded as LeaderAndIsr moves
their partitions' leadership; the transaction coordinator's markers go to partition
leaders as WriteTxnMarkers (coordinators/txn_markers.py), and a partition leader asks a
producer's coordinator, wherever it is, to verify its first batch
(coordinators/txn_verification.py), both over :attr:`ClusterNode.peers`.

Other brokers are reached on the inter-broker listener (``inter_broker``,
network/inter_broker.py), with its TLS and SASL: the controller's channels, the replica
fetchers, the channel to the controller, the coordinators' reads of partner partitions,
and the markers and verifications (``peers``, network/peers.py).
Clients are told each broker's endpoint of the listener they connected on.

Stopping (SIGTERM) is Kafka's controlled shutdown: the broker asks the controller to
move its leaderships away (ControlledShutdown, retried ``controlled.shutdown.max.retries``
times until no partition is left), then resigns any controllership, stops serving,
flushes, and closes its ZooKeeper session, which removes its registration.
"""

import asyncio
import concurrent.futures
import dataclasses
import logging

from ..format.internal_topics import (OFFSETS_PARTITIONS, OFFSETS_TOPIC, TRANSACTIONS_CONFIG,
                                      TRANSACTIONS_MIN_ISR, TRANSACTIONS_PARTITIONS,
                                      TRANSACTIONS_REPLICATION_FACTOR, TRANSACTIONS_TOPIC)
from ..protocol import CLUSTER_SUPPORTED, ApiKey, ErrorCode
from ..protocol.security import SecurityProtocol
from ..server import Broker
from ..storage import cluster_dir
from ..storage.fs import DEFAULT_FS
from .adoption.carry_offsets import OffsetCarrier
from .adoption.steps import Adoption, adoption_needed
from .controller.role import Controller
from .coordinators.placement import DEFAULT_OFFSETS_REPLICATION_FACTOR, cluster_runtime
from .coordinators.roles import StateTopicRoles
from .coordinators.txn_markers import ClusterMarkerChannel
from .coordinators.txn_verification import ClusterVerification
from .handlers import HANDLERS
from .metrics import ClusterMetricsSource
from .network.broker_client import BrokerClientError
from .network.channels import ChannelManager
from .network.inter_broker import InterBrokerListener
from .network.peers import PeerConnections
from .replica.broker_dir import (DEFAULT_HW_CHECKPOINT_INTERVAL_MS, HighWatermarkCheckpointer,
                                 adopt_cluster_id, close_broker_dir, open_broker_dir)
from .replica.manager import ClusterReplicaManager
from .replica.metadata_cache import MetadataCache
from .rules.leader_rebalance import DEFAULT_CHECK_INTERVAL_S, DEFAULT_PERCENTAGE
from .rules.leader_state import DEFAULT_LAG_TIME_MS
from .zookeeper.acls import ZkAclStore
from .zookeeper.client_quotas import ZkQuotaStore
from .zookeeper.config_watcher import ConfigChangeWatcher
from .zookeeper.credentials import ZkCredentials
from .zookeeper.producer_ids import ZkProducerIds
from .zookeeper.store import ZkStore, check_connected, zk_guarded
from .zookeeper.znodes import BrokerInfo

__all__ = ["ClusterNode", "DEFAULT_SESSION_TIMEOUT_MS"]

log = logging.getLogger("kqlite.cluster")

DEFAULT_SESSION_TIMEOUT_MS = 6000
_CONTROLLED_SHUTDOWN_VERSIONS = (1, 3)   # WIRE: v3 is what Kafka 3.x brokers send


class ClusterNode:
    """A cluster broker; see the module docstring. ``zookeeper``: ``HOST:PORT[,...][/chroot]``.
    ``inter_broker``: the InterBrokerListener (network/inter_broker.py); by default the
    first PLAINTEXT listener, without security. ``broker_options`` go to
    :class:`~kqlite.server.Broker` (``listeners`` among them)."""

    def __init__(self, data_dir, host="127.0.0.1", port=9092, *, broker_id, zookeeper,
                 session_timeout_ms=DEFAULT_SESSION_TIMEOUT_MS, advertised_host=None,
                 default_replication_factor=1, replica_lag_time_max_ms=DEFAULT_LAG_TIME_MS,
                 controlled_shutdown_max_retries=3,
                 controlled_shutdown_retry_backoff_ms=5000,
                 auto_leader_rebalance_enable=True,
                 leader_imbalance_check_interval_seconds=DEFAULT_CHECK_INTERVAL_S,
                 leader_imbalance_per_broker_percentage=DEFAULT_PERCENTAGE,
                 replica_high_watermark_checkpoint_interval_ms=DEFAULT_HW_CHECKPOINT_INTERVAL_MS,
                 offsets_topic_replication_factor=DEFAULT_OFFSETS_REPLICATION_FACTOR,
                 offsets_topic_num_partitions=OFFSETS_PARTITIONS,
                 transaction_state_log_num_partitions=TRANSACTIONS_PARTITIONS,
                 transaction_state_log_replication_factor=TRANSACTIONS_REPLICATION_FACTOR,
                 transaction_state_log_min_isr=TRANSACTIONS_MIN_ISR, inter_broker=None,
                 **broker_options):
        self.broker_id = broker_id
        # Before the broker opens any log: the dir's identity, mark and claim
        # (replica/broker_dir.py).
        self._fs = broker_options.get("fs") or DEFAULT_FS
        # A data dir written by the embedded API is adopted first (adoption/steps.py),
        # once ZooKeeper is reachable; its identity is written then.
        self._adopting = adoption_needed(self._fs, data_dir)
        self.adopted_offsets = None
        if self._adopting:
            # Claimed already: a dir whose adoption resumes may be marked, and the
            # broker's Database (made below) must not open it as a reader.
            cluster_dir.claim(data_dir)
        else:
            open_broker_dir(self._fs, data_dir, broker_id)
        self._data_dir = data_dir
        self._hw_interval_ms = replica_high_watermark_checkpoint_interval_ms
        self.hw_checkpointer = None
        self._rebalance = {"auto_rebalance": auto_leader_rebalance_enable,
                           "imbalance_check_interval_s": leader_imbalance_check_interval_seconds,
                           "imbalance_percentage": leader_imbalance_per_broker_percentage}
        self.config_watcher = None
        self.zookeeper = zookeeper
        self.session_timeout_ms = session_timeout_ms
        self.shutdown_retries = controlled_shutdown_max_retries
        self.shutdown_backoff = controlled_shutdown_retry_backoff_ms / 1000.0
        self.cache = MetadataCache(broker_id)
        self.zk = None
        self.store = None
        self.controller = None
        self.channels = None
        self._zk_threads = concurrent.futures.ThreadPoolExecutor(
            2, thread_name_prefix=f"kqlite-zk-broker-{broker_id}")
        self.inter_broker = inter_broker or _default_inter_broker(broker_options, host, port)
        self._replica_options = {"default_replication_factor": default_replication_factor,
                                 "lag_time_ms": replica_lag_time_max_ms,
                                 "inter_broker": self.inter_broker}
        # The state topics' (partitions, replication factor), by name.
        self._state_topics = {
            OFFSETS_TOPIC: (offsets_topic_num_partitions, offsets_topic_replication_factor,
                            None),
            TRANSACTIONS_TOPIC: (transaction_state_log_num_partitions,
                                 transaction_state_log_replication_factor,
                                 {**TRANSACTIONS_CONFIG,
                                  "min.insync.replicas": transaction_state_log_min_isr})}
        # Markers and KIP-890 verifications to other brokers, pipelined per broker.
        self.peers = PeerConnections(lambda b: self.cache.endpoint(b, self.inter_broker.name),
                                     self.inter_broker.connect,
                                     client_id=f"kqlite-broker-{broker_id}")
        self.broker = Broker(data_dir, host, port, broker_id=broker_id,
                             advertised_host=advertised_host, make_replicas=self._replicas,
                             make_coordinator_runtime=self._coordinator_runtime,
                             extra_handlers=HANDLERS, api_versions=CLUSTER_SUPPORTED,
                             make_marker_channel=lambda _broker, timeout_ms:
                                 ClusterMarkerChannel(self, self.peers, timeout_ms),
                             make_txn_verification=lambda broker:
                                 ClusterVerification(broker, self.peers),
                             make_acl_store=lambda _broker: ZkAclStore(self),
                             make_quota_store=lambda _broker: ZkQuotaStore(self),
                             make_credentials=lambda _broker: ZkCredentials(self),
                             **broker_options)
        # Clients are told other brokers' addresses on their own listener, from the
        # metadata cache.
        self.broker.peer_address = self.cache.endpoint
        self.broker.metrics.add_source(ClusterMetricsSource(self))
        self.replicas.on_roles_changed = StateTopicRoles(
            [self.broker.coordinator.runtime, self.broker.transactions.runtime]).roles_changed

    def _coordinator_runtime(self, broker, topic):
        partitions, replication_factor, creation_config = self._state_topics[topic.name]
        return cluster_runtime(self, broker, dataclasses.replace(topic, partitions=partitions),
                               replication_factor=replication_factor,
                               creation_config=creation_config)

    def _replicas(self, broker):
        return ClusterReplicaManager(broker.db, broker.io, broker_id=broker.broker_id,
                                     cache=self.cache, store=None, zk=self.zk_call,
                                     zk_request=self.zk_request,
                                     default_partitions=broker.default_partitions,
                                     **self._replica_options)

    @property
    def replicas(self):
        return self.broker.replicas

    @property
    def port(self):
        return self.broker.port

    async def zk_call(self, fn, *args):
        """Run a blocking ZooKeeper call in one of the node's ZooKeeper threads; kazoo's
        failures (connection lost, session expired...) raise ZooKeeperError. While the
        connection is down, kazoo holds a new call until it is back."""
        return await asyncio.get_running_loop().run_in_executor(self._zk_threads, zk_guarded,
                                                                fn, *args)

    async def zk_request(self, fn, *args):
        """:meth:`zk_call` for a client's request: ZooKeeperError at once while the
        connection is down, instead of holding the request (and a ZooKeeper thread)
        until it is back; the client gets an error code and retries."""
        check_connected(self.zk)
        return await self.zk_call(fn, *args)

    # -- Lifecycle ---------------------------------------------------------------------------

    async def start(self):
        from kazoo.client import KazooClient
        await self.zk_call(_ensure_chroot, self.zookeeper)
        self.zk = KazooClient(hosts=self.zookeeper, timeout=self.session_timeout_ms / 1000.0)
        await self.zk_call(self.zk.start, max(15.0, self.session_timeout_ms / 1000.0))
        self.store = ZkStore(self.zk)
        self.replicas.store = self.store      # the replica manager was made before it
        self.broker.producer_ids = ZkProducerIds(self.store, self.broker_id)
        self.replicas.producer_ids = self.broker.producer_ids
        await self.zk_call(self.store.ensure_paths)
        self.broker.cluster_id = await self.zk_call(self.store.cluster_id)
        journal = None
        if self._adopting:
            journal = await self.zk_call(self._adopt)
            await self.broker.io.run(open_broker_dir, self._fs, self._data_dir,
                                     self.broker_id)
            cluster_dir.release(self._data_dir)      # open_broker_dir claimed it again
            self._adopting = False
        await self.broker.io.run(adopt_cluster_id, self._fs, self._data_dir, self.broker_id,
                                 self.broker.cluster_id)
        await self.broker.start()
        self.hw_checkpointer = HighWatermarkCheckpointer(
            self._fs, self.broker.db.path, self.replicas.hosted_replicas, self.broker.io.run,
            self._hw_interval_ms)
        self.hw_checkpointer.start()
        self.channels = ChannelManager(client_id=f"kqlite-controller-{self.broker_id}",
                                       connector=self.inter_broker.connect)
        self.controller = Controller(self.store, self.registration(), self.channels,
                                     listener_name=self.inter_broker.name, **self._rebalance)
        self.replicas.controller = self.controller
        await self.controller.start()
        quotas, credentials = self.broker.quota_store, self.broker.credentials
        self.config_watcher = ConfigChangeWatcher(
            self.store, self.zk_call, self.replicas.topic_config_changed,
            on_entity={"users": _both(quotas.users_changed, credentials.user_changed),
                       "clients": quotas.clients_changed})
        await self.config_watcher.start()
        if journal is not None:
            self.adopted_offsets = OffsetCarrier(self, journal).start()
        log.info("broker %d joined the cluster at %s (broker epoch %d)", self.broker_id,
                 self.zookeeper, self.controller.broker_epoch)

    def _adopt(self):
        """Adopt the data dir (a ZooKeeper thread); the journal while committed offsets
        wait to be carried, else None."""
        return Adoption(self._fs, self._data_dir, self.store, broker_id=self.broker_id,
                        replication_factor=self._replica_options["default_replication_factor"],
                        cluster_id=self.broker.cluster_id).run()

    def registration(self):
        """This broker's registration: every listener's advertised endpoint (bound ports
        filled in once the broker listens)."""
        return BrokerInfo(self.broker_id,
                          tuple(listener.advertised for listener in self.broker.listeners))

    async def stop(self, *, controlled=True):
        """Controlled shutdown (unless ``controlled`` is false), then stop everything."""
        if self.adopted_offsets is not None:
            await self.adopted_offsets.stop()
        if controlled and self.controller is not None:
            await self.controlled_shutdown()
        if self.zk is not None and not self.zk.connected:
            # ZooKeeper out of reach: kazoo holds every call until the connection is back,
            # and the calls already waiting fill the ZooKeeper threads, so the steps below
            # (the controller's resignation, the last close) would wait for ever. Closing
            # the session now fails them all at once, as a crash leaves them; ZooKeeper
            # expires the session, and its ephemeral nodes with it.
            log.warning("broker %d: ZooKeeper is out of reach; closing its session before "
                        "stopping", self.broker_id)
            await asyncio.to_thread(self.zk.stop)
        if self.config_watcher is not None:
            await self.config_watcher.stop()
        if self.controller is not None:
            await self.controller.stop()
        if self.hw_checkpointer is not None:
            await self.hw_checkpointer.stop()      # Kafka checkpoints at shutdown too
        await self.broker.stop()
        await self.peers.close()
        close_broker_dir(self._data_dir)
        if self.channels is not None:
            await self.channels.close()
        if self.zk is not None:
            await self.zk_call(self.zk.stop)
            await self.zk_call(self.zk.close)
        self._zk_threads.shutdown(wait=False)

    async def controlled_shutdown(self):
        """Ask the controller to move this broker's leaderships away; True once it has
        (Kafka's KafkaServer.controlledShutdown)."""
        for attempt in range(1, self.shutdown_retries + 1):
            try:
                answer = await self._ask_for_shutdown()
            except (BrokerClientError, asyncio.TimeoutError) as exc:
                answer = {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
                          "error": str(exc) or "the controller did not answer in time"}
            code = answer["error_code"]
            remaining = answer.get("remaining_partitions") or []
            if code == ErrorCode.NONE and not remaining:
                log.info("broker %d: controlled shutdown succeeded", self.broker_id)
                return True
            log.warning("broker %d: controlled shutdown attempt %d/%d failed (%s, %d "
                        "partitions still led%s)", self.broker_id, attempt,
                        self.shutdown_retries, ErrorCode(code).name, len(remaining),
                        f": {answer['error']}" if "error" in answer else "")
            if attempt < self.shutdown_retries:
                await asyncio.sleep(self.shutdown_backoff)
        log.warning("broker %d: shutting down without moving all leaderships away",
                    self.broker_id)
        return False

    async def _ask_for_shutdown(self):
        epoch = self.controller.broker_epoch
        if self.controller.is_active:
            return await self.replicas.ask_controller("controlled_shutdown", self.broker_id,
                                                      epoch)
        try:
            return await self.replicas.send_to_controller(
                ApiKey.CONTROLLED_SHUTDOWN, _CONTROLLED_SHUTDOWN_VERSIONS,
                {"broker_id": self.broker_id, "broker_epoch": epoch})
        except Exception as exc:    # noqa: BLE001 -- no controller known: retried
            code = getattr(exc, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
            return {"error_code": code, "error": str(exc)}


def _default_inter_broker(broker_options, host, port):
    """Without an inter-broker listener given: the first PLAINTEXT listener, which needs no
    client settings (a broker whose only listeners are secured needs them given)."""
    listeners = broker_options.get("listeners")
    if not listeners:
        return InterBrokerListener.plaintext()
    for listener in listeners:
        if listener.protocol == SecurityProtocol.PLAINTEXT:
            return InterBrokerListener.plaintext(listener.name)
    raise ValueError("a cluster broker without a PLAINTEXT listener needs its inter-broker "
                     "listener's client settings (inter_broker)")


def _ensure_chroot(hosts):
    """Create the chroot of a connect string if it is missing (a thread: blocking)."""
    servers, slash, chroot = hosts.partition("/")
    if not slash or not chroot.strip("/"):
        return
    from kazoo.client import KazooClient
    client = KazooClient(hosts=servers)
    client.start(timeout=15)
    try:
        client.ensure_path("/" + chroot.strip("/"))
    finally:
        client.stop()
        client.close()


def _both(first, second):
    """One handler of a config entity type for two owners of its znodes (a user's quotas
    and its SCRAM credentials share ``/config/users/<user>``)."""
    async def changed(path):
        await first(path)
        await second(path)
    return changed
