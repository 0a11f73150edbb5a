"""The acceptor: listening sockets, connection caps, and accept failures (Kafka's Acceptor).

asyncio's own accept loop is not used because the broker must decide when to accept:

* At ``max.connections`` it stops accepting until a connection closes, leaving new
  ones in the listen backlog (connection_limits.py).
* Out of descriptors (EMFILE, ENFILE) ``accept`` fails while the pending connection
  stays ready, so retrying at once would spin the event loop; asyncio's loop pauses a
  second and logs every failure, uvloop's (libuv's) accepts and drops the pending
  connections. Here the failure is logged once per episode (exhaustion.py) and the
  acceptor waits until one of our connections closes (which frees a descriptor) or
  ``ACCEPT_RETRY_SECONDS`` pass (storage may free some); the pending connections wait
  in the backlog and are served once descriptors are back. ENOBUFS and ENOMEM are
  waited out the same way; a connection reset before it was accepted is skipped.

Each accepted connection is checked against its address's cap and then handed to
``serve(sock, address, listener name)`` in a task of its own (a broker listens on
several listeners; the caps count their connections together).
"""

import asyncio
import errno
import logging
import socket

from .connection_limits import address_key

__all__ = ["Acceptor", "open_listeners", "ACCEPT_RETRY_SECONDS"]

ACCEPT_RETRY_SECONDS = 1.0
LISTEN_BACKLOG = 100          # asyncio.start_server's default (Kafka's is 50)
_SKIPPED = {errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EAGAIN}
_ACCEPTING = "accepting connections"     # what an exhaustion episode names

log = logging.getLogger("kqlite.server")


async def open_listeners(host, port, backlog=LISTEN_BACKLOG):
    """Bound, listening, non-blocking sockets for ``host:port`` (every address the host
    resolves to, as asyncio.start_server binds them)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, family=socket.AF_UNSPEC,
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen on {address[0]}:{address[1]}: "
                                         f"{exc.strerror}") from None
            sock.listen(backlog)
            sock.setblocking(False)
            if port == 0:        # every address on the port the first one was given
                port = sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Acceptor:
    """Accepts on ``sockets`` (of the listeners ``names``) within ``limits``;
    ``serve(sock, address, name)`` runs each connection (a coroutine function)."""

    def __init__(self, sockets, limits, alarms, metrics, serve, names=None):
        self.sockets = sockets
        self.names = names or ["PLAINTEXT"] * len(sockets)   # each socket's listener
        self.limits = limits
        self.alarms = alarms
        self.metrics = metrics
        self._serve = serve
        self._loops = []
        self.connections = set()       # the tasks of the connections being served

    def start(self):
        self._loops = [asyncio.ensure_future(self._accept_loop(s, name))
                       for s, name in zip(self.sockets, self.names)]

    async def close(self):
        """Stop accepting and close the listening sockets (connections stay)."""
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        for sock in self.sockets:
            sock.close()

    async def _accept_loop(self, listener, name):
        loop = asyncio.get_running_loop()
        while True:
            await self.limits.slot_available()
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in _SKIPPED:
                    continue
                self.metrics.accept_errors += 1
                if self.alarms.check(exc, _ACCEPTING, "accepting a connection") is None:
                    log.warning("accepting a connection failed: %s; retrying when a "
                                "connection closes or in %.0f s", exc, ACCEPT_RETRY_SECONDS)
                await self.limits.wait_for_close(ACCEPT_RETRY_SECONDS)
                continue
            self.alarms.recovered(_ACCEPTING)
            address = address_key(peer[0]) if isinstance(peer, tuple) else str(peer)
            if not self.limits.admit(address):
                sock.close()
                continue
            task = asyncio.ensure_future(self._run(sock, address, name))
            self.connections.add(task)
            task.add_done_callback(self.connections.discard)

    async def _run(self, sock, address, name):
        try:
            await self._serve(sock, address, name)
        finally:
            self.limits.release(address)
