"""Frames, headers and the server side of a connection (sans-I/O, in the style of h11).

Theory of operation: a Kafka connection is a stream of frames, each a 4-byte big-endian
length followed by that many bytes. A request frame is a request header (v1: api key,
api version, correlation id, client id; v2 adds tagged fields and is used by flexible
versions; v0, without the client id, is used only by ControlledShutdown v0) and the body;
a response frame is a response header (v0: correlation id; v1 adds tagged fields) and the
body. ApiVersions responses always use header v0 (KIP-511), so a client can read the
answer to a version the broker does not know.

:class:`ServerConnection` holds no socket: the caller feeds it the bytes it read
(``receive_data``) and gets back complete requests, and asks it for the bytes of a response
(``respond``). The same bytes fed whole, byte by byte or in any chunking give the same
requests. Input that cannot be a Kafka frame raises :class:`ProtocolError` and leaves the
connection unusable, since the next frame boundary is lost.
"""

import struct

from .api_keys import ApiKey
from .codec import message, read_tags
from .errors import ErrorCode, ProtocolError
from .primitives import (EncodeError, EncodeRangeError, FileRegion, Reader, Writer,
                         read_int16, read_int32, read_length, write_length)
from .schema import API_NAMES, APIS, CLUSTER_ONLY, REQUEST_HEADER_V0, in_range

__all__ = ["Request", "ServerConnection", "encode_request", "encode_response",
           "decode_request", "decode_response", "SUPPORTED", "CLUSTER_SUPPORTED"]

_HEADER = struct.Struct(">hhi")  # WIRE: Kafka-defined request header v1 prefix
_INT32 = struct.Struct(">i")
# The header's int16 -> its ApiKey: a dict lookup, cheaper than calling the enum per request.
_API_KEYS = {int(key): key for key in ApiKey}

# ApiKey -> (min, max): the versions kqlite serves and advertises in ApiVersions.
SUPPORTED = {key: api.versions for key, api in sorted(APIS.items())
             if key not in CLUSTER_ONLY}
# What a cluster broker advertises: SUPPORTED plus the inter-broker APIs.
CLUSTER_SUPPORTED = {key: api.versions for key, api in sorted(APIS.items())}


class Request:
    """One decoded request.

    ``api_key`` is an :class:`ApiKey` when Kafka defines the key (a plain int otherwise).
    ``body`` is the decoded body dict, or None when ``unsupported`` (an API key kqlite does
    not serve or a version outside ``SUPPORTED``; the header is parsed as far as possible
    so the caller can answer or log it). ``size`` is the frame's length prefix: the bytes
    of header and body, as Kafka's request-size metrics count them.
    """
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "name", "body",
                 "unsupported", "flexible", "size")

    def __init__(self, api_key, api_version, correlation_id, client_id, name, body,
                 unsupported, flexible, size):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.name = name
        self.body = body
        self.unsupported = unsupported
        self.flexible = flexible
        self.size = size

    def __repr__(self):
        state = " unsupported" if self.unsupported else ""
        return (f"<Request {self.name} v{self.api_version} corr={self.correlation_id} "
                f"client={self.client_id!r} size={self.size}{state}>")


def _read_client_id(r):
    # The client id keeps the classic int16 length even in header v2, so that any broker
    # can read the header of any ApiVersions request (RequestHeader.json).
    n = read_length(r, False, False)
    if n < 0:
        return None
    try:
        return str(r.take(n), "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("invalid UTF-8 in the client id") from None


def decode_request(frame):
    """Decode one request frame (without its 4-byte length prefix) into a :class:`Request`.

    Raises ProtocolError if the frame is shorter than the fixed header or a supported
    request's header or body is malformed. Bytes after the body are ignored (as Kafka does).
    """
    try:
        return _decode_request(memoryview(frame))
    except ProtocolError:
        raise
    except Exception as exc:  # a safety net: the contract is "only ProtocolError escapes"
        raise ProtocolError(f"undecodable request: {exc!r}") from exc


def _decode_request(buf):
    r = Reader(buf)
    if len(buf) < _HEADER.size:
        raise ProtocolError(f"a request frame of {len(buf)} bytes has no header")
    api_key, api_version, correlation_id = _HEADER.unpack_from(buf, 0)
    r.pos = _HEADER.size
    api_key = _API_KEYS.get(api_key, api_key)
    api = APIS.get(api_key)
    name = API_NAMES.get(api_key, f"Unknown({api_key})")
    flexible = api is not None and api.is_flexible(api_version)
    if api is None or not in_range(api_version, api.versions):
        try:
            client_id = _read_client_id(r)
        except ProtocolError:
            client_id = None
        return Request(api_key, api_version, correlation_id, client_id, name, None, True,
                       flexible, len(buf))
    if (api_key, api_version) in REQUEST_HEADER_V0:
        client_id = ""  # Kafka reads the absent client id as its default, the empty string
    else:
        client_id = _read_client_id(r)
    if flexible:
        read_tags(r, {}, {})  # header v2 defines no tags; skip whatever was sent
    # Bytes after the body are ignored, as Kafka's parsers do: librdkafka, for one, sends
    # Metadata v12 requests with three extra bytes.
    body = message(api_key, api_version, "request").decode(r)
    return Request(api_key, api_version, correlation_id, client_id, name, body, False,
                   flexible, len(buf))


def _compiled(api_key, version, kind):
    api = APIS.get(api_key)
    if api is None or not in_range(version, api.versions):
        raise ValueError(f"kqlite has no {kind} schema for "
                         f"{API_NAMES.get(api_key, api_key)} v{version}")
    return message(api_key, version, kind)


def _encode(m, w, body):
    try:
        m.encode(w, body)
    except EncodeError as exc:
        exc.message = m.name
        raise


def encode_request(api_key, api_version, correlation_id, client_id, body):
    """A full request frame (length prefix, header v1 or v2, body) as bytes.

    A version whose header is v0 (ControlledShutdown v0) has no client id: ``client_id`` is
    then not sent, as Kafka drops it. Raises ValueError for a version kqlite has no schema
    for, and EncodeError (TypeError / ValueError) for a body value of the wrong type or range.
    """
    m = _compiled(api_key, api_version, "request")
    w = Writer()
    w.out += b"\0\0\0\0" + _HEADER.pack(api_key, api_version, correlation_id)
    if (api_key, api_version) in REQUEST_HEADER_V0:
        pass  # header v0 ends at the correlation id
    elif client_id is None:
        write_length(w, -1, False, False)
    else:
        data = client_id.encode("utf-8")  # TypeError unless a str
        if len(data) > 0x7FFF:
            raise EncodeRangeError(f"a client id of {len(data)} bytes is too long")
        write_length(w, len(data), False, False)
        w.out += data
    if m.flexible:
        w.out.append(0)  # header v2: no tagged fields
    _encode(m, w, body)
    _INT32.pack_into(w.out, 0, len(w.out) - 4)
    return bytes(w.out)


def encode_response(api_key, version, correlation_id, body):
    """A full response frame as chunks: ``bytes`` runs and :class:`FileRegion` s.

    Consecutive bytes are merged; the length prefix counts the regions' lengths. Raises
    ValueError for a version kqlite has no schema for, EncodeError for a bad body value.
    """
    m = _compiled(api_key, version, "response")
    w = Writer(regions_ok=True)
    w.out += b"\0\0\0\0" + _INT32.pack(correlation_id)
    if m.flexible and api_key != ApiKey.API_VERSIONS:
        w.out.append(0)  # header v1: no tagged fields
    _encode(m, w, body)
    size = w.size() - 4
    if size > 0x7FFFFFFF:
        raise ValueError(f"{m.name}: a response of {size} bytes does not fit a frame")
    _INT32.pack_into(w.chunks[0], 0, size)
    return [c if isinstance(c, FileRegion) else bytes(c) for c in w.chunks if c]


def decode_response(api_key, api_version, frame):
    """Decode a response frame (without its length prefix) -> ``(correlation_id, body)``.

    An ApiVersions response carrying UNSUPPORTED_VERSION is decoded as version 0, since
    that is what a broker sends when it does not know the requested version. Raises
    ProtocolError for malformed input, ValueError for a version kqlite has no schema for.
    """
    buf = memoryview(frame)
    r = Reader(buf)
    correlation_id = read_int32(r)
    if api_key == ApiKey.API_VERSIONS and api_version > 0 and r.remaining() >= 2:
        if read_int16(Reader(buf, r.pos)) == ErrorCode.UNSUPPORTED_VERSION:
            api_version = 0
    m = _compiled(api_key, api_version, "response")
    try:
        if m.flexible and api_key != ApiKey.API_VERSIONS:
            read_tags(r, {}, {})
        body = m.decode(r)
    except ProtocolError:
        raise
    except Exception as exc:  # the same safety net as decode_request
        raise ProtocolError(f"undecodable {m.name}: {exc!r}") from exc
    return correlation_id, body  # trailing bytes ignored, as for requests


class ServerConnection:
    """The server side of one Kafka connection, without I/O.

    ``receive_data(data)`` buffers bytes and returns the requests completed by them, in
    order. A length prefix below zero or above ``max_request_size`` raises ProtocolError as
    soon as its four bytes arrive, before anything of that size is buffered. After any
    ProtocolError the connection is unusable and every later call raises again; requests
    completed earlier in the same call are on the exception as ``exc.requests``.
    """

    def __init__(self, max_request_size=104857600):
        self.max_request_size = max_request_size
        self._buf = bytearray()
        self._error = None

    def receive_data(self, data):
        if self._error is not None:
            raise ProtocolError(f"connection already failed: {self._error}")
        buf = self._buf
        requests = []
        if len(buf) == 4 and len(data) == _INT32.unpack_from(buf)[0]:
            # The body of the frame whose length prefix came alone (as the broker reads
            # them): decoded as it is, without a copy into the buffer and out again.
            self._buf = bytearray()
            try:
                requests.append(decode_request(bytes(data)))
            except ProtocolError as exc:
                self._error = exc
                exc.requests = requests
                raise
            return requests
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= 4:
                size = _INT32.unpack_from(buf, pos)[0]
                if size < 0 or size > self.max_request_size:
                    raise ProtocolError(f"request length {size} is outside "
                                        f"[0, {self.max_request_size}]")
                end = pos + 4 + size
                if len(buf) < end:
                    break
                # Copy the frame out: decoded `records` are views of it, and a view of
                # the resizable buffer would pin it.
                with memoryview(buf) as view:
                    frame = bytes(view[pos + 4:end])
                pos = end
                requests.append(decode_request(frame))
        except ProtocolError as exc:
            self._error = exc
            self._buf = bytearray()
            exc.requests = requests
            raise
        del buf[:pos]
        return requests

    def respond(self, request, body, version=None):
        """The response frame to ``request`` as chunks (see :func:`encode_response`).

        ``version`` overrides the request's version (ApiVersions answers an unsupported
        version with version 0).
        """
        v = request.api_version if version is None else version
        return encode_response(request.api_key, v, request.correlation_id, body)
