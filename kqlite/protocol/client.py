"""The client side of a connection (sans-I/O, the twin of connection.ServerConnection).

Theory of operation: a Kafka client writes request frames on a connection and reads the
response frames back. :class:`ClientConnection` holds all of that exchange except the
socket, so the inter-broker client (asyncio) and the Spark reader (blocking sockets) share
one implementation and differ only in how they move bytes and wait.

- **Requests out.** :meth:`~ClientConnection.send_request` encodes a frame (length prefix,
  the request header version the API version calls for, the body) with the connection's
  client id and the next correlation id, and returns a :class:`ClientRequest` whose
  ``frame`` the caller writes. Correlation ids count up from 0 and wrap within the
  non-negative int32 range. A body the codec cannot encode raises before an id is used.
- **The in-flight FIFO.** Kafka's protocol guide: "The server guarantees that on a single
  TCP connection, requests will be processed in the order they are sent and responses will
  return in that order as well." The oldest unanswered request therefore owns the next
  response frame. A Produce with ``acks=0`` is the one request Kafka never answers, so it
  never enters the FIFO (``expects_response`` is False).
- **Responses in.** :meth:`~ClientConnection.receive_data` takes the bytes that arrived, in
  any chunking, and returns the :class:`ClientResponse` s they complete, decoded, in order.
  A length prefix below 4 (no room for a correlation id) or above ``max_response_size`` is
  refused as soon as its four bytes are in, before anything of that size is buffered. Each
  frame is read into a buffer of its own that is never reused, so ``records`` fields stay
  memoryviews of it, usable as they are by ``Log.append_batches``.
- **Cancelled requests.** A caller that stops waiting for an answer cannot take the request
  back: :meth:`~ClientConnection.cancel` marks it, and its answer, when it comes, is framed
  and checked to keep the stream in step but not decoded (its ``body`` is None).
- **Failure is final.** A frame that is refused, answers another request than the oldest,
  or cannot be decoded raises :class:`ResponseError` (``request`` is the request it
  concerned, ``responses`` those completed earlier by the same call, ``unanswered`` the
  requests that will now never be answered), since no later frame can be trusted to answer
  the request it seems to. The caller closes the connection for its own reasons (the socket
  broke, a request timed out) with :meth:`~ClientConnection.close`, which hands back the
  unanswered requests the same way. Any later call raises :class:`ConnectionClosedError`.
- **Versions.** :meth:`~ClientConnection.negotiate` reads the peer's ApiVersions answer and
  keeps its table; a peer that does not know the ApiVersions version asked answers
  UNSUPPORTED_VERSION with the range it knows (KIP-511), and the request is made again at
  the highest version both know. :meth:`~ClientConnection.version_for` then picks, per
  API, the highest version the peer, the codec and the caller all know.

Nothing here touches a socket, an event loop or a clock: timeouts, retries and reconnecting
belong to the caller, which closes the connection when a wait runs out.
"""

import collections
import struct

from ..errors import KqliteError
from .api_keys import ApiKey
from .connection import decode_response, encode_request
from .errors import ErrorCode, ProtocolError
from .schema import API_NAMES, APIS

__all__ = ["ClientConnection", "ClientRequest", "ClientResponse", "ResponseError",
           "ResponseTooLargeError", "ConnectionClosedError", "NoCommonVersionError",
           "ApiVersionsError", "DEFAULT_MAX_RESPONSE_SIZE", "api_label"]

# Kafka's socket.request.max.bytes default: no broker sends a frame larger than it accepts.
DEFAULT_MAX_RESPONSE_SIZE = 104857600
_CORRELATION_MASK = 0x7FFFFFFF     # correlation ids are non-negative int32s
_MIN_FRAME = 4                     # WIRE: a response frame holds at least its correlation id
_INT32 = struct.Struct(">i")


def api_label(api_key, version, correlation_id=None):
    """``"Fetch v12 (correlation id 7)"``: how errors and logs name a request."""
    name = API_NAMES.get(api_key, f"api key {api_key}")
    text = f"{name} v{version}"
    return text if correlation_id is None else f"{text} (correlation id {correlation_id})"


class ResponseError(ProtocolError):
    """Bytes from the peer that cannot be the next response; the connection is closed.

    ``request`` is the in-flight request the frame would have answered (None when none
    was), ``responses`` the responses completed earlier by the same ``receive_data`` call,
    ``unanswered`` the requests still in flight, which will never be answered.
    """

    def __init__(self, message, request=None):
        super().__init__(message)
        self.request = request
        self.responses = []
        self.unanswered = []


class ResponseTooLargeError(ResponseError):
    """A response's length prefix is above the connection's ``max_response_size``."""


class ConnectionClosedError(KqliteError):
    """The connection was closed (by :meth:`ClientConnection.close` or after a
    :class:`ResponseError`): nothing more can be sent or received on it."""


class NoCommonVersionError(KqliteError):
    """The peer, the codec and the caller share no version of the API (``api``, a name)."""

    def __init__(self, message, api):
        super().__init__(message)
        self.api = api


class ApiVersionsError(KqliteError):
    """The peer answered ApiVersions with an error (``code``, an ErrorCode or int)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class ClientRequest:
    """One request made by :meth:`ClientConnection.send_request`.

    ``frame`` is the bytes to write. ``context`` is the caller's own (a future, a timer),
    carried to the :class:`ClientResponse` or error that concerns this request.
    """
    __slots__ = ("api_key", "version", "correlation_id", "frame", "expects_response",
                 "cancelled", "context")

    def __init__(self, api_key, version, correlation_id, frame, expects_response):
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.frame = frame
        self.expects_response = expects_response
        self.cancelled = False
        self.context = None

    @property
    def label(self):
        return api_label(self.api_key, self.version, self.correlation_id)

    def __repr__(self):
        return f"<ClientRequest {self.label}>"


class ClientResponse:
    """The answer to ``request``: ``body`` is the decoded body dict (None when the request
    was cancelled)."""
    __slots__ = ("request", "body")

    def __init__(self, request, body):
        self.request = request
        self.body = body

    def __repr__(self):
        return f"<ClientResponse to {self.request.label}>"


class ClientConnection:
    """The client side of one Kafka connection, without I/O; see the module docstring.

    ``peer`` names the other side in every error message (``"broker 2 at host:9092"``).
    """

    def __init__(self, client_id="kqlite", *, peer="the broker",
                 max_response_size=DEFAULT_MAX_RESPONSE_SIZE):
        self.client_id = client_id
        self.peer = peer
        self.max_response_size = max_response_size
        self.api_versions = None   # {api_key: (min, max)} once negotiate() kept the table
        self._in_flight = collections.deque()
        self._next_correlation_id = 0
        self._closed = None        # why the connection is closed, once it is
        self._head = bytearray()   # the part of a length prefix received so far
        self._frame = None         # the frame being received, allocated at its full size
        self._filled = 0           # how much of _frame has arrived

    # -- state ---------------------------------------------------------------------------------

    @property
    def closed(self):
        return self._closed is not None

    @property
    def close_reason(self):
        """Why the connection closed (the reason given to close(), or the ResponseError)."""
        return self._closed

    @property
    def in_flight(self):
        """The number of requests sent and not yet answered."""
        return len(self._in_flight)

    def __repr__(self):
        state = f"closed ({self._closed})" if self.closed else f"{self.in_flight} in flight"
        return f"<ClientConnection to {self.peer} {state}>"

    # -- requests ------------------------------------------------------------------------------

    def send_request(self, api_key, version, body):
        """A :class:`ClientRequest` carrying the frame to write for this request.

        Raises ConnectionClosedError once closed, and the codec's ValueError/TypeError for
        a version it has no schema for or a body it cannot encode.
        """
        if self._closed is not None:
            raise ConnectionClosedError(f"{api_label(api_key, version)} not sent: the "
                                        f"connection to {self.peer} is closed ({self._closed})")
        correlation_id = self._next_correlation_id
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        self._next_correlation_id = (correlation_id + 1) & _CORRELATION_MASK
        answered = not (api_key == ApiKey.PRODUCE and body.get("acks") == 0)
        request = ClientRequest(api_key, version, correlation_id, frame, answered)
        if answered:
            self._in_flight.append(request)
        return request

    def cancel(self, request):
        """The caller no longer wants ``request``'s answer: it is still read when it comes,
        to keep the stream in step, but not decoded (its ClientResponse's body is None)."""
        request.cancelled = True

    def close(self, reason):
        """Close the connection (``reason``: why, for later errors); returns the requests
        that will never be answered, oldest first. Closing again returns []."""
        if self._closed is not None:
            return []
        self._closed = reason
        return self._drop()

    def _drop(self):
        unanswered = list(self._in_flight)
        self._in_flight.clear()
        self._head.clear()
        self._frame = None
        return unanswered

    # -- responses -----------------------------------------------------------------------------

    def receive_data(self, data):
        """The responses completed by ``data`` (any bytes-like object), oldest first.

        Raises ResponseError (see the module docstring), or ConnectionClosedError once
        closed.
        """
        if self._closed is not None:
            raise ConnectionClosedError(f"data from {self.peer} after the connection "
                                        f"closed ({self._closed})")
        responses = []
        try:
            with memoryview(data) as view:
                self._receive(view.cast("B") if view.format != "B" else view, responses)
        except ResponseError as exc:
            self._closed = exc
            exc.responses = responses
            exc.unanswered = self._drop()
            raise
        return responses

    def _receive(self, view, responses):
        pos, end = 0, len(view)
        while pos < end:
            if self._frame is None:
                take = min(_MIN_FRAME - len(self._head), end - pos)
                self._head += view[pos:pos + take]
                pos += take
                if len(self._head) < _MIN_FRAME:
                    return
                size = _INT32.unpack(self._head)[0]
                self._head.clear()
                self._check_size(size)
                if end - pos >= size:      # the whole frame is here: one copy, no zeroing
                    responses.append(self._complete(bytearray(view[pos:pos + size])))
                    pos += size
                    continue
                self._frame = bytearray(size)
                self._filled = 0
            take = min(len(self._frame) - self._filled, end - pos)
            self._frame[self._filled:self._filled + take] = view[pos:pos + take]
            self._filled += take
            pos += take
            if self._filled == len(self._frame):
                frame, self._frame = self._frame, None
                responses.append(self._complete(frame))

    def _check_size(self, size):
        if _MIN_FRAME <= size <= self.max_response_size:
            return
        request = self._in_flight.popleft() if self._in_flight else None
        label = request.label if request is not None else "an unrequested response"
        if size < _MIN_FRAME:
            raise ResponseError(f"{self.peer} sent a frame of {size} bytes for {label}, "
                                f"too short for a response header", request)
        raise ResponseTooLargeError(
            f"{self.peer} sent a frame of {size} bytes for {label}, above the limit of "
            f"{self.max_response_size} bytes", request)

    def _complete(self, frame):
        correlation_id = _INT32.unpack_from(frame, 0)[0]
        if not self._in_flight:
            raise ResponseError(f"{self.peer} sent a response (correlation id "
                                f"{correlation_id}) with no request in flight")
        request = self._in_flight.popleft()
        if correlation_id != request.correlation_id:
            raise ResponseError(f"{self.peer} answered with correlation id {correlation_id} "
                                f"where {request.label} was next", request)
        if request.cancelled:
            return ClientResponse(request, None)
        try:
            _, body = decode_response(request.api_key, request.version, frame)
        except ProtocolError as exc:
            raise ResponseError(f"undecodable response from {self.peer} to {request.label}: "
                                f"{exc}", request) from exc
        return ClientResponse(request, body)

    # -- versions ------------------------------------------------------------------------------

    def negotiate(self, version, body):
        """Learn the peer's versions from ``body``, its answer to ApiVersions v``version``.

        - error NONE: the peer's table is kept as ``api_versions``; returns None.
        - UNSUPPORTED_VERSION naming a lower ApiVersions version (none named: v0), as a
          peer that does not know ``version`` answers (KIP-511): returns that version, to
          ask again with.
        - any other answer: raises ApiVersionsError.
        """
        code = body["error_code"]
        if code == ErrorCode.NONE:
            self.api_versions = {k["api_key"]: (k["min_version"], k["max_version"])
                                 for k in body["api_keys"]}
            return None
        if code == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {k["api_key"]: k["max_version"] for k in body["api_keys"]}
            retry = theirs.get(ApiKey.API_VERSIONS, 0)
            if retry < version:
                return retry
        raise ApiVersionsError(f"{self.peer} answered ApiVersions v{version} with error "
                               f"{_error_name(code)}", code)

    def version_for(self, api_key, versions=None):
        """The highest version of ``api_key`` that the peer advertises, the codec has a
        schema for and, if given, lies in the caller's ``versions`` (min, max).

        Raises NoCommonVersionError when the three share none, RuntimeError before
        negotiate() kept the peer's table.
        """
        if self.api_versions is None:
            raise RuntimeError(f"version_for() before the ApiVersions of {self.peer} are known")
        name = API_NAMES.get(api_key, f"api key {api_key}")
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise NoCommonVersionError(f"{self.peer} does not serve {name}", name)
        api = APIS.get(api_key)
        if api is None:
            raise NoCommonVersionError(f"kqlite's codec has no schema for {name}", name)
        ranges = [theirs, api.versions] + ([tuple(versions)] if versions is not None else [])
        low = max(r[0] for r in ranges)
        high = min(r[1] for r in ranges)
        if low > high:
            raise NoCommonVersionError(
                f"no common version of {name}: {self.peer} serves v{theirs[0]}-v{theirs[1]}, "
                f"the codec v{api.versions[0]}-v{api.versions[1]}"
                + (f", the caller asks v{versions[0]}-v{versions[1]}" if versions else ""),
                name)
        return high


def _error_name(code):
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return str(code)
