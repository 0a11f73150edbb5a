"""kqlite.protocol: a sans-I/O codec for the Kafka wire protocol.

Layer contract: bytes in, request objects out; response dicts in, bytes (and file regions
for sendfile) out. No sockets, no asyncio, no storage: this package imports only
``kqlite.errors`` and the standard library, so it can be driven by the asyncio broker, a
test, a replica fetcher or a fuzzer alike (python-hyper/h11 is the model).

Layout:
- ``api_keys``: :class:`ApiKey`, Kafka's API keys by Kafka's names;
- ``schema/``: the message layouts, written by hand in a small Python DSL (``schema/_dsl``)
  and cross-checked against Kafka's JSON definitions by the tests;
- ``primitives``: Kafka's primitive types over a bounded reader and a chunked writer;
- ``codec``: compiles a schema version into decode/encode closures;
- ``connection``: frames, headers, :class:`ServerConnection` and the client-side helpers;
- ``client``: :class:`ClientConnection`, the client side of a connection (request frames,
  the in-flight FIFO, response framing, version negotiation);
- ``errors``: :class:`ProtocolError` and Kafka's :class:`ErrorCode` s;
- ``acl``: Kafka's authorization model as values with their wire codes (resource types,
  operations, pattern and permission types, resources, the KIP-430 bit field);
- ``security``: security protocols and principals (``User:ANONYMOUS``).

Body dicts use the snake_case of Kafka's JSON field names; see docs/protocol.md.
"""

from .api_keys import ApiKey as ApiKey
from .client import ClientConnection as ClientConnection
from .connection import (CLUSTER_SUPPORTED as CLUSTER_SUPPORTED, SUPPORTED as SUPPORTED,
                         Request as Request,
                         ServerConnection as ServerConnection,
                         decode_request as decode_request, decode_response as decode_response,
                         encode_request as encode_request, encode_response as encode_response)
from .errors import ErrorCode as ErrorCode, ProtocolError as ProtocolError
from .primitives import (EncodeError as EncodeError, EncodeRangeError as EncodeRangeError,
                         FileRegion as FileRegion)
from .schema import API_NAMES as API_NAMES

__all__ = ["ApiKey", "ProtocolError", "ErrorCode", "FileRegion", "Request", "SUPPORTED",
           "CLUSTER_SUPPORTED", "API_NAMES",
           "ServerConnection", "ClientConnection", "encode_request", "encode_response",
           "decode_request", "decode_response", "EncodeError", "EncodeRangeError"]
