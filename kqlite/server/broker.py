"""The asyncio broker: sockets in, kqlite.protocol requests out, handlers, responses back.

One task per connection reads bytes, feeds them to a sans-I/O
``ServerConnection`` and handles each request in order (Kafka processes one
request per connection at a time, which also keeps responses in order). A
malformed frame or an oversized length prefix closes only that connection.
Fetch responses carry ``FileRegion`` chunks that are written with sendfile.

Every request reaches its handler as ``handler(broker, context, request)``: the
``RequestContext`` (request_context.py) is made once per request from the header and
the connection's ``Session`` (who the client is and which listener it reached; the
connection is the one place that identity is set). Handlers ask the broker's one
``authorizer`` (authorization/) with that context before any effect.

The event loop thread does sockets, the codec and sendfile only: handlers reach the
data through the replica manager (``replicas``: partitions, topics, delayed
operations), whose storage calls run in ``io_threads`` storage threads, so a large
Fetch or a slow fsync on one connection never holds up the others.

The broker serves one or more listeners (listeners.py; by default one PLAINTEXT listener
on ``host:port``), each PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. A connection to a TLS
listener is served once its TLS handshake ends (within ``authentication_timeout_ms``); a
client certificate names its principal (authentication/principal_mapping.py). On a SASL
listener, every frame before authentication goes to the SASL exchange
(authentication/sasl_server.py), bounded by ``sasl.server.max.receive.size`` and by the same
timeout, and nothing else is served; a failure is answered and the connection closed after
``connection.failed.authentication.delay.ms``. Success replaces the connection's session,
and a session with a lifetime (KIP-368) is re-authenticated by the client or closed at its
next request after it expired. Fetched records reach a TLS connection copied through the
TLS layer (sendfile.py's ``copy_region``) instead of by sendfile.

Every resource a client can make the broker hold is bounded (Kafka's settings):
connections in total and per address (``max.connections``, ``max.connections.per.ip``:
acceptor.py, connection_limits.py), the bytes of requests read and not yet answered
(``queued.max.request.bytes``: request_memory.py; a connection over it stops reading
until memory is released), and the time a connection may sit idle
(``connections.max.idle.ms``: no request in that long and it is closed, as Kafka's
Selector expires idle connections; a connection with a request in progress is never
idle). Running out of descriptors or disk space is logged once per episode and
recovered from without a restart (exhaustion.py).
"""

import asyncio
import logging
import os
import socket
import struct
import time

from ..db import Database
from ..protocol import (SUPPORTED, ApiKey, ErrorCode, FileRegion, ProtocolError,
                        ServerConnection)
from ..protocol.security import ANONYMOUS, USER_TYPE, KafkaPrincipal, SecurityProtocol
from .acceptor import Acceptor, open_listeners
from .authentication.credentials import DataDirCredentials
from .authentication.listener_security import (DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
                                               plaintext_listener)
from .authentication.principal_mapping import NoMatchingRule, distinguished_name
from .authentication.sasl_server import Next, SaslServerAuthenticator
from .authorization import AllowAll
from .authorization.acl_store import DataDirAclStore
from .connection_limits import ConnectionLimits
from .coordinator.group.coordinator import GroupCoordinator
from .coordinator.runtime import sole_broker_runtime
from .coordinator.state_topic import OFFSETS_STATE, TRANSACTIONS_STATE
from .coordinator.txn.config import TransactionConfig
from .coordinator.txn.coordinator import TransactionCoordinator
from .coordinator.txn.metrics import TransactionMetricsSource
from .coordinator.txn.markers import LocalMarkerChannel
from .coordinator.txn.verification import LocalVerification
from .fetch_sessions import DEFAULT_CACHE_SLOTS, FetchSessionCache
from .handlers import HANDLERS
from .metrics import Metrics
from .request_latency import request_names
from .quotas import DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_SECONDS, ClientQuotas
from .quotas.store import DataDirQuotaStore
from .replica_manager import ReplicaManager
from .request_context import RequestContext, Session
from .request_memory import RequestMemory
from .sendfile import copy_region, send_response
from .storage_io import DEFAULT_IO_THREADS, StorageExecutor

__all__ = ["Broker"]

log = logging.getLogger("kqlite.server")

DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600000    # Kafka's connections.max.idle.ms: 10 minutes
# The time a TLS handshake and a SASL exchange may take together; Kafka bounds them only by
# connections.max.idle.ms between reads.
AUTHENTICATION_TIMEOUT_MS = 30000
REAUTHENTICATION_MIN_INTERVAL_MS = 1000     # Kafka's KafkaChannel: one re-auth per second
_READ_CHUNK = 1 << 16
_BODY_CHUNK = 1 << 22    # a request body is read in steps of at most 4 MiB
_LENGTH = struct.Struct(">i")    # WIRE: a frame's length prefix
_timeout = getattr(asyncio, "timeout", None)     # Python 3.11+


class _IdleConnection(Exception):
    """No bytes arrived for connections.max.idle.ms while no request was in progress."""


class _AuthenticationEnded(Exception):
    """The connection closes during or after authentication (the reason is logged)."""


class Broker:
    """A Kafka-protocol broker over one kqlite data dir."""

    def __init__(self, data_dir, host="127.0.0.1", port=9092, *, broker_id=0,
                 advertised_host=None, max_request_size=104857600, auto_create_topics=True,
                 default_partitions=1, topic_defaults=None, metrics_port=None, metrics_host=None,
                 group_initial_rebalance_delay_ms=300, io_threads=DEFAULT_IO_THREADS, fs=None,
                 connections_max_idle_ms=DEFAULT_CONNECTIONS_MAX_IDLE_MS, max_connections=None,
                 max_connections_per_ip=None, max_connections_per_ip_overrides=None,
                 queued_max_request_bytes=None,
                 fetch_session_cache_slots=DEFAULT_CACHE_SLOTS, make_replicas=None,
                 make_coordinator_runtime=None,
                 extra_handlers=None, api_versions=None, authorizer=None, listeners=None,
                 make_credentials=None,
                 failed_authentication_delay_ms=DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
                 authentication_timeout_ms=AUTHENTICATION_TIMEOUT_MS, transactions=True,
                 transaction_config=None, make_marker_channel=None,
                 make_txn_verification=None, make_acl_store=None, make_quota_store=None,
                 quota_window_num=DEFAULT_WINDOW_NUM,
                 quota_window_size_seconds=DEFAULT_WINDOW_SIZE_SECONDS):
        """``fs``: the storage file-system seam (tests inject faults and blocking calls).
        ``connections_max_idle_ms``: -1 never closes idle connections. ``None`` for
        ``max_connections``, ``max_connections_per_ip`` and ``queued_max_request_bytes``
        picks the defaults connection_limits.py and request_memory.py state;
        ``max_connections_per_ip_overrides`` maps addresses to their own caps.
        ``fetch_session_cache_slots``: Kafka's max.incremental.fetch.session.cache.slots.

        The seams through which a layer above (the cluster) turns this into one broker of
        several, without the server knowing it: ``make_replicas(broker)`` returns the
        replica manager to use instead of the single-broker one;
        ``make_coordinator_runtime(broker, state_topic)`` the runtime of a coordinator's
        state topic (coordinator/runtime.py) instead of the data dir's own; ``extra_handlers``
        (``{ApiKey: handler}``) add or replace request handlers; ``api_versions``
        (``{ApiKey: (min, max)}``) is what ApiVersions advertises.

        ``authorizer``: the :class:`~.authorization.Authorizer` every request's access
        checks ask; None is ``AllowAll``, Kafka's broker without ``authorizer.class.name``.

        ``listeners``: the listeners to serve (``BrokerListener`` s,
        authentication/listener_security.py); None is one PLAINTEXT listener on
        ``host:port`` advertising ``advertised_host``. ``make_credentials(broker)`` returns
        the SCRAM credential store (authentication/credentials.py) instead of the data
        dir's. ``failed_authentication_delay_ms``: Kafka's
        ``connection.failed.authentication.delay.ms``; ``authentication_timeout_ms``: how
        long a TLS handshake and SASL exchange may take.

        ``transactions``: whether the broker has a transaction coordinator
        (coordinator/txn/, over ``__transaction_state`` through the same runtime seam,
        its markers written to this broker's own partitions); a broker without one
        answers the transactional APIs as a broker without transactions.
        ``transaction_config``: its TransactionConfig (Kafka's defaults when None).
        ``make_marker_channel(broker, timeout_ms)``: the channel its markers go through
        (coordinator/txn/markers.py) instead of this broker's own partitions;
        ``make_txn_verification(broker)``: whom a partition leader asks whether a partition
        is in a producer's transaction (coordinator/txn/verification.py) instead of this
        broker's own coordinator (a cluster: the id's coordinator, wherever it is).

        ``make_acl_store(broker)``: where an ACL authorizer keeps its ACLs
        (authorization/acl_store.py) instead of the data dir's file (a cluster: ZooKeeper);
        ``make_quota_store(broker)`` the same for client quotas (quotas/store.py).
        ``quota_window_num``, ``quota_window_size_seconds``: Kafka's quota.window.num and
        quota.window.size.seconds, the windows client quotas are measured over."""
        if connections_max_idle_ms != -1 and (not isinstance(connections_max_idle_ms, int)
                                              or connections_max_idle_ms < 1):
            raise ValueError(f"connections.max.idle.ms must be a positive integer or -1, "
                             f"not {connections_max_idle_ms!r}")
        self.limits = ConnectionLimits(max_connections, max_connections_per_ip,
                                       max_connections_per_ip_overrides)
        self.request_memory = RequestMemory(queued_max_request_bytes, max_request_size)
        self.idle_seconds = None if connections_max_idle_ms == -1 \
            else connections_max_idle_ms / 1000.0
        self.db = Database(data_dir, topic_defaults, auto_create_topics=False,
                           retention_check_interval_ms=300000, fs=fs)
        self.listeners = list(listeners) if listeners else \
            [plaintext_listener(host, port, advertised_host)]
        first = self.listeners[0]
        self.host = first.endpoint.host
        self.port = first.endpoint.port
        self.broker_id = broker_id
        self.advertised_host = first.advertised.host
        self.failed_authentication_delay = failed_authentication_delay_ms / 1000.0
        self.authentication_timeout = authentication_timeout_ms / 1000.0
        # Other brokers' addresses by (node id, listener name): a cluster broker sets it.
        self.peer_address = lambda node_id, listener_name: None
        # What the HTTP listener (metrics_port) serves besides /metrics: an async
        # HttpRequest -> HttpResponse the layer above may set (the web console).
        self.http_app = None
        self.max_request_size = max_request_size
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self.cluster_id = self._cluster_id()
        self.metrics = Metrics(self)
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host     # None: the broker's own host
        self.io = StorageExecutor(io_threads)      # before the coordinator, which uses it
        self.fetch_sessions = FetchSessionCache(fetch_session_cache_slots)
        self.acl_store = make_acl_store(self) if make_acl_store is not None else \
            DataDirAclStore(self.db.path, self.io.run)
        self.quotas = ClientQuotas(window_num=quota_window_num,
                                   window_size_seconds=quota_window_size_seconds)
        self.quota_store = make_quota_store(self) if make_quota_store is not None else \
            DataDirQuotaStore(self.db.path, self.io.run)
        self.metrics.add_source(self.quotas.metrics)
        make_runtime = make_coordinator_runtime or sole_broker_runtime
        self.coordinator = GroupCoordinator(make_runtime(self, OFFSETS_STATE),
                                            group_initial_rebalance_delay_ms / 1000.0)
        self.producer_ids = self.db.producer_ids   # a cluster puts ZooKeeper's in its place
        self.transactions = None
        if transactions:
            config = transaction_config or TransactionConfig()
            markers = (make_marker_channel or LocalMarkerChannel)(self,
                                                                 config.request_timeout_ms)
            self.transactions = TransactionCoordinator(
                make_runtime(self, TRANSACTIONS_STATE), self.allocate_producer_id, markers,
                config)
            self.metrics.add_source(TransactionMetricsSource(self.transactions))
        self.txn_verification = (make_txn_verification or LocalVerification)(self)
        self.handlers = {**HANDLERS, **(extra_handlers or {})}
        self.authorizer = authorizer if authorizer is not None else AllowAll()
        self.api_versions = dict(SUPPORTED if api_versions is None else api_versions)
        self.replicas = make_replicas(self) if make_replicas is not None else \
            ReplicaManager(self.db, self.io, broker_id=broker_id,
                           default_partitions=default_partitions)
        self.credentials = make_credentials(self) if make_credentials is not None else \
            DataDirCredentials(self.db.path, self.io.run)
        self._acceptor = None
        self._metrics_server = None
        self._connections = set()
        self._stopping = False

    async def allocate_producer_id(self):
        """A new producer id from ``producer_ids`` (a block may be reserved on disk, or in a
        cluster in ZooKeeper: in a storage thread)."""
        return await self.io.run(self.producer_ids.allocate)

    def _cluster_id(self):
        try:
            with open(os.path.join(self.db.path, "meta.properties")) as f:
                for line in f:
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        except OSError:
            pass
        return "kqlite"

    # -- Lifecycle ----------------------------------------------------------------------------

    def address_of(self, node_id, listener_name):
        """``(host, port)`` clients on ``listener_name`` reach broker ``node_id`` at, or
        None when that broker has no such listener (Kafka answers each client with the
        endpoints of the listener it connected to)."""
        if node_id != self.broker_id:
            return self.peer_address(node_id, listener_name)
        for listener in self.listeners:
            if listener.name == listener_name:
                return listener.advertised.host, listener.advertised.port
        return None

    def listener(self, name):
        return next(listener for listener in self.listeners if listener.name == name)

    @property
    def uses_scram(self):
        return any(m.startswith("SCRAM-") for listener in self.listeners
                   if listener.sasl is not None for m in listener.sasl.mechanisms)

    async def start(self):
        self.replicas.start()
        await self.authorizer.start(self)
        await self.quotas.start(self.quota_store)
        if self.uses_scram:
            await self.credentials.start()
        listening = []
        try:
            for i, listener in enumerate(self.listeners):
                sockets = await open_listeners(listener.endpoint.host, listener.endpoint.port)
                listening += [(sock, listener.name) for sock in sockets]
                bound = sockets[0].getsockname()[1]
                advertised = listener.advertised
                self.listeners[i] = listener._replace(
                    endpoint=listener.endpoint._replace(port=bound),
                    advertised=advertised._replace(port=advertised.port or bound))
        except BaseException:
            for sock, _ in listening:
                sock.close()
            raise
        self.port = self.listeners[0].endpoint.port
        self._acceptor = Acceptor([sock for sock, _ in listening], self.limits,
                                  self.io.alarms, self.metrics, self._serve,
                                  names=[name for _, name in listening])
        self._acceptor.start()
        if self.metrics_port is not None:
            self._metrics_server = await self.metrics.start(self.metrics_host or self.host,
                                                            self.metrics_port)
        self.coordinator.start()
        if self.transactions is not None:
            self.transactions.start()
        log.info("kqlite broker %d serving %s on %s", self.broker_id, self.db.path,
                 ", ".join(str(listener.endpoint) for listener in self.listeners))

    async def loaded(self):
        """Return once the coordinators hold what they load at start (until then their
        requests answer COORDINATOR_LOAD_IN_PROGRESS, as Kafka's do): for callers, such as
        tests, that want a broker whose first answers are its steady ones."""
        await self.coordinator.loaded()
        if self.transactions is not None:
            await self.transactions.loaded()

    async def stop(self, grace=10.0):
        """Stop accepting, let in-flight requests finish, then flush and close the data."""
        self._stopping = True
        if self._acceptor is not None:
            await self._acceptor.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self.transactions is not None:
            await self.transactions.stop()   # markers stop before the partitions do
        await self.replicas.stop()   # waiting fetches answer now
        await self.coordinator.stop()  # so do JoinGroups waiting out a rebalance
        await self.authorizer.stop()
        await self.quotas.stop()
        deadline = time.monotonic() + grace
        while any(c.busy for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.writer.close()
        if self._acceptor is not None:     # connections waiting for request memory
            for task in list(self._acceptor.connections):
                task.cancel()
            await asyncio.gather(*self._acceptor.connections, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.io.shutdown)
        # Flushes every log and writes the clean-shutdown marker.
        await loop.run_in_executor(None, self.db.close)
        log.info("kqlite broker stopped cleanly")

    # -- Connections --------------------------------------------------------------------------

    async def _serve(self, sock, address, listener_name="PLAINTEXT"):
        listener = self.listener(listener_name)
        try:
            if listener.ssl_context is None:
                reader, writer = await asyncio.open_connection(sock=sock)
            else:
                reader, writer = await _tls_stream(sock, listener.ssl_context,
                                                   self.authentication_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            sock.close()
            self.metrics.failed_authentications += listener.ssl_context is not None
            log.info("connection from %s ended before it was set up: %s", address,
                     exc or type(exc).__name__)
            return
        conn = _Connection(self, reader, writer, listener)
        self._connections.add(conn)
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)


async def _tls_stream(sock, context, timeout):
    """A stream pair over accepted ``sock`` once its server-side TLS handshake ended;
    the handshake may take ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_CHUNK, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.connect_accepted_socket(
        lambda: protocol, sock, ssl=context, ssl_handshake_timeout=timeout)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class _Connection:
    def __init__(self, broker, reader, writer, listener=None):
        self.broker = broker
        self.listener = listener or broker.listeners[0]
        self.reader = reader
        self.writer = writer
        self.codec = ServerConnection(max_request_size=broker.max_request_size)
        self.peer = writer.get_extra_info("peername")
        self.busy = False
        self.reserved = 0          # request-memory bytes held for the request being read
        self.handling = "unknown"  # the API of the request in progress
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The connection's identity: the one place it is set. Authentication (TLS, SASL)
        # replaces it before the requests that follow.
        self.session = Session.plaintext(self.peer)
        self.tls = writer.get_extra_info("ssl_object") is not None
        self.sasl_mechanism = None
        self.session_expiry = None      # monotonic seconds, for a session with a lifetime
        self.reauthenticated_at = None

    async def run(self):
        metrics = self.broker.metrics
        memory = self.broker.request_memory
        metrics.connections += 1
        try:
            if not await self._authenticate_at_start():
                return
            while not self.broker._stopping:
                try:
                    request = await self._read_request()
                except ProtocolError as exc:
                    log.warning("closing connection from %s: %s", self.peer, exc)
                    metrics.protocol_errors += 1
                    return
                if request is None:
                    return
                if self.session_expiry is not None:
                    verdict = await self._before_request(request)
                    if verdict is None:
                        return
                    if not verdict:      # it began a re-authentication, which succeeded
                        continue
                self.busy = True
                try:
                    muted_until = await self._handle(request)
                except ProtocolError as exc:     # a request Kafka could not parse
                    log.warning("closing connection from %s: %s", self.peer, exc)
                    metrics.protocol_errors += 1
                    return
                finally:
                    self.busy = False
                    memory.release(self.reserved)
                    self.reserved = 0
                if muted_until is not None:
                    # A client quota's throttle (KIP-219): the answer went out at once,
                    # and nothing more is read from the client until the time is up.
                    await asyncio.sleep(muted_until - asyncio.get_running_loop().time())
        except _AuthenticationEnded as exc:
            log.info("closing connection from %s on listener %s: %s", self.peer,
                     self.listener.name, exc)
        except _IdleConnection:
            metrics.idle_closed += 1
            log.debug("closing connection from %s: idle for connections.max.idle.ms",
                      self.peer)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("connection from %s ended: %s", self.peer, exc)
        except OSError as exc:
            # Out of descriptors or space outside a partition (a topic change, say):
            # logged once per episode, not as a traceback per connection.
            if self.broker.io.alarms.check(exc, f"{self.handling} requests",
                                           f"a {self.handling} request") is None:
                log.exception("connection from %s failed", self.peer)
        except Exception:
            log.exception("connection from %s failed", self.peer)
        finally:
            memory.release(self.reserved)
            self.reserved = 0
            metrics.connections -= 1
            self.writer.close()

    # -- Authentication ---------------------------------------------------------------------

    async def _authenticate_at_start(self):
        """Set the session the listener's security establishes: TLS's certificate
        principal, then SASL's exchange on a SASL listener. False: the connection closes."""
        listener = self.listener
        principal = ANONYMOUS
        if listener.protocol == SecurityProtocol.SSL:
            cert = self.writer.get_extra_info("peercert")
            if cert and cert.get("subject"):
                try:
                    principal = KafkaPrincipal(USER_TYPE, listener.principal_mapper.name(
                        distinguished_name(cert["subject"])))
                except NoMatchingRule as exc:
                    self.broker.metrics.failed_authentications += 1
                    log.info("closing TLS connection from %s: %s", self.peer, exc)
                    return False
        if listener.sasl is not None:
            authenticator = SaslServerAuthenticator(
                listener.mechanisms(self.broker.credentials), self.broker.api_versions,
                reauth_ms=listener.sasl.reauth_ms)
            try:
                async with _deadline(self.broker.authentication_timeout):
                    step = await self._exchange(authenticator)
            except asyncio.TimeoutError:
                raise _AuthenticationEnded("authentication did not finish within "
                                           f"{self.broker.authentication_timeout:g} s") from None
            if step is None:
                return False
            principal = KafkaPrincipal(USER_TYPE, step.principal_name)
            self.sasl_mechanism = step.mechanism
            self._start_session(step)
        self.session = self.session.authenticated(principal, listener.name, listener.protocol)
        return True

    async def _exchange(self, authenticator, request=None):
        """Run a SASL exchange to its end: the completing Step, or None (closed)."""
        frame = None
        while True:
            if request is None:
                frame = await self._read_frame(self.listener.sasl.max_receive_size)
                if frame is None:
                    return None
            if self.sasl_mechanism is None and authenticator.state.value == "handshake":
                await self.broker.credentials.refresh()
            step = authenticator.receive(frame, int(time.time() * 1000), request)
            request = None
            if step.next is Next.FAIL:
                self.broker.metrics.failed_authentications += 1
                await asyncio.sleep(self.broker.failed_authentication_delay)
            for chunk in step.send:
                self.writer.write(chunk)
            await self.writer.drain()
            if step.next is Next.COMPLETE:
                return step
            if step.next in (Next.CLOSE, Next.FAIL):
                log.info("closing connection from %s on listener %s: %s", self.peer,
                         self.listener.name, step.reason)
                if step.next is Next.CLOSE and step.reason and not step.send:
                    self.broker.metrics.failed_authentications += 1
                return None

    def _start_session(self, step):
        now = time.monotonic()
        self.reauthenticated_at = now
        self.session_expiry = now + step.session_lifetime_ms / 1000.0 \
            if step.session_lifetime_ms > 0 else None

    async def _before_request(self, request):
        """For a session with a lifetime (KIP-368): True to serve ``request``; False when
        it was a SaslHandshake that began a re-authentication, which succeeded; None to
        close (the session expired, or the re-authentication failed). A SaslHandshake
        begins one when the last began a second ago or more; otherwise it is served as
        any request is (ILLEGAL_SASL_STATE), as in Kafka's ``KafkaChannel``."""
        now = time.monotonic()
        if request.api_key is ApiKey.SASL_HANDSHAKE and request.body is not None and \
                now - self.reauthenticated_at >= REAUTHENTICATION_MIN_INTERVAL_MS / 1000.0:
            return False if await self._reauthenticate(request) else None
        if now < self.session_expiry:
            return True
        self.broker.metrics.expired_sessions_closed += 1
        log.info("closing connection from %s: its session expired (%s)", self.peer,
                 self.session.principal)
        return None

    async def _reauthenticate(self, request):
        listener = self.listener
        authenticator = SaslServerAuthenticator.reauthenticating(
            listener.mechanisms(self.broker.credentials), self.broker.api_versions,
            reauth_ms=listener.sasl.reauth_ms, mechanism=self.sasl_mechanism,
            principal_name=self.session.principal.name)
        self.reauthenticated_at = time.monotonic()
        await self.broker.credentials.refresh()
        try:
            async with _deadline(self.broker.authentication_timeout):
                step = await self._exchange(authenticator, request)
        except asyncio.TimeoutError:
            raise _AuthenticationEnded("re-authentication did not finish in time") from None
        if step is None:
            return False
        self._start_session(step)
        return True

    async def _read_frame(self, max_size):
        """One frame's bytes (without its length prefix) before authentication, None at
        the end of the stream. A length outside ``[0, max_size]`` ends the connection
        (Kafka's "invalid receive size", the CVE-2022-34917 bound)."""
        head = await self._read(4, exactly=True)
        if head is None:
            return None
        size = _LENGTH.unpack(head)[0]
        if size < 0 or size > max_size:
            self.broker.metrics.failed_authentications += 1
            raise _AuthenticationEnded(f"invalid receive size {size} before authentication "
                                       f"(sasl.server.max.receive.size {max_size})")
        self.reserved = await self.broker.request_memory.acquire(size)
        try:
            frame = await self._read(size, exactly=True) if size else b""
        finally:
            self.broker.request_memory.release(self.reserved)
            self.reserved = 0
        return frame

    async def _read_request(self):
        """The next request, or None at the end of the stream. The frame's size is
        reserved from the request memory before its body is read (waiting, and so not
        reading, while the broker is over queued.max.request.bytes)."""
        head = await self._read(4, exactly=True)
        if head is None:
            return None
        requests = self.codec.receive_data(head)   # refuses a bad length prefix at once
        if requests:
            return requests[0]
        size = _LENGTH.unpack(head)[0]
        self.reserved = await self.broker.request_memory.acquire(size)
        # The body in one read when it fits a _BODY_CHUNK (the reader's buffer grows to
        # it: memory the reservation above already counts), handed to the codec whole so
        # that it is not copied again; a larger one in _BODY_CHUNK steps, each within
        # connections.max.idle.ms.
        while size:
            chunk = await self._read(min(size, _BODY_CHUNK), exactly=True)
            if chunk is None:
                return None
            size -= len(chunk)
            requests = self.codec.receive_data(chunk)
        return requests[0]

    async def _read(self, n, exactly=False):
        """Up to ``n`` bytes (exactly ``n`` with ``exactly``), None at the end of the
        stream; _IdleConnection when nothing arrives for connections.max.idle.ms."""
        read = self.reader.readexactly(n) if exactly else self.reader.read(n)
        try:
            if _timeout is None:       # Python 3.10: a task per read, but correct
                return await asyncio.wait_for(read, self.broker.idle_seconds) or None
            async with _timeout(self.broker.idle_seconds):
                return await read or None
        except asyncio.IncompleteReadError:
            return None
        except asyncio.TimeoutError:
            raise _IdleConnection() from None

    async def _handle(self, request):
        """Answer ``request``; the event-loop time until which a client quota mutes the
        connection, or None."""
        started = time.perf_counter()
        name = request.name
        handler = self.broker.handlers.get(request.api_key)
        if request.unsupported or handler is None:
            body, version = _unsupported(request, self.broker.api_versions)
            if body is None:
                log.warning("unsupported request %s v%d from client %r at %s; closing the "
                            "connection (not listed in ApiVersions)", name,
                            request.api_version, request.client_id, self.peer)
                self.broker.metrics.protocol_errors += 1
                raise ConnectionError("unsupported request")
            await self._send(self.codec.respond(request, body, version=version))
            return
        self.handling = name
        context = RequestContext.of(self.session, request)
        response, throttle_ms = await self.broker.quotas.serve(
            context, request, handler(self.broker, context, request))
        muted_until = asyncio.get_running_loop().time() + throttle_ms / 1000.0 \
            if throttle_ms else None
        self.broker.io.alarms.recovered(f"{name} requests")
        if response is not None:  # None: acks=0 produce, no response is sent
            try:
                chunks = self.codec.respond(request, response)
            except BaseException:
                # The regions never reach _send, which closes them after sending.
                for region in _regions_in(response):
                    self.broker.replicas.regions.close(region)
                raise
            await self._send(chunks)
        self.broker.metrics.observe(name, time.perf_counter() - started, request.size,
                                    request_names(name, request.api_version, request.body))
        return muted_until

    async def _send(self, chunks):
        sent = 0
        try:
            if not self.tls and any(isinstance(c, FileRegion) for c in chunks):
                sent = await send_response(self.writer, chunks)
                return
            for chunk in chunks:
                if isinstance(chunk, FileRegion) and self.tls:
                    sent += await copy_region(self.writer, chunk.fd, chunk.offset,
                                              chunk.length, self.broker.io.run)
                else:
                    self.writer.write(chunk)
                    sent += len(chunk)
            await self.writer.drain()
        finally:
            for chunk in chunks:  # fetch regions hold duplicated descriptors
                if isinstance(chunk, FileRegion):
                    self.broker.replicas.regions.close(chunk)
            self.broker.metrics.bytes_out += sent


def _deadline(seconds):
    if _timeout is not None:
        return _timeout(seconds)
    return _WaitFor(seconds)


class _WaitFor:
    """Python 3.10's stand-in for ``asyncio.timeout``: cancels the task at the deadline."""

    def __init__(self, seconds):
        self.seconds = seconds

    async def __aenter__(self):
        task = asyncio.current_task()
        self._expired = False

        def expire():
            self._expired = True
            task.cancel()
        self._handle = asyncio.get_running_loop().call_later(self.seconds, expire)

    async def __aexit__(self, kind, exc, tb):
        self._handle.cancel()
        if self._expired and kind is asyncio.CancelledError:
            raise asyncio.TimeoutError()
        return False


def _regions_in(body):
    """Every FileRegion in a response body (fetched records are sent as file regions)."""
    if isinstance(body, FileRegion):
        yield body
    elif isinstance(body, dict):
        for value in body.values():
            yield from _regions_in(value)
    elif isinstance(body, (list, tuple)):
        for value in body:
            yield from _regions_in(value)


def _unsupported(request, supported):
    """The reply to an API or version kqlite has no schema for: ApiVersions answers in v0
    with UNSUPPORTED_VERSION and the supported list (so the client retries with a version
    both know). For anything else no correct response layout is known, so the connection
    is closed, as Apache Kafka does; ApiVersions never lists such requests. (SASL, ACL and
    transaction requests do have schemas and get error answers: handlers/refused.py.)"""
    if request.api_key == ApiKey.API_VERSIONS:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (lo, hi) in sorted(supported.items())]}, 0
    return None, None
