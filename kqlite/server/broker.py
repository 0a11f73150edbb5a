"""The asyncio broker: sockets in, kqlite.protocol requests out, handlers, responses back.

One task per connection reads bytes, feeds them to a sans-I/O
``ServerConnection`` and handles each request in order (Kafka processes one
request per connection at a time, which also keeps responses in order). A
malformed frame or an oversized length prefix closes only that connection.
Fetch responses carry ``FileRegion`` chunks that are written with sendfile.

The event loop thread does sockets, the codec and sendfile only: handlers reach the
data through the replica manager (``replicas``: partitions, topics, delayed
operations), whose storage calls run in ``io_threads`` storage threads, so a large
Fetch or a slow fsync on one connection never holds up the others.
"""

import asyncio
import logging
import os
import socket
import time

from ..db import Database
from ..protocol import API_NAMES, ErrorCode, FileRegion, ProtocolError, ServerConnection
from .coordinator import GroupCoordinator
from .handlers import HANDLERS
from .metrics import Metrics
from .producer_ids import ProducerIdAllocator
from .replica_manager import ReplicaManager
from .sendfile import send_region
from .storage_io import DEFAULT_IO_THREADS, StorageExecutor

__all__ = ["Broker"]

log = logging.getLogger("kqlite.server")


class Broker:
    """A Kafka-protocol broker over one kqlite data dir."""

    def __init__(self, data_dir, host="127.0.0.1", port=9092, *, broker_id=0,
                 advertised_host=None, max_request_size=104857600, auto_create_topics=True,
                 default_partitions=1, topic_defaults=None, metrics_port=None,
                 group_initial_rebalance_delay_ms=300, io_threads=DEFAULT_IO_THREADS, fs=None):
        # ``fs``: the storage file-system seam (tests inject faults and blocking calls).
        self.db = Database(data_dir, topic_defaults, auto_create_topics=False,
                           retention_check_interval_ms=300000, fs=fs)
        self.host = host
        self.port = port
        self.broker_id = broker_id
        self.advertised_host = advertised_host or host
        self.max_request_size = max_request_size
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self.cluster_id = self._cluster_id()
        self.metrics = Metrics(self)
        self.metrics_port = metrics_port
        self.coordinator = GroupCoordinator(self, group_initial_rebalance_delay_ms / 1000.0)
        self.producer_ids = ProducerIdAllocator(self.db.path)
        self.io = StorageExecutor(io_threads)
        self.replicas = ReplicaManager(self.db, self.io, broker_id=broker_id,
                                       default_partitions=default_partitions)
        self._server = None
        self._metrics_server = None
        self._connections = set()
        self._stopping = False

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

    async def start(self):
        self.replicas.start()
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.metrics_port is not None:
            self._metrics_server = await self.metrics.start(self.host, self.metrics_port)
        self.coordinator.start()
        log.info("kqlite broker %d serving %s on %s:%d", self.broker_id, self.db.path,
                 self.host, self.port)

    async def stop(self, grace=10.0):
        """Stop accepting, let in-flight requests finish, then flush and close the data."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        await self.replicas.stop()   # waiting fetches answer now
        await self.coordinator.stop()  # so do JoinGroups waiting out a rebalance
        deadline = time.monotonic() + grace
        while any(c.busy for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.writer.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.io.shutdown)
        # Flushes every log and writes the clean-shutdown marker.
        await loop.run_in_executor(None, self.db.close)
        log.info("kqlite broker stopped cleanly")

    # -- Connections --------------------------------------------------------------------------

    async def _serve(self, reader, writer):
        conn = _Connection(self, reader, writer)
        self._connections.add(conn)
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)


class _Connection:
    def __init__(self, broker, reader, writer):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.codec = ServerConnection(max_request_size=broker.max_request_size)
        self.peer = writer.get_extra_info("peername")
        self.busy = False
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host = self.peer[0] if self.peer else "unknown"

    async def run(self):
        metrics = self.broker.metrics
        metrics.connections += 1
        try:
            while not self.broker._stopping:
                data = await self.reader.read(1 << 16)
                if not data:
                    return
                try:
                    requests = self.codec.receive_data(data)
                except ProtocolError as exc:
                    log.warning("closing connection from %s: %s", self.peer, exc)
                    metrics.protocol_errors += 1
                    return
                for request in requests:
                    self.busy = True
                    try:
                        await self._handle(request)
                    finally:
                        self.busy = False
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("connection from %s ended: %s", self.peer, exc)
        except Exception:
            log.exception("connection from %s failed", self.peer)
        finally:
            metrics.connections -= 1
            self.writer.close()

    async def _handle(self, request):
        started = time.perf_counter()
        name = API_NAMES.get(request.api_key, str(request.api_key))
        handler = HANDLERS.get(request.api_key)
        if request.unsupported or handler is None:
            body, version = _unsupported(request)
            if body is None:
                log.warning("unsupported request %s v%d from client %r at %s; closing the "
                            "connection (not listed in ApiVersions)", name,
                            request.api_version, request.client_id, self.peer)
                self.broker.metrics.protocol_errors += 1
                raise ConnectionError("unsupported request")
            await self._send(self.codec.respond(request, body, version=version))
            return
        response = await handler(self.broker, self, request)
        if response is not None:  # None: acks=0 produce, no response is sent
            await self._send(self.codec.respond(request, response))
        self.broker.metrics.observe(name, time.perf_counter() - started, request.size)

    async def _send(self, chunks):
        sent = 0
        try:
            for chunk in chunks:
                if isinstance(chunk, FileRegion):
                    sent += await send_region(self.writer, chunk.fd, chunk.offset, chunk.length)
                else:
                    self.writer.write(chunk)
                    sent += len(chunk)
            await self.writer.drain()
        finally:
            for chunk in chunks:  # fetch regions hold duplicated descriptors
                if isinstance(chunk, FileRegion):
                    self.broker.replicas.regions.close(chunk)
            self.broker.metrics.bytes_out += sent


def _unsupported(request):
    """The reply to an API or version kqlite has no schema for: ApiVersions answers in v0
    with UNSUPPORTED_VERSION and the supported list (so the client retries with a version
    both know). For anything else no correct response layout is known, so the connection
    is closed, as Apache Kafka does; ApiVersions never lists such requests. (SASL, ACL and
    transaction requests do have schemas and get error answers: handlers/refused.py.)"""
    from ..protocol import SUPPORTED
    if request.api_key == 18:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (lo, hi) in sorted(SUPPORTED.items())]}, 0
    return None, None
