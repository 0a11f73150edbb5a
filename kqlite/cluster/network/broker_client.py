"""The client side of one inter-broker connection, on asyncio.

Brokers of a cluster talk to each other with ordinary Kafka requests: a follower fetches
from its leader, the controller sends LeaderAndIsr / UpdateMetadata / StopReplica, a
leader sends AlterPartition. :class:`BrokerConnection` is one TCP connection to one broker
that carries such requests; the bytes are made and read by the project's sans-I/O codec
(``kqlite.protocol.encode_request`` / ``decode_response``), this module only moves them.

Theory of operation:

- **Pipelining.** Requests are written as soon as they are made, each with the next
  correlation id, and remembered in a FIFO of in-flight requests. Kafka answers the
  requests of one connection in the order they arrived, so the oldest in-flight request
  owns the next response frame; its correlation id must match, otherwise the stream is
  out of step and the connection is closed (as Kafka's ``NetworkClient`` does).
- **Timeouts close the connection.** A request that has had no answer within its timeout
  fails with :class:`BrokerRequestTimeoutError`, and the connection is closed, failing the
  requests behind it with :class:`BrokerDisconnectedError`. Waiting on would let a late
  answer arrive, and only closing guarantees that it is never taken for the answer to a
  later request.
- **Bounded frames.** A response whose length prefix exceeds ``max_response_size`` is
  refused before any of it is buffered, and the connection closed.
- **Records stay views.** ``records`` fields of a response (Fetch) are memoryview slices of
  the response frame, an immutable ``bytes`` object per frame: no copy, and usable as is
  by ``Log.append_batches``.
- **Version negotiation.** :meth:`BrokerConnection.negotiate_versions` asks the broker for
  its ApiVersions and keeps the table on the connection; :meth:`~BrokerConnection.version_for`
  then picks the highest version that the broker, the codec and the caller all know.

Every failure is a :class:`BrokerClientError` whose message names the broker and, when a
request was involved, the API, its version and correlation id.
"""

import asyncio
import collections
import logging
import struct

from ...errors import KqliteError
from ...protocol import API_NAMES, ErrorCode, ProtocolError, decode_response, encode_request
from ...protocol.schema import APIS

__all__ = ["BrokerConnection", "BrokerClientError", "BrokerConnectError",
           "BrokerDisconnectedError", "BrokerRequestTimeoutError",
           "BrokerResponseTooLargeError", "BrokerProtocolError", "UnsupportedVersionError",
           "DEFAULT_MAX_RESPONSE_SIZE", "api_label"]

log = logging.getLogger("kqlite.cluster")

# Kafka's socket.request.max.bytes: no broker sends a frame larger than it accepts.
DEFAULT_MAX_RESPONSE_SIZE = 104857600
API_VERSIONS = 18  # WIRE: Kafka-defined api key
PRODUCE = 0        # WIRE: Kafka-defined api key
_CORRELATION_MASK = 0x7FFFFFFF
_INT32 = struct.Struct(">i")


class BrokerClientError(KqliteError):
    """A request to another broker failed. ``broker`` names the peer, ``api`` the request
    (None for failures that concern no request, such as connecting)."""

    def __init__(self, message, broker=None, api=None):
        super().__init__(message)
        self.broker = broker
        self.api = api


class BrokerConnectError(BrokerClientError, ConnectionError):
    """The TCP connection to the broker could not be made (refused, unreachable, timeout)."""


class BrokerDisconnectedError(BrokerClientError, ConnectionError):
    """The connection closed (by the peer, by this side, or after another request's
    failure) while the request was in flight, or before it could be sent."""


class BrokerRequestTimeoutError(BrokerClientError, TimeoutError):
    """No response came within the request timeout; the connection was closed."""


class BrokerResponseTooLargeError(BrokerClientError):
    """A response frame was larger than the connection's ``max_response_size``."""


class BrokerProtocolError(BrokerClientError):
    """A response could not be decoded, or its correlation id did not match."""


class UnsupportedVersionError(BrokerClientError):
    """The broker, the codec and the caller share no version of the API."""


def api_label(api_key, version, correlation_id=None):
    """``"Fetch v12 (correlation id 7)"``: how errors and logs name a request."""
    name = API_NAMES.get(api_key, f"api key {api_key}")
    text = f"{name} v{version}"
    return text if correlation_id is None else f"{text} (correlation id {correlation_id})"


class _InFlight:
    __slots__ = ("api_key", "version", "correlation_id", "future", "timer")

    def __init__(self, api_key, version, correlation_id, future):
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.future = future
        self.timer = None

    @property
    def label(self):
        return api_label(self.api_key, self.version, self.correlation_id)


class BrokerConnection:
    """One connection to one broker; see the module docstring. Made by :meth:`connect`."""

    def __init__(self, reader, writer, *, host, port, broker_id=None, client_id="kqlite",
                 request_timeout=30.0, max_response_size=DEFAULT_MAX_RESPONSE_SIZE):
        self.host = host
        self.port = port
        self.broker_id = broker_id
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_response_size = max_response_size
        self.name = (f"broker {broker_id} at {host}:{port}" if broker_id is not None
                     else f"broker at {host}:{port}")
        self.api_versions = None  # {api_key: (min, max)} once negotiate_versions() ran
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._in_flight = collections.deque()
        self._next_correlation = 0
        self._error = None  # why the connection is closed, once it is
        self._read_task = self._loop.create_task(self._read_responses(),
                                                 name=f"kqlite-read-{host}:{port}")

    @classmethod
    async def connect(cls, host, port, *, broker_id=None, client_id="kqlite",
                      connect_timeout=10.0, request_timeout=30.0,
                      max_response_size=DEFAULT_MAX_RESPONSE_SIZE):
        """Open a connection; :class:`BrokerConnectError` if that fails within
        ``connect_timeout`` seconds. ``request_timeout`` is the default per request."""
        name = (f"broker {broker_id} at {host}:{port}" if broker_id is not None
                else f"broker at {host}:{port}")
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError:
            raise BrokerConnectError(f"cannot connect to {name}: no connection within "
                                     f"{connect_timeout} s", name) from None
        except OSError as exc:
            raise BrokerConnectError(f"cannot connect to {name}: {exc.strerror or exc}",
                                     name) from exc
        return cls(reader, writer, host=host, port=port, broker_id=broker_id,
                   client_id=client_id, request_timeout=request_timeout,
                   max_response_size=max_response_size)

    # -- state -------------------------------------------------------------------------------

    @property
    def closed(self):
        return self._error is not None

    @property
    def in_flight(self):
        """The number of requests sent and not yet answered."""
        return len(self._in_flight)

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self._in_flight)} in flight"
        return f"<BrokerConnection {self.name} {state}>"

    # -- requests ----------------------------------------------------------------------------

    async def request(self, api_key, version, body, *, timeout=None):
        """Send one request and return the decoded response body.

        Several calls may run at once: their requests are pipelined on the connection.
        ``timeout`` (seconds, default ``request_timeout``) bounds the wait for the answer.
        A Produce with ``acks=0`` gets no response from Kafka and returns None once written.
        Raises the :class:`BrokerClientError` subclasses; a body the codec cannot encode
        raises its ValueError/TypeError before anything is sent.
        """
        future = self.send(api_key, version, body, timeout=timeout)
        try:
            try:
                await self._writer.drain()
            except OSError as exc:
                # The read task notices the same loss; closing here makes it certain.
                self._abort(BrokerDisconnectedError(
                    f"connection to {self.name} lost while sending: {exc}", self.name))
            if future is None:
                if self._error is not None:
                    raise self._error_for(api_label(api_key, version))
                return None
            return await future
        except asyncio.CancelledError:
            # The answer, when it comes, is read and dropped so the stream stays in step.
            if future is not None:
                future.cancel()
            raise

    def send(self, api_key, version, body, *, timeout=None):
        """Write one request and return the Future of its response body (None for a
        Produce with ``acks=0``). Unlike :meth:`request` it does not wait for room in
        the socket buffer, so it suits callbacks; :meth:`request` is the usual call."""
        if self._error is not None:
            raise self._error_for(api_label(api_key, version))
        correlation_id = self._next_correlation
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        self._next_correlation = (correlation_id + 1) & _CORRELATION_MASK
        self._writer.write(frame)
        if api_key == PRODUCE and body.get("acks") == 0:
            return None
        entry = _InFlight(api_key, version, correlation_id, self._loop.create_future())
        wait = self.request_timeout if timeout is None else timeout
        if wait is not None:
            entry.timer = self._loop.call_later(wait, self._timed_out, entry, wait)
        self._in_flight.append(entry)
        return entry.future

    def _error_for(self, label):
        return BrokerDisconnectedError(f"{label} not sent: the connection to {self.name} is "
                                       f"closed ({self._error})", self.name, label)

    def _timed_out(self, entry, wait):
        if self._error is not None:
            return
        if not entry.future.done():
            entry.future.set_exception(BrokerRequestTimeoutError(
                f"{entry.label} to {self.name} had no response within {wait} s; "
                f"the connection is closed", self.name, entry.label))
        self._abort(BrokerDisconnectedError(
            f"connection to {self.name} closed after {entry.label} timed out", self.name))

    # -- versions ----------------------------------------------------------------------------

    async def negotiate_versions(self, *, timeout=None):
        """Ask the broker for its ApiVersions; keep and return ``{api_key: (min, max)}``.

        Sent at the codec's highest ApiVersions version. A broker that does not know that
        version answers UNSUPPORTED_VERSION with its own range (KIP-511); the request is
        then repeated at the highest version both know.
        """
        ours = APIS[API_VERSIONS].versions
        body = await self.request(API_VERSIONS, ours[1], self._api_versions_body(),
                                  timeout=timeout)
        if body["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {k["api_key"]: k["max_version"] for k in body["api_keys"]}
            retry = min(theirs.get(API_VERSIONS, 0), ours[1])
            body = await self.request(API_VERSIONS, retry, self._api_versions_body(),
                                      timeout=timeout)
        if body["error_code"] != ErrorCode.NONE:
            raise BrokerProtocolError(
                f"{self.name} answered ApiVersions with error {_error_name(body['error_code'])}",
                self.name, "ApiVersions")
        self.api_versions = {k["api_key"]: (k["min_version"], k["max_version"])
                             for k in body["api_keys"]}
        return self.api_versions

    def _api_versions_body(self):
        return {"client_software_name": "kqlite", "client_software_version": _version()}

    def version_for(self, api_key, versions=None):
        """The highest version of ``api_key`` that the broker advertises, the codec has a
        schema for and, if given, lies in the caller's ``versions`` (min, max).

        Requires :meth:`negotiate_versions`; raises :class:`UnsupportedVersionError` when
        the three share no version.
        """
        if self.api_versions is None:
            raise RuntimeError(f"version_for() before negotiate_versions() on {self.name}")
        name = API_NAMES.get(api_key, f"api key {api_key}")
        ranges = []
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersionError(f"{self.name} does not serve {name}",
                                          self.name, name)
        ranges.append(theirs)
        api = APIS.get(api_key)
        if api is None:
            raise UnsupportedVersionError(f"kqlite's codec has no schema for {name}",
                                          self.name, name)
        ranges.append(api.versions)
        if versions is not None:
            ranges.append(tuple(versions))
        low = max(r[0] for r in ranges)
        high = min(r[1] for r in ranges)
        if low > high:
            raise UnsupportedVersionError(
                f"no common version of {name}: {self.name} serves v{theirs[0]}-v{theirs[1]}, "
                f"the codec v{api.versions[0]}-v{api.versions[1]}"
                + (f", the caller asks v{versions[0]}-v{versions[1]}" if versions else ""),
                self.name, name)
        return high

    # -- responses ---------------------------------------------------------------------------

    async def _read_responses(self):
        reader = self._reader
        error = None
        try:
            while True:
                head = await reader.readexactly(4)
                size = _INT32.unpack(head)[0]
                if size < 4 or size > self.max_response_size:
                    raise self._bad_length(size)
                self._deliver(await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            error = BrokerDisconnectedError(f"connection closed by {self.name}", self.name)
        except OSError as exc:
            error = BrokerDisconnectedError(f"connection to {self.name} lost: {exc}", self.name)
        except BrokerClientError as exc:
            error = exc
        except asyncio.CancelledError:
            pass  # close() or _abort(): the reason is already recorded
        finally:
            if error is not None:
                self._abort(error)

    def _bad_length(self, size):
        """The error for a frame length this connection refuses; the oldest in-flight
        request, whose answer it would have been, fails with it."""
        entry = self._in_flight.popleft() if self._in_flight else None
        label = entry.label if entry is not None else "an unrequested response"
        if size < 4:
            error = BrokerProtocolError(f"{self.name} sent a frame of length {size} for "
                                        f"{label}", self.name, label)
        else:
            error = BrokerResponseTooLargeError(
                f"{self.name} sent a response of {size} bytes for {label}, above the limit "
                f"of {self.max_response_size} bytes", self.name, label)
        if entry is not None:
            _fail(entry, error)
        return error

    def _deliver(self, frame):
        correlation_id = _INT32.unpack_from(frame, 0)[0]
        if not self._in_flight:
            raise BrokerProtocolError(f"{self.name} sent a response (correlation id "
                                      f"{correlation_id}) with no request in flight", self.name)
        entry = self._in_flight.popleft()
        if entry.timer is not None:
            entry.timer.cancel()
        if correlation_id != entry.correlation_id:
            error = BrokerProtocolError(
                f"{self.name} answered with correlation id {correlation_id} where "
                f"{entry.label} was next", self.name, entry.label)
            _fail(entry, error)
            raise error
        if entry.future.done():
            return  # the caller gave up waiting; the frame only kept the stream in step
        try:
            _, body = decode_response(entry.api_key, entry.version, frame)
        except ProtocolError as exc:
            error = BrokerProtocolError(f"undecodable response from {self.name} to "
                                        f"{entry.label}: {exc}", self.name, entry.label)
            _fail(entry, error)
            raise error from exc
        entry.future.set_result(body)

    # -- closing -----------------------------------------------------------------------------

    def _abort(self, error):
        """Close now. The requests still in flight fail with BrokerDisconnectedError
        giving ``error`` as the reason (the request ``error`` concerns has its own)."""
        if self._error is not None:
            return
        self._error = error
        log.debug("connection to %s closed: %s", self.name, error)
        in_flight, self._in_flight = self._in_flight, collections.deque()
        for entry in in_flight:
            _fail(entry, BrokerDisconnectedError(
                f"{entry.label} to {self.name} failed: {error}", self.name, entry.label))
        self._writer.close()
        if asyncio.current_task() is not self._read_task:
            self._read_task.cancel()

    def abort(self, reason="closed by this broker"):
        """Close now, without waiting (usable from callbacks): requests still in flight
        fail with :class:`BrokerDisconnectedError` giving ``reason``. Idempotent."""
        self._abort(BrokerDisconnectedError(f"connection to {self.name} closed: {reason}",
                                            self.name))

    async def close(self):
        """Close the connection and wait until it is closed; requests still in flight
        fail with :class:`BrokerDisconnectedError`. Idempotent."""
        self.abort()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass  # the peer had already reset the connection: closed either way
        if asyncio.current_task() is not self._read_task:
            await asyncio.gather(self._read_task, return_exceptions=True)


def _fail(entry, error):
    if entry.timer is not None:
        entry.timer.cancel()
    if not entry.future.done():
        entry.future.set_exception(error)


def _error_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kqlite")
    except PackageNotFoundError:
        return "unknown"
