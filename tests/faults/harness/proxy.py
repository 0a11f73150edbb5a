"""TCP proxies in the test process, through which every connection of the cluster flows,
so that the nemesis can cut and heal links.

Each proxy stands for one *destination* node (a broker, or ZooKeeper as seen by one
broker) and knows how to name the *source* of a connection from the peer's address
(``source_of``). A rule ``(src, dst)`` blocks the connections ``src`` opens towards
``dst``: new ones are accepted and then hang (as with a firewall that drops packets, a
client sees a timeout, not a refusal); open ones stop forwarding bytes both ways (a TCP
connection with one direction dropped carries nothing either way). When the rule is
lifted, connections that were stalled are reset, as their peers' timeouts would have
reset them, and new connections flow again.

All proxies share one asyncio loop on a daemon thread; the public methods are
thread-safe and return once the change is in force.
"""

import asyncio
import concurrent.futures
import threading

__all__ = ["ProxyNet"]

_CHUNK = 65536


class _Link:
    """One proxied connection: its two sockets' writers and who talks to whom."""

    __slots__ = ("src", "dst", "writers", "stalled")

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.writers = []
        self.stalled = False

    def reset(self):
        for w in self.writers:
            w.transport.abort()


class ProxyNet:
    """The proxies of one test cluster. ``start()``, then ``add()`` proxies; ``cut``,
    ``heal`` change the rules; ``close()`` stops everything."""

    def __init__(self):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="fault-proxies")
        self._servers = {}
        self._links = set()
        self._blocked = set()            # {(src, dst)}
        self._healed = None              # asyncio.Event, replaced at every heal

    def start(self):
        self._thread.start()
        self._call(self._init())
        return self

    async def _init(self):
        self._healed = asyncio.Event()

    def _call(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- proxies -----------------------------------------------------------------------------

    def add(self, dst, listen, target, source_of):
        """Proxy ``listen`` (host, port) to ``target`` (host, port) for the node ``dst``;
        ``source_of(peer_host)`` names the node a connection comes from."""
        async def serve():
            server = await asyncio.start_server(
                lambda r, w: self._accepted(r, w, dst, target, source_of), *listen,
                reuse_address=True)
            self._servers[listen] = server
        self._call(serve())

    async def _accepted(self, reader, writer, dst, target, source_of):
        link = _Link(source_of(writer.get_extra_info("peername")[0]), dst)
        link.writers.append(writer)
        self._links.add(link)
        try:
            if not await self._passable(link):
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*target)
            except OSError:
                return                 # the node is down: the client sees a reset
            link.writers.append(up_writer)
            await asyncio.gather(self._pump(reader, up_writer, link),
                                 self._pump(up_reader, writer, link))
        finally:
            self._links.discard(link)
            link.reset()

    async def _passable(self, link):
        """Wait while the link is blocked; False once it must be reset (it was stalled
        across a heal)."""
        while (link.src, link.dst) in self._blocked:
            link.stalled = True
            await self._healed.wait()
        return not link.stalled

    async def _pump(self, reader, writer, link):
        try:
            while data := await reader.read(_CHUNK):
                if not await self._passable(link):
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            link.reset()

    # -- rules -------------------------------------------------------------------------------

    def cut(self, src, dst, *, both_ways=True):
        """Block what ``src`` opens towards ``dst`` (and the reverse, unless one-way)."""
        pairs = {(src, dst), (dst, src)} if both_ways else {(src, dst)}
        self._call(self._change(add=pairs))

    def heal(self, src=None, dst=None, *, both_ways=True):
        """Lift the rule between ``src`` and ``dst``; with no arguments, every rule."""
        if src is None:
            pairs = None
        else:
            pairs = {(src, dst), (dst, src)} if both_ways else {(src, dst)}
        self._call(self._change(remove=pairs))

    def isolate(self, node, others):
        """Cut ``node`` from every node of ``others`` (both ways)."""
        self._call(self._change(add={p for o in others for p in ((node, o), (o, node))}))

    @property
    def blocked(self):
        return frozenset(self._blocked)

    async def _change(self, add=(), remove=()):
        self._blocked |= set(add)
        for link in list(self._links):
            if (link.src, link.dst) in self._blocked:
                link.stalled = True
        if remove is None:
            self._blocked.clear()
        elif remove:
            self._blocked -= set(remove)
        if remove is None or remove:
            for link in list(self._links):
                if link.stalled and (link.src, link.dst) not in self._blocked:
                    link.reset()
            healed, self._healed = self._healed, asyncio.Event()
            healed.set()

    def close(self):
        async def shutdown():
            for server in self._servers.values():
                server.close()
            for link in list(self._links):
                link.reset()
        try:
            self._call(shutdown(), timeout=10)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
