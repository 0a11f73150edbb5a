"""The client side of one inter-broker connection, on asyncio.

Brokers of a cluster talk to each other with ordinary Kafka requests: a follower fetches
from its leader, the controller sends LeaderAndIsr / UpdateMetadata / StopReplica, a
leader sends AlterPartition. :class:`BrokerConnection` is one TCP connection to one broker
that carries such requests. Everything about the exchange but the socket -- request
frames and correlation ids, the in-flight FIFO, response framing and its limits, version
negotiation -- is the sans-I/O :class:`kqlite.protocol.ClientConnection` (the Spark
reader's connections use the same one); this module moves its bytes, and adds what needs
a clock and an event loop.

Theory of operation:

- **Pipelining.** Requests are written as soon as they are made. Kafka answers the
  requests of one connection in the order they arrived, so the oldest in-flight request
  owns the next response frame; a frame that answers another request closes the
  connection (as Kafka's ``NetworkClient`` does), and so does one that cannot be decoded.
  Each request's Future and timer ride on its ``ClientRequest.context``.
- **Timeouts close the connection.** A request that has had no answer within its timeout
  fails with :class:`BrokerRequestTimeoutError`, and the connection is closed, failing the
  requests behind it with :class:`BrokerDisconnectedError`. Waiting on would let a late
  answer arrive, and only closing guarantees that it is never taken for the answer to a
  later request.
- **Cancelled callers.** A caller cancelled while it waits cannot take its request back:
  the answer, when it comes, is read (unless the timeout closes the connection first) and
  dropped without being decoded, so the stream stays in step.
- **Bounded frames.** A response whose length prefix exceeds ``max_response_size`` is
  refused before any of it is buffered, and the connection closed.
- **Records stay views.** ``records`` fields of a response (Fetch) are memoryview slices of
  the response frame, a buffer of its own per frame: no copy, and usable as is by
  ``Log.append_batches``.
- **Version negotiation.** :meth:`BrokerConnection.negotiate_versions` asks the broker for
  its ApiVersions and keeps the table on the connection; :meth:`~BrokerConnection.version_for`
  then picks the highest version that the broker, the codec and the caller all know.
- **Security.** A connection to a TLS listener (SSL, SASL_SSL) is made with the client
  context given (``ssl``), which checks the broker's certificate and, unless the context
  says otherwise, that it names the host dialled. With ``sasl`` (a function making a fresh
  mechanism client) the connection authenticates before anything else is sent: ApiVersions,
  SaslHandshake, SaslAuthenticate (sasl.py); a refusal is a :class:`BrokerAuthenticationError`
  and the connection is closed. A session with a lifetime (KIP-368) is re-authenticated on
  the same connection before it ends: requests made meanwhile wait, and those in flight
  are answered first, since the broker reads the exchange's frames before any other
  request. A failed re-authentication closes the connection.

Every failure is a :class:`BrokerClientError` whose message names the broker and, when a
request was involved, the API, its version and correlation id.
"""

import asyncio
import logging
import random

from ...errors import KqliteError
from ...protocol import ApiKey, ClientConnection
from ...protocol.client import (DEFAULT_MAX_RESPONSE_SIZE, ApiVersionsError,
                                NoCommonVersionError, ResponseError, ResponseTooLargeError,
                                api_label)
from ...protocol.schema import APIS
from .sasl import AUTHENTICATE_VERSIONS, SaslExchangeError, authenticate, reauthentication_delay

__all__ = ["BrokerConnection", "BrokerClientError", "BrokerConnectError",
           "BrokerAuthenticationError", "BrokerDisconnectedError", "BrokerRequestTimeoutError",
           "BrokerResponseTooLargeError", "BrokerProtocolError", "UnsupportedVersionError"]

log = logging.getLogger("kqlite.cluster")

_READ_SIZE = 1 << 18   # asyncio's socket transport reads at most 256 KiB at a time


class BrokerClientError(KqliteError):
    """A request to another broker failed. ``broker`` names the peer, ``api`` the request
    (None for failures that concern no request, such as connecting)."""

    def __init__(self, message, broker=None, api=None):
        super().__init__(message)
        self.broker = broker
        self.api = api


class BrokerConnectError(BrokerClientError, ConnectionError):
    """The TCP connection to the broker could not be made (refused, unreachable, timeout)."""


class BrokerAuthenticationError(BrokerClientError):
    """The broker refused this connection's SASL authentication (or the exchange could not
    complete); the connection was closed."""


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


class _Waiter:
    """A ClientRequest's context here: the Future its caller awaits and its timeout."""
    __slots__ = ("future", "timer")

    def __init__(self, future, timer):
        self.future = future
        self.timer = timer


class BrokerConnection:
    """One connection to one broker; see the module docstring. Made by :meth:`connect`."""

    def __init__(self, reader, writer, *, host, port, broker_id=None, client_id="kqlite",
                 request_timeout=30.0, max_response_size=DEFAULT_MAX_RESPONSE_SIZE,
                 rng=random):
        self.host = host
        self.port = port
        self.broker_id = broker_id
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_response_size = max_response_size
        self.name = (f"broker {broker_id} at {host}:{port}" if broker_id is not None
                     else f"broker at {host}:{port}")
        self._protocol = ClientConnection(client_id, peer=self.name,
                                          max_response_size=max_response_size)
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._read_task = self._loop.create_task(self._read_responses(),
                                                 name=f"kqlite-read-{host}:{port}")
        self._random = rng
        self._sasl = None            # makes the mechanism client of each (re-)authentication
        self.authentications = 0     # SASL exchanges completed on this connection
        self._reauth_timer = None
        self._reauth_task = None
        self._reauthenticating = None    # a Future while a re-authentication holds requests
        self._drained = None             # set when no request is in flight (re-auth waits)

    @classmethod
    async def connect(cls, host, port, *, broker_id=None, client_id="kqlite",
                      connect_timeout=10.0, request_timeout=30.0,
                      max_response_size=DEFAULT_MAX_RESPONSE_SIZE, ssl=None, sasl=None):
        """Open a connection; :class:`BrokerConnectError` if that fails within
        ``connect_timeout`` seconds. ``request_timeout`` is the default per request.
        ``ssl``: the client TLS context of a TLS listener; ``sasl``: a function returning
        a new ``MechanismClient`` (kqlite/server/authentication/sasl_client.py), to
        authenticate with before returning (:class:`BrokerAuthenticationError` if that
        fails, within ``connect_timeout`` too)."""
        name = (f"broker {broker_id} at {host}:{port}" if broker_id is not None
                else f"broker at {host}:{port}")
        tls = {} if ssl is None else {"ssl": ssl, "server_hostname": host,
                                      "ssl_handshake_timeout": connect_timeout}
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port, **tls)
        except TimeoutError:
            raise BrokerConnectError(f"cannot connect to {name}: no connection within "
                                     f"{connect_timeout} s", name) from None
        except OSError as exc:
            raise BrokerConnectError(f"cannot connect to {name}: "
                                     f"{exc.strerror or exc}",
                                     name) from exc
        conn = cls(reader, writer, host=host, port=port, broker_id=broker_id,
                   client_id=client_id, request_timeout=request_timeout,
                   max_response_size=max_response_size)
        if sasl is not None:
            try:
                async with asyncio.timeout(connect_timeout):
                    await conn.authenticate(sasl)
            except BaseException as exc:
                conn.abort(f"authentication did not complete: {exc or type(exc).__name__}")
                if isinstance(exc, TimeoutError):
                    raise BrokerAuthenticationError(
                        f"cannot authenticate to {name}: no answer within {connect_timeout} s",
                        name) from None
                raise
        return conn

    # -- state -------------------------------------------------------------------------------

    @property
    def closed(self):
        return self._protocol.closed

    @property
    def in_flight(self):
        """The number of requests sent and not yet answered."""
        return self._protocol.in_flight

    @property
    def api_versions(self):
        """``{api_key: (min, max)}`` once :meth:`negotiate_versions` ran, else None."""
        return self._protocol.api_versions

    def __repr__(self):
        state = "closed" if self.closed else f"{self.in_flight} in flight"
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
        while self._reauthenticating is not None:
            await asyncio.shield(self._reauthenticating)
        request, future = self._send(api_key, version, body, timeout)
        try:
            try:
                await self._writer.drain()
            except OSError as exc:
                # The read task notices the same loss; closing here makes it certain.
                self._abort(BrokerDisconnectedError(
                    f"connection to {self.name} lost while sending: {exc}", self.name))
            if future is None:
                if self.closed:
                    raise self._not_sent(api_label(api_key, version))
                return None
            return await future
        except asyncio.CancelledError:
            if future is not None:
                future.cancel()
                self._protocol.cancel(request)
            raise

    def send(self, api_key, version, body, *, timeout=None):
        """Write one request and return the Future of its response body (None for a
        Produce with ``acks=0``). Unlike :meth:`request` it does not wait for room in
        the socket buffer, so it suits callbacks; :meth:`request` is the usual call.
        During a re-authentication the request is written after it, and the Future is
        that of :meth:`request`."""
        if self._reauthenticating is not None:
            return self._loop.create_task(self.request(api_key, version, body,
                                                       timeout=timeout))
        return self._send(api_key, version, body, timeout)[1]

    def _send(self, api_key, version, body, timeout):
        """(the ClientRequest, the Future of its answer or None when none comes)."""
        if self.closed:
            raise self._not_sent(api_label(api_key, version))
        request = self._protocol.send_request(api_key, version, body)
        future = None
        if request.expects_response:
            future = self._loop.create_future()
            wait = self.request_timeout if timeout is None else timeout
            timer = (self._loop.call_later(wait, self._timed_out, request, wait)
                     if wait is not None else None)
            request.context = _Waiter(future, timer)
        self._writer.write(request.frame)
        return request, future

    def _not_sent(self, label):
        return BrokerDisconnectedError(f"{label} not sent: the connection to {self.name} is "
                                       f"closed ({self._protocol.close_reason})",
                                       self.name, label)

    def _timed_out(self, request, wait):
        if self.closed:
            return
        if not request.context.future.done():
            request.context.future.set_exception(BrokerRequestTimeoutError(
                f"{request.label} to {self.name} had no response within {wait} s; "
                f"the connection is closed", self.name, request.label))
        self._abort(BrokerDisconnectedError(
            f"connection to {self.name} closed after {request.label} timed out", self.name))

    # -- authentication ----------------------------------------------------------------------

    async def authenticate(self, sasl):
        """Authenticate with a new mechanism client from ``sasl()`` (see :meth:`connect`),
        and re-authenticate before the session's lifetime ends, as often as it has one."""
        self._sasl = sasl
        if self.api_versions is None:
            await self.negotiate_versions()
        await self._exchange()

    async def _exchange(self):
        client = self._sasl()
        try:
            lifetime_ms = await authenticate(
                self._request_now, client,
                self.version_for(ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSIONS))
        except SaslExchangeError as exc:
            raise BrokerAuthenticationError(f"cannot authenticate to {self.name}: {exc}",
                                            self.name) from None
        self.authentications += 1
        delay = reauthentication_delay(lifetime_ms, self._random)
        if delay is not None and not self.closed:
            self._reauth_timer = self._loop.call_later(delay, self._begin_reauthentication)
        log.debug("authenticated to %s with %s (session lifetime %s ms)", self.name,
                  client.mechanism, lifetime_ms or "unlimited")

    async def _request_now(self, api_key, version, body):
        """:meth:`request` past the re-authentication gate (the exchange's own)."""
        _request, future = self._send(api_key, version, body, None)
        await self._writer.drain()
        return await future

    def _begin_reauthentication(self):
        self._reauth_timer = None
        if self.closed or self._reauthenticating is not None:
            return
        self._reauthenticating = self._loop.create_future()
        self._reauth_task = self._loop.create_task(
            self._reauthenticate(), name=f"kqlite-reauthenticate-{self.host}:{self.port}")

    async def _reauthenticate(self):
        gate = self._reauthenticating
        try:
            if self.in_flight:
                self._drained = asyncio.Event()
                await self._drained.wait()
            if not self.closed:
                await self._exchange()
        except Exception as exc:       # noqa: BLE001 -- any failure ends the connection
            log.warning("re-authentication to %s failed; closing the connection: %s",
                        self.name, exc)
            self.abort(f"re-authentication failed: {exc}")
        finally:
            self._drained = None
            self._reauthenticating = None
            gate.set_result(None)

    # -- versions ----------------------------------------------------------------------------

    async def negotiate_versions(self, *, timeout=None):
        """Ask the broker for its ApiVersions; keep and return ``{api_key: (min, max)}``.

        Sent at the codec's highest ApiVersions version. A broker that does not know that
        version answers UNSUPPORTED_VERSION with its own range (KIP-511); the request is
        then repeated at the highest version both know.
        """
        version = APIS[ApiKey.API_VERSIONS].versions[1]
        while version is not None:
            body = await self.request(ApiKey.API_VERSIONS, version, _api_versions_body(),
                                      timeout=timeout)
            try:
                version = self._protocol.negotiate(version, body)
            except ApiVersionsError as exc:
                raise BrokerProtocolError(str(exc), self.name, "ApiVersions") from None
        return self.api_versions

    def version_for(self, api_key, versions=None):
        """The highest version of ``api_key`` that the broker advertises, the codec has a
        schema for and, if given, lies in the caller's ``versions`` (min, max).

        Requires :meth:`negotiate_versions`; raises :class:`UnsupportedVersionError` when
        the three share no version.
        """
        try:
            return self._protocol.version_for(api_key, versions)
        except NoCommonVersionError as exc:
            raise UnsupportedVersionError(str(exc), self.name, exc.api) from None

    # -- responses ---------------------------------------------------------------------------

    async def _read_responses(self):
        reader = self._reader
        try:
            while data := await reader.read(_READ_SIZE):
                _deliver(self._protocol.receive_data(data))
                if self._drained is not None and not self._protocol.in_flight:
                    self._drained.set()
            error = BrokerDisconnectedError(f"connection closed by {self.name}", self.name)
        except OSError as exc:
            error = BrokerDisconnectedError(f"connection to {self.name} lost: {exc}", self.name)
        except ResponseError as exc:
            # The protocol closed itself: the answers before the bad frame are good, the
            # request the frame concerned fails with the reason, the rest as disconnected.
            _deliver(exc.responses)
            error = self._refusal(exc)
            if exc.request is not None:
                _fail(exc.request, error)
            self._shut(error, exc.unanswered)
            return
        except asyncio.CancelledError:
            return  # close() or _abort(): the reason is already recorded
        self._abort(error)

    def _refusal(self, exc):
        label = exc.request.label if exc.request is not None else None
        kind = (BrokerResponseTooLargeError if isinstance(exc, ResponseTooLargeError)
                else BrokerProtocolError)
        return kind(str(exc), self.name, label)

    # -- closing -----------------------------------------------------------------------------

    def _abort(self, error):
        """Close now. The requests still in flight fail with BrokerDisconnectedError
        giving ``error`` as the reason (the request ``error`` concerns has its own)."""
        if self.closed:
            return
        self._shut(error, self._protocol.close(error))

    def _shut(self, error, unanswered):
        log.debug("connection to %s closed: %s", self.name, error)
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        if self._drained is not None:
            self._drained.set()         # a re-authentication waiting finds it closed
        for request in unanswered:
            _fail(request, BrokerDisconnectedError(
                f"{request.label} to {self.name} failed: {error}", self.name, request.label))
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


def _deliver(responses):
    """Each answer to the Future waiting for it; one whose caller gave up is dropped."""
    for response in responses:
        waiter = response.request.context
        if waiter.timer is not None:
            waiter.timer.cancel()
        if response.body is not None and not waiter.future.done():
            waiter.future.set_result(response.body)


def _fail(request, error):
    waiter = request.context
    if waiter.timer is not None:
        waiter.timer.cancel()
    if not waiter.future.done():
        waiter.future.set_exception(error)


def _api_versions_body():
    return {"client_software_name": "kqlite", "client_software_version": _version()}


def _version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kqlite")
    except PackageNotFoundError:
        return "unknown"
