"""How many connections the broker holds: a global cap and a cap per client address.

Kafka's ConnectionQuotas, for one listener:

* ``max.connections``: at the cap the acceptor stops accepting (new connections wait in
  the listen backlog) until one closes, as Kafka's acceptor waits for a slot. Kafka's
  default is unlimited; kqlite defaults to a quarter of the soft descriptor limit
  (RLIMIT_NOFILE), at least 64: the logs may use up to five eighths of the limit
  (kqlite/db/log_manager.py), and the rest is room for sendfile regions, index files
  and a few segments more, so a flood of connections cannot starve storage of
  descriptors.
* ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``): a connection
  from an address that already has that many is closed at once, as Kafka closes it.
  Kafka's default is unlimited; kqlite defaults to three quarters of
  ``max.connections``, so that one address (a client leaking connections) can never
  take every slot and lock other hosts out.

Refusals are logged at most once per ``REFUSAL_LOG_INTERVAL`` seconds, with a count of
those since the previous line; ``refused`` counts them all (a metric).
"""

import asyncio
import ipaddress
import logging
import socket
import time

__all__ = ["ConnectionLimits", "default_max_connections", "parse_overrides",
           "address_key", "REFUSAL_LOG_INTERVAL"]

REFUSAL_LOG_INTERVAL = 60.0
_MIN_CONNECTIONS = 64
_NO_LIMIT_FDS = 1 << 16    # what to plan for when the descriptor limit is unlimited

log = logging.getLogger("kqlite.server")


def default_max_connections():
    """A quarter of the soft RLIMIT_NOFILE, at least 64 (see the module docstring)."""
    try:
        import resource
    except ImportError:     # no rlimits (Windows): the C runtime's 512 open files
        return _MIN_CONNECTIONS * 2
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = _NO_LIMIT_FDS
    return max(_MIN_CONNECTIONS, soft // 4)


def address_key(host):
    """The address a connection is counted under: the IP as text, IPv4-mapped IPv6
    addresses as their IPv4 address (a dual-stack listener reports those)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def parse_overrides(text):
    """``max.connections.per.ip.overrides``: ``"host:count,host:count"`` (hosts are IP
    addresses or names, resolved now to every address they have) -> {address: count}.
    Raises ValueError on a malformed entry, a negative count or an unknown host."""
    overrides = {}
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: expected HOST:COUNT, "
                             f"not {entry!r}")
        for address in _addresses(host):
            overrides[address] = int(count)
    return overrides


def _addresses(host):
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [address_key(host)]
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: "
                         f"{exc}") from None
    return sorted({address_key(info[4][0]) for info in infos})


class ConnectionLimits:
    """Counts open connections per address and in total (event loop only)."""

    def __init__(self, max_connections=None, max_per_ip=None, overrides=None):
        self.max_connections = (default_max_connections() if max_connections is None
                                else max_connections)
        if not isinstance(self.max_connections, int) or self.max_connections < 1:
            raise ValueError(f"max.connections must be a positive integer, "
                             f"not {max_connections!r}")
        self.max_per_ip = (max(1, self.max_connections * 3 // 4) if max_per_ip is None
                           else max_per_ip)
        if not isinstance(self.max_per_ip, int) or self.max_per_ip < 0:
            raise ValueError(f"max.connections.per.ip must be a non-negative integer, "
                             f"not {max_per_ip!r}")
        self.overrides = {address_key(k): v for k, v in (overrides or {}).items()}
        if any(not isinstance(v, int) or v < 0 for v in self.overrides.values()):
            raise ValueError("max.connections.per.ip.overrides: counts must be "
                             "non-negative integers")
        self.total = 0
        self.refused = 0
        self._counts = {}
        self._closed = None           # a future a connection's close resolves
        self._last_refusal_log = None
        self._last_full_log = None
        self._unlogged = 0

    def limit_for(self, address):
        return self.overrides.get(address, self.max_per_ip)

    def count(self, address):
        return self._counts.get(address, 0)

    def admit(self, address):
        """Count a new connection from ``address``; False (and nothing counted) when the
        address is at its cap: the caller closes the connection at once."""
        limit = self.limit_for(address)
        held = self._counts.get(address, 0)
        if held >= limit:
            self._refuse(address, held, limit)
            return False
        self._counts[address] = held + 1
        self.total += 1
        return True

    def release(self, address):
        held = self._counts.get(address, 0) - 1
        if held > 0:
            self._counts[address] = held
        else:
            self._counts.pop(address, None)
        self.total -= 1
        waiter, self._closed = self._closed, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _next_close(self):
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
        # Shielded: one waiter cancelled (the broker stopping) leaves the others waiting.
        return asyncio.shield(self._closed)

    async def slot_available(self):
        """Return once fewer than ``max_connections`` are open (the acceptor waits here,
        leaving new connections in the listen backlog)."""
        if self.total < self.max_connections:
            return
        now = time.monotonic()
        if self._last_full_log is None or now - self._last_full_log >= REFUSAL_LOG_INTERVAL:
            self._last_full_log = now
            log.warning("max.connections (%d) reached: new connections wait in the listen "
                        "backlog until one closes (logged at most once a minute)",
                        self.max_connections)
        while self.total >= self.max_connections:
            await self._next_close()

    async def wait_for_close(self, timeout):
        """Wait until a connection closes (a descriptor is free again) or ``timeout``."""
        try:
            await asyncio.wait_for(self._next_close(), timeout)
        except asyncio.TimeoutError:
            pass

    def _refuse(self, address, held, limit):
        self.refused += 1
        self._unlogged += 1
        now = time.monotonic()
        if self._last_refusal_log is not None and \
                now - self._last_refusal_log < REFUSAL_LOG_INTERVAL:
            return
        earlier = self._unlogged - 1
        self._last_refusal_log, self._unlogged = now, 0
        log.warning("closed a new connection from %s: it already has %d connection(s), "
                    "its max.connections.per.ip%s cap of %d%s; such refusals are logged at "
                    "most once a minute (kqlite_connections_refused_total counts them all)",
                    address, held, " override" if address in self.overrides else "", limit,
                    f" ({earlier} more refused since the last such line)" if earlier else "")
