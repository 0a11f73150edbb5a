"""A small synchronous Kafka client for the source's reads through a broker: Metadata,
ListOffsets, Fetch and DescribeConfigs over blocking sockets, encoded and decoded by
kqlite's sans-I/O codec (``kqlite.protocol``).

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
import struct
import time

from ..errors import KqliteError
from ..protocol import ErrorCode, ProtocolError, decode_response, encode_request

__all__ = ["KafkaClient", "BrokerError", "RETRIABLE", "METADATA", "LIST_OFFSETS", "FETCH",
           "DESCRIBE_CONFIGS"]

API_VERSIONS, METADATA, LIST_OFFSETS, FETCH, DESCRIBE_CONFIGS = 18, 3, 2, 1, 32  # WIRE: keys

# The versions this client speaks: (lowest usable, highest it asks for). Fetch stops at
# 12 because v13+ names topics by id; ListOffsets needs v2+ for the isolation level.
_SPOKEN = {METADATA: (1, 12), LIST_OFFSETS: (2, 9), FETCH: (4, 12), DESCRIBE_CONFIGS: (0, 4)}
_API_VERSIONS_V = 3
_MAX_FRAME = 1 << 30          # a larger length prefix is not a sane answer to our requests
_LEN = struct.Struct(">i")

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
    """One blocking connection to one broker, with the API versions it serves."""

    def __init__(self, host, port, timeout, client_id):
        self.where = f"{host}:{port}"
        self.client_id = client_id
        self._timeout = timeout
        self._next_id = 0
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise BrokerError(f"cannot connect to {self.where}: {exc}") from None
        try:
            self.versions = self._negotiate()
        except BaseException:
            self.close()
            raise

    def _negotiate(self):
        body = self.call(API_VERSIONS, _API_VERSIONS_V, {
            "client_software_name": "kqlite-spark", "client_software_version": "1"})
        # An UNSUPPORTED_VERSION answer still lists the broker's APIs (KIP-511).
        if body["error_code"] not in (0, ErrorCode.UNSUPPORTED_VERSION):
            raise_for(body["error_code"], f"ApiVersions at {self.where}")
        served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        chosen = {}
        for key, (low, high) in _SPOKEN.items():
            if key not in served:
                continue
            top = min(high, served[key][1])
            if top >= max(low, served[key][0]):
                chosen[key] = top
        return chosen

    def version(self, api_key, name):
        if api_key not in self.versions:
            lo, hi = _SPOKEN[api_key]
            raise BrokerError(f"the broker at {self.where} serves no {name} version in "
                              f"{lo}-{hi}, which this client needs")
        return self.versions[api_key]

    def call(self, api_key, version, body):
        """Send one request and return the decoded response body."""
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        correlation = self._next_id
        frame = encode_request(api_key, version, correlation, self.client_id, body)
        try:
            self._sock.sendall(frame)
            size = _LEN.unpack(self._read(4))[0]
            if not 4 <= size <= _MAX_FRAME:
                raise BrokerError(f"the broker at {self.where} sent a frame of {size} bytes")
            data = self._read(size)
        except OSError as exc:
            raise BrokerError(f"connection to {self.where} failed: {exc}") from None
        got = _LEN.unpack_from(data)[0]
        if got != correlation:
            raise BrokerError(f"the broker at {self.where} answered request {got} to "
                              f"request {correlation}")
        try:
            return decode_response(api_key, version, data)[1]
        except ProtocolError as exc:
            raise BrokerError(f"undecodable answer from {self.where}: {exc}") from None

    def _read(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if not k:
                raise BrokerError(f"the broker at {self.where} closed the connection")
            got += k
        return buf

    def close(self):
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

    def call(self, key, conn, api_key, name, body):
        """conn.call at the negotiated version; a broken connection is dropped."""
        try:
            return conn.call(api_key, conn.version(api_key, name), body)
        except BrokerError as exc:
            if exc.code is None:
                self.drop(key)
            raise

    # -- metadata

    def refresh(self, topics=None):
        """Ask Metadata of ``topics`` (None: all) and remember brokers and leaders."""
        key, conn = self.any_connection()
        body = self.call(key, conn, METADATA, "Metadata", {
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
