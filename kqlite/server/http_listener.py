"""The broker's HTTP listener (``--metrics-listen``): one request per connection, bounded.

Theory of operation. The listener serves ``/metrics`` (:class:`~kqlite.server.metrics.Metrics`)
and hands every other path to an application the layer above may plug in
(``Broker.http_app``, the web console of ``kqlite/console/``); without one it answers 404.
``kqlite ui`` serves the console through the same listener, with no broker.

Everything a client sends is bounded before it is kept, so no request can make the
process allocate without limit; a request over a bound gets its HTTP status and the
connection is closed:

  what                         bound                    answer
  the request line             8 KiB                    414 URI Too Long
  a header line                8 KiB                    431 Request Header Fields Too Large
  the number of header lines   64                       431 Request Header Fields Too Large
  the body (Content-Length)    MAX_BODY (64 KiB)        413 Content Too Large
  a chunked body                                        411 Length Required
  a request line not METHOD TARGET HTTP/x.y             400 Bad Request
  a query of more than MAX_FIELDS (64) fields            400 Bad Request
  more than MAX_CONNECTIONS (64) connections at once     503 Service Unavailable
  no whole request within READ_TIMEOUT s                the connection is closed

The application is awaited on the event loop: it must do no blocking work there (the
console reads storage through the broker's storage threads, as a scrape does).
"""

import asyncio
import logging
from typing import Any, Awaitable, Callable, NamedTuple, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["HttpRequest", "HttpResponse", "HttpError", "read_request", "start_http",
           "MAX_BODY", "MAX_LINE", "MAX_HEADERS"]

log = logging.getLogger("kqlite.server")

MAX_LINE = 8192
MAX_HEADERS = 64
MAX_BODY = 65536
MAX_FIELDS = 64
MAX_CONNECTIONS = 64
READ_TIMEOUT = 10.0

_REASONS = {200: "OK", 201: "Created", 204: "No Content", 303: "See Other",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 411: "Length Required",
            413: "Content Too Large", 414: "URI Too Long",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable"}


class HttpRequest(NamedTuple):
    """One parsed request: ``path`` percent-decoded, ``query`` the last value of each
    name, ``headers`` with lower-cased names, ``client`` the peer's address as text."""
    method: str
    path: str
    query: dict[Any, Any]
    headers: dict[Any, Any]
    body: bytes
    client: str = ""


class HttpResponse(NamedTuple):
    status: int
    content_type: str
    body: bytes
    headers: tuple[Any, ...] = ()

    @classmethod
    def text(cls, status: int, text: str) -> "HttpResponse":
        return cls(status, "text/plain; charset=utf-8", text.encode())

    def encode(self, head_only: bool = False) -> bytes:
        """The response's bytes; ``head_only`` (a HEAD request): without the body."""
        reason = _REASONS.get(self.status, "Unknown")
        lines = [f"HTTP/1.1 {self.status} {reason}", f"Content-Type: {self.content_type}",
                 f"Content-Length: {len(self.body)}", "Connection: close",
                 "X-Content-Type-Options: nosniff", "Cache-Control: no-store"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


class HttpError(Exception):
    """A request refused before it reached the application: ``status`` says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _line(reader: asyncio.StreamReader, status: int) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise HttpError(status, "line too long") from None
    except asyncio.IncompleteReadError as exc:
        line = exc.partial
    if len(line) > MAX_LINE:
        raise HttpError(status, "line too long")
    return line


async def read_request(reader: asyncio.StreamReader, client: str = "") -> HttpRequest:
    """Read one request from ``reader`` (a StreamReader whose limit is MAX_LINE), within
    the bounds of the module docstring; raises HttpError, or EOFError for a closed
    connection."""
    first = await _line(reader, 414)
    if not first.strip():
        raise EOFError
    parts = first.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise HttpError(400, "bad request line")
    method, target = parts[0].upper(), parts[1]
    headers = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _line(reader, 431)
        if line in (b"\r\n", b"\n", b""):
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise HttpError(400, "bad header line")
        headers[name.strip().lower()] = value.strip()
    else:
        raise HttpError(431, "too many header lines")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(411, "chunked bodies are not accepted")
    length_text = headers.get("content-length", "0") or "0"
    if not length_text.isdigit():
        raise HttpError(400, "bad Content-Length")
    length = int(length_text)
    if length > MAX_BODY:
        raise HttpError(413, f"a body holds at most {MAX_BODY} bytes")
    body = await reader.readexactly(length) if length else b""
    split = urlsplit(target)
    try:
        query = dict(parse_qsl(split.query, keep_blank_values=True,
                               max_num_fields=MAX_FIELDS))
    except ValueError:
        raise HttpError(400, f"a query has at most {MAX_FIELDS} fields") from None
    return HttpRequest(method, unquote(split.path) or "/", query, headers, body, client)


App = Callable[[HttpRequest], Awaitable[HttpResponse]]


async def start_http(host: str, port: int, routes: Callable[[HttpRequest], Optional[App]],
                     name: str = "http") -> asyncio.Server:
    """Serve HTTP on ``host:port``: each request goes to ``routes(request)`` (the app that
    answers it, or None for 404). Returns the asyncio Server."""

    open_connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_connections
        if open_connections >= MAX_CONNECTIONS:
            writer.write(HttpResponse.text(503, "too many connections\n").encode())
            writer.close()
            return
        open_connections += 1
        try:
            await _serve(reader, writer)
        finally:
            open_connections -= 1

    async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else ""
        try:
            try:
                request = await asyncio.wait_for(read_request(reader, client), READ_TIMEOUT)
            except HttpError as exc:
                response, head_only = HttpResponse.text(exc.status, f"{exc}\n"), False
            else:
                head_only = request.method == "HEAD"
                app = routes(request)
                if app is None:
                    response = HttpResponse.text(404, "not found\n")
                else:
                    try:
                        response = await app(request)
                    except Exception:   # a failed page is a 500, never a dead listener
                        log.exception("%s request %s %s failed", name, request.method,
                                      request.path)
                        response = HttpResponse.text(500, "internal error\n")
            writer.write(response.encode(head_only))
            await writer.drain()
        except (EOFError, asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
            pass
        except Exception as exc:
            log.warning("%s request failed: %s", name, exc)
        finally:
            writer.close()

    return await asyncio.start_server(serve, host, port, limit=MAX_LINE)
