"""Who may use a broker's console: HTTP Basic, checked against the broker's own SASL.

Theory of operation. When any listener of the broker authenticates (SASL, or TLS), the
console requires a login too; its answer to a request without one is 401 with a Basic
challenge. A user name and password are checked by doing what a client does: a SASL
handshake with the broker's own listener (``check``), PLAIN when the listener enables
it, else SCRAM-SHA-512 or SCRAM-SHA-256. So the console accepts exactly the
credentials the broker does (its JAAS users, its SCRAM credentials in the data dir or
ZooKeeper) and keeps no password store of its own. A success is remembered for
REMEMBER seconds (by the SHA-256 of name and password, never the password itself), so
each page does not cost a handshake.

The same connection, authenticated as the user, carries the console's writes
(``connect``): create and delete a topic, produce a test record, commit offsets. The
broker then authorizes them with its ACLs as it would a client's requests.

A broker with TLS listeners and no SASL listener (its clients are known by their
certificates, or it authenticates nobody but encrypts) gives the console no password to
check: the console then refuses every request (403) rather than guess who asks.

  broker's listeners                   console
  none authenticates                   open (User:ANONYMOUS), writes as ANONYMOUS
  a SASL listener (PLAIN or SCRAM)     HTTP Basic, checked by that listener
  TLS listeners, no SASL listener      403 for every request
"""

import hashlib
import ssl
import time
from typing import Any, Optional

from ..protocol.security import SecurityProtocol

__all__ = ["BrokerLogin", "REMEMBER"]

REMEMBER = 60.0
_PREFERRED = ("PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256")
_MAX_REMEMBERED = 1000


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


class BrokerLogin:
    def __init__(self, broker: Any, clock: Any = time.monotonic) -> None:
        self.broker = broker
        self.clock = clock
        self._remembered: dict[Any, Any] = {}
        listeners = list(broker.listeners)
        sasl = [lst for lst in listeners if lst.sasl is not None and
                any(m in lst.sasl.mechanisms for m in _PREFERRED)]
        # a SASL listener without TLS first: the console talks to its own broker
        sasl.sort(key=lambda lst: lst.protocol == SecurityProtocol.SASL_SSL)
        self.sasl_listener = sasl[0] if sasl else None
        self.required = any(lst.protocol != SecurityProtocol.PLAINTEXT for lst in listeners)
        plain = [lst for lst in listeners if lst.protocol == SecurityProtocol.PLAINTEXT]
        self.plain_listener = plain[0] if plain else None
        # TLS without SASL: no password to check a login against
        self.refused = self.required and self.sasl_listener is None
        self.mechanism = None
        if self.sasl_listener is not None:
            self.mechanism = next(m for m in _PREFERRED if m in self.sasl_listener.sasl.mechanisms)

    def _key(self, name: str, password: str) -> bytes:
        return hashlib.sha256(f"{name}\0{password}".encode()).digest()

    async def check(self, name: str, password: str) -> bool:
        """Whether the broker accepts ``name``/``password`` (SASL handshake, remembered)."""
        if not self.required:
            return True
        if self.refused:
            return False
        key, now = self._key(name, password), self.clock()
        if self._remembered.get(key, -1.0) > now:
            return True
        try:
            conn = await self._open(name, password)
        except Exception:     # refused, or the listener is gone: no login either way
            return False
        await conn.close()
        if len(self._remembered) >= _MAX_REMEMBERED:
            self._remembered.clear()
        self._remembered[key] = now + REMEMBER
        return True

    @property
    def listener_name(self) -> str:
        """The listener the console's connections use: another broker's of this name is
        where a cluster broker's console reads from it (cluster_reads.py)."""
        listener = self.sasl_listener if self.required else (
            self.plain_listener or self.broker.listeners[0])
        return str(listener.name if listener is not None else self.broker.listeners[0].name)

    async def connect(self, user: Any, address: Optional[tuple[str, int]] = None) -> Any:
        """A BrokerConnection as ``user`` (versions negotiated) to this broker, or to
        ``address``: another broker's listener of the same name."""
        if self.required:
            conn = await self._open(user.name, user.password or "", address)
        else:
            from ..cluster.network.broker_client import BrokerConnection
            listener = self.plain_listener or self.broker.listeners[0]
            host, port = address or (_loopback(listener.endpoint.host), listener.endpoint.port)
            conn = await BrokerConnection.connect(
                host, port,
                client_id="kqlite-console", connect_timeout=10.0, request_timeout=30.0)
        if conn.api_versions is None:
            await conn.negotiate_versions()
        return conn

    async def _open(self, name: str, password: str,
                    address: Optional[tuple[str, int]] = None) -> Any:
        from ..cluster.network.broker_client import BrokerConnection
        from ..server.authentication.sasl_client import client_for
        listener = self.sasl_listener
        if listener is None:
            raise PermissionError("no SASL listener")
        context: Optional[ssl.SSLContext] = None
        if listener.protocol == SecurityProtocol.SASL_SSL:
            # our own listener on this host: its certificate names the advertised host
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        options = {"username": name, "password": password}
        host, port = address or (_loopback(listener.endpoint.host), listener.endpoint.port)
        return await BrokerConnection.connect(
            host, port,
            client_id="kqlite-console", connect_timeout=10.0, request_timeout=30.0,
            ssl=context, sasl=lambda: client_for(self.mechanism, options))
