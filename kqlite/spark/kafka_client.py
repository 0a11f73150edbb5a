"""A small synchronous Kafka client for the source's reads through a broker (Metadata,
ListOffsets, Fetch and DescribeConfigs) and the transactional sink's writes
(broker_sink.py: FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce, EndTxn,
ListTransactions) over blocking sockets. The frames are made and read
by the sans-I/O ``kqlite.protocol.ClientConnection`` (correlation ids, response framing
and its limits, version negotiation), the same as the cluster's inter-broker client's;
this module only moves their bytes.

Theory of operation: one :class:`KafkaClient` per driver or Spark task. It learns
the cluster from Metadata asked of any broker it can reach (the bootstrap list
first, then the brokers Metadata named), keeps one connection per broker, and
sends each partition's ListOffsets and Fetch to that partition's leader, as Kafka
requires. Every connection starts with ApiVersions and uses, per API, the highest
version both sides serve within the range this client speaks (Fetch 4-12: topics by
name, isolation levels and aborted-transaction lists; kqlite and Apache Kafka 3.9
both serve it). :meth:`KafkaClient.retrying` runs an operation again, after
refreshing Metadata and with a growing pause, when the leader moved
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) or a connection broke, until a
deadline; any other error code becomes a :class:`BrokerError` named as Kafka names
it. A broker's answer that cannot be decoded, or that answers another request,
is a :class:`BrokerError` too, never a traceback from deep inside the codec.
"""

import socket
import time

from ..errors import KqliteError
from ..protocol import ApiKey, ClientConnection, ErrorCode, ProtocolError
from ..protocol.client import ApiVersionsError, ConnectionClosedError, NoCommonVersionError

__all__ = ["KafkaClient", "BrokerError", "RETRIABLE"]

# The versions this client speaks: (lowest usable, highest it asks for). Fetch stops at
# 12 because v13+ names topics by id; ListOffsets needs v2+ for the isolation level.
_SPOKEN = {ApiKey.METADATA: (1, 12), ApiKey.LIST_OFFSETS: (2, 9), ApiKey.FETCH: (4, 12),
           ApiKey.DESCRIBE_CONFIGS: (0, 4),
           # A transactional producer's (broker_sink.py): a transactional Produce needs v3+;
           # FindCoordinator by key type needs v1+ (v4+ batches keys); AddPartitionsToTxn
           # v4+ is a broker's.
           ApiKey.FIND_COORDINATOR: (1, 3), ApiKey.INIT_PRODUCER_ID: (0, 4),
           ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3), ApiKey.PRODUCE: (3, 9),
           ApiKey.END_TXN: (0, 3), ApiKey.LIST_TRANSACTIONS: (0, 1)}
_API_VERSIONS_V = 3
_MAX_FRAME = 1 << 30          # a larger length prefix is not a sane answer to our requests
_READ_SIZE = 1 << 18          # bytes asked of the socket at a time

# Error codes after which a new Metadata and another try may succeed (the leader moved,
# a broker is starting or stopping): Kafka's consumer retries the same ones.
RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
})


class BrokerError(KqliteError):
    """A broker answered with a Kafka error code (``code``, an ErrorCode), or could not be
    reached or understood (``code`` None)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code

    @property
    def retriable(self):
        return self.code is None or self.code in RETRIABLE


def raise_for(code, what):
    """BrokerError named as Kafka names ``code`` unless it is NONE."""
    if code:
        error = ErrorCode.for_code(code)
        raise BrokerError(f"{what}: the broker answered {error.name} ({code})", error)


def parse_servers(servers):
    """[(host, port)] of a ``host:port,host:port`` list (IPv6 hosts in brackets)."""
    out = []
    for item in str(servers).split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise BrokerError(f"kafka.bootstrap.servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise BrokerError("kafka.bootstrap.servers names no broker")
    return out


class _Connection:
    """One blocking connection to one broker: the socket, around the sans-I/O
    ClientConnection that makes its frames, reads the answers and keeps the broker's
    API versions."""

    def __init__(self, host, port, timeout, client_id):
        self.where = f"{host}:{port}"
        self.protocol = ClientConnection(client_id, peer=f"the broker at {self.where}",
                                         max_response_size=_MAX_FRAME)
        self._buffer = memoryview(bytearray(_READ_SIZE))
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise BrokerError(f"cannot connect to {self.where}: {exc}") from None
        try:
            self._negotiate()
        except BaseException:
            self.close()
            raise

    def _negotiate(self):
        version = _API_VERSIONS_V
        while version is not None:
            body = self.call(ApiKey.API_VERSIONS, version, {
                "client_software_name": "kqlite-spark", "client_software_version": "1"})
            try:
                version = self.protocol.negotiate(version, body)
            except ApiVersionsError as exc:
                raise BrokerError(str(exc), ErrorCode.for_code(exc.code)) from None

    def version(self, api_key):
        """The version to speak: the highest the broker serves within _SPOKEN's range."""
        try:
            return self.protocol.version_for(api_key, _SPOKEN[api_key])
        except NoCommonVersionError as exc:
            raise BrokerError(str(exc)) from None

    def call(self, api_key, version, body):
        """Send one request and return the decoded response body. A failure closes the
        connection: its next frame could no longer be matched to a request."""
        try:
            return self._exchange(api_key, version, body)
        except OSError as exc:
            failure = BrokerError(f"connection to {self.where} failed: {exc}")
        except (ProtocolError, ConnectionClosedError) as exc:
            failure = BrokerError(str(exc))
        except BrokerError as exc:
            failure = exc
        self.close()
        raise failure

    def _exchange(self, api_key, version, body):
        request = self.protocol.send_request(api_key, version, body)
        self._sock.sendall(request.frame)
        while True:
            got = self._sock.recv_into(self._buffer)
            if not got:
                raise BrokerError(f"the broker at {self.where} closed the connection")
            for response in self.protocol.receive_data(self._buffer[:got]):
                return response.body

    def close(self):
        self.protocol.close("closed by this client")
        try:
            self._sock.close()
        except OSError:
            pass


class KafkaClient:
    """Connections to the brokers of one cluster, and its Metadata as last asked."""

    def __init__(self, servers, timeout=30.0, client_id="kqlite-spark"):
        self.servers = servers
        self.bootstrap = parse_servers(servers)
        self.timeout = timeout
        self.client_id = client_id
        self._conns = {}         # node id (or ("bootstrap", i)) -> _Connection
        self.brokers = {}        # node id -> (host, port)
        self.topics = {}         # topic -> {partition: leader id}, or an error code
        self._leaders = {}       # (topic, partition) -> leader id

    # -- connections

    def _connect(self, key, host, port):
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = _Connection(host, port, self.timeout, self.client_id)
        return conn

    def drop(self, key):
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()

    def any_connection(self):
        """A connection to some broker: one already open, else the first that answers
        (known brokers, then the bootstrap list)."""
        if self._conns:
            return next(iter(self._conns.items()))
        errors = []
        candidates = list(self.brokers.items()) + \
            [(("bootstrap", i), hp) for i, hp in enumerate(self.bootstrap)]
        for key, (host, port) in candidates:
            try:
                return key, self._connect(key, host, port)
            except BrokerError as exc:
                errors.append(str(exc))
        raise BrokerError(f"cannot reach any broker of {self.servers}: " + "; ".join(errors))

    def node(self, node_id):
        if node_id not in self.brokers:
            raise BrokerError(f"Metadata names no broker {node_id}",
                              ErrorCode.LEADER_NOT_AVAILABLE)
        host, port = self.brokers[node_id]
        return self._connect(node_id, host, port)

    def call(self, key, conn, api_key, body):
        """conn.call at the negotiated version; a broken connection is dropped."""
        try:
            return conn.call(api_key, conn.version(api_key), body)
        except BrokerError as exc:
            if exc.code is None:
                self.drop(key)
            raise

    # -- metadata

    def refresh(self, topics=None):
        """Ask Metadata of ``topics`` (None: all) and remember brokers and leaders."""
        key, conn = self.any_connection()
        body = self.call(key, conn, ApiKey.METADATA, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False})
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
        for t in body["topics"]:
            name = t["name"]
            if t["error_code"]:
                self.topics[name] = ErrorCode.for_code(t["error_code"])
                continue
            self.topics[name] = {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
            for p in t["partitions"]:
                self._leaders[(name, p["partition_index"])] = p["leader_id"]
        return body

    def leader(self, topic, partition):
        """(node id, connection) of the partition's leader as Metadata last said."""
        tp = (topic, partition)
        if tp not in self._leaders:
            self.refresh([topic])
        leader = self._leaders.get(tp, -1)
        if leader < 0:
            raise BrokerError(f"{topic}-{partition} has no leader now",
                              ErrorCode.LEADER_NOT_AVAILABLE)
        return leader, self.node(leader)

    def forget(self, topic, partition, key=None):
        """After a leader or connection error: the next call asks Metadata again."""
        self._leaders.pop((topic, partition), None)
        if key is not None:
            self.drop(key)

    def retrying(self, what, operation, tps=()):
        """``operation()`` again after retriable errors, refreshing the leaders of
        ``tps``, until the timeout; the last error is raised with ``what`` in it."""
        deadline = time.monotonic() + self.timeout
        pause = 0.05
        while True:
            try:
                return operation()
            except BrokerError as exc:
                if not exc.retriable or time.monotonic() + pause > deadline:
                    raise BrokerError(f"{what}: {exc}", exc.code) from None
                for tp in tps:
                    self.forget(*tp)
                time.sleep(pause)
                pause = min(1.0, pause * 2)
                try:
                    self.refresh([t for t in {tp[0] for tp in tps}] or None)
                except BrokerError:
                    pass     # tried again at the next attempt, until the deadline

    def close(self):
        for key in list(self._conns):
            self.drop(key)
