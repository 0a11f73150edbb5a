"""One pipelined connection per broker, for requests that need no order among them (the
transaction coordinator's WriteTxnMarkers, a partition leader's AddPartitionsToTxn
verifications), as Kafka's InterBrokerSendThreads keep a NetworkClient of their own.

Theory of operation. :class:`PeerConnections` holds at most one
:class:`~kqlite.cluster.network.broker_client.BrokerConnection` per broker id, opened on
the first request to it (ApiVersions negotiated once per connection) and shared by every
request to that broker: they are pipelined, not queued behind each other as a
:class:`~kqlite.cluster.network.channels.BrokerChannel` queues the controller's. Where a
broker is, is asked of ``locate(broker_id)`` at every request; a broker that moved gets a
new connection, one that cannot be located is :class:`UnknownBrokerError`. A request that
fails (no connection, a lost connection, a timeout) raises the
:class:`~kqlite.cluster.network.broker_client.BrokerClientError` and is not sent again:
its caller retries as its own rules say (a marker is sent again after the coordinator's
backoff, a verification is answered NETWORK_EXCEPTION). A connection closed by a failure
is replaced at the next request. Callers racing to connect to one broker share one
attempt.
"""

import asyncio
import logging

from .broker_client import BrokerClientError
from .channels import UnknownBrokerError

__all__ = ["PeerConnections"]

log = logging.getLogger("kqlite.cluster")


class PeerConnections:
    """See the module docstring. ``locate(broker_id)``: ``(host, port)`` or None;
    ``connector(host, port, **options)``: opens an authenticated BrokerConnection (the
    inter-broker listener's ``connect``)."""

    def __init__(self, locate, connector, *, client_id, connect_timeout=10.0,
                 request_timeout=30.0):
        self._locate = locate
        self._connector = connector
        self._options = {"client_id": client_id, "connect_timeout": connect_timeout,
                         "request_timeout": request_timeout}
        self._connections = {}     # broker id -> (endpoint, BrokerConnection)
        self._connecting = {}      # broker id -> (endpoint, the task opening it)
        self._closed = False

    async def request(self, broker_id, api_key, versions, body, *, timeout=None):
        """Send one request to ``broker_id`` at the highest version of ``versions`` (min,
        max) both sides know; its response body."""
        conn = await self._connection(broker_id)
        return await conn.request(api_key, conn.version_for(api_key, versions), body,
                                  timeout=timeout)

    async def _connection(self, broker_id):
        if self._closed:
            raise UnknownBrokerError("the inter-broker connections are closed",
                                     f"broker {broker_id}")
        endpoint = self._locate(broker_id)
        if endpoint is None:
            raise UnknownBrokerError(f"broker {broker_id} is not a live broker",
                                     f"broker {broker_id}")
        held = self._connections.get(broker_id)
        if held is not None:
            if held[0] == endpoint and not held[1].closed:
                return held[1]
            del self._connections[broker_id]
            held[1].abort("the broker moved, or the connection failed")
        pending = self._connecting.get(broker_id)
        if pending is None or pending[0] != endpoint:
            task = asyncio.get_running_loop().create_task(self._open(broker_id, endpoint))
            pending = self._connecting[broker_id] = (endpoint, task)
        try:
            return await asyncio.shield(pending[1])
        finally:
            if pending[1].done() and self._connecting.get(broker_id) is pending:
                del self._connecting[broker_id]

    async def _open(self, broker_id, endpoint):
        conn = await self._connector(*endpoint, broker_id=broker_id, **self._options)
        try:
            await conn.negotiate_versions()
        except BaseException:
            await conn.close()
            raise
        if self._closed:
            await conn.close()
            raise UnknownBrokerError("the inter-broker connections are closed",
                                     f"broker {broker_id}")
        self._connections[broker_id] = (endpoint, conn)
        return conn

    async def close(self):
        """Close every connection; requests in flight fail."""
        self._closed = True
        tasks = [task for _endpoint, task in self._connecting.values()]
        self._connecting.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        connections = [conn for _endpoint, conn in self._connections.values()]
        self._connections.clear()
        for conn in connections:
            try:
                await conn.close()
            except (BrokerClientError, OSError) as exc:
                log.debug("closing %r: %s", conn, exc)
