"""The blocking admin client of the CLI commands that talk to brokers
(``--bootstrap-server``, ``--command-config``), as Kafka's tools build their ``Admin``.

Theory of operation. A command makes one :class:`AdminClient` and calls :meth:`call` as
many times as it needs; each call runs on the client's own event loop (an
``asyncio.Runner``), so the command stays plain blocking code while the connections are
the inter-broker client's :class:`~kqlite.cluster.network.broker_client.BrokerConnection`
(itself the sans-I/O ``kqlite.protocol.ClientConnection`` moving bytes over asyncio):
frames, version negotiation, TLS and SASL are the ones the brokers use among themselves.

- **Where a request goes.** ``node=None`` is the bootstrap broker: the first of the
  comma-separated ``--bootstrap-server`` entries that accepts a connection, as Kafka's
  admin client bootstraps. Other requests name a broker, ``(host, port)`` from a Metadata
  or FindCoordinator answer (the partition leader for DescribeProducers and
  WriteTxnMarkers, the coordinator for DescribeTransactions, every broker for
  ListTransactions). One connection per broker, opened on first use, kept until
  :meth:`close`.
- **Security** (``--command-config FILE``, a Java properties file as Kafka's tools take
  it): ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL);
  ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) with the
  ``username``/``password`` of ``sasl.jaas.config``; the client ``ssl.*`` settings
  (trust store, key store for a client certificate, ``ssl.endpoint.identification.algorithm``)
  read by the broker's own ``tls.client_context``. Anything else in the file is ignored,
  as an admin client ignores the producer's and consumer's settings. A file that names
  what cannot be used raises :class:`AdminConfigError`.
- **Failures** are :class:`AdminClientError` with the broker named (connection refused,
  authentication refused, timeout, a version the broker does not serve). An error *code*
  in an answer is the caller's to report: it knows which of Kafka's errors it expects.
"""

import asyncio

from ..errors import KqliteError
from ..protocol.security import SecurityProtocol

__all__ = ["AdminClient", "AdminClientError", "AdminConfigError", "parse_bootstrap",
           "read_command_config"]

_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class AdminClientError(KqliteError):
    """A broker could not be reached or asked (its message names it)."""


class AdminConfigError(ValueError):
    """``--bootstrap-server`` or ``--command-config`` that cannot be used."""


def parse_bootstrap(text):
    """``[(host, port)]`` of a ``--bootstrap-server`` value (``HOST:PORT[,HOST:PORT...]``;
    an IPv6 host in brackets)."""
    out = []
    for entry in (text or "").split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise AdminConfigError(f"--bootstrap-server takes HOST:PORT[,HOST:PORT...], not "
                                   f"{text!r}")
        out.append((host.strip("[]"), int(port)))
    return out


class Security:
    """How to connect: the TLS client context (None: no TLS) and the SASL client maker."""

    def __init__(self, ssl=None, sasl=None):
        self.ssl = ssl
        self.sasl = sasl


def read_command_config(path):
    """The :class:`Security` of a ``--command-config`` properties file (None: PLAINTEXT)."""
    from .server_properties import PropertiesError, read_properties
    if path is None:
        return Security()
    try:
        with open(path, encoding="utf-8") as f:
            settings = read_properties(f.read())
    except OSError as exc:
        raise AdminConfigError(f"--command-config {path}: {exc.strerror or exc}") from None
    except PropertiesError as exc:
        raise AdminConfigError(f"--command-config {path}: {exc}") from None
    return security_of(settings, where=f"--command-config {path}")


def security_of(settings, where="the admin client's settings"):
    """The :class:`Security` of Kafka client ``settings`` (see the module docstring)."""
    name = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    try:
        protocol = SecurityProtocol[name]
    except KeyError:
        raise AdminConfigError(f"{where}: security.protocol {name!r} is not one of "
                               f"{', '.join(p.name for p in SecurityProtocol)}") from None
    ssl_context = sasl = None
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        from ..server.authentication.tls import TlsConfigError, client_context
        try:
            ssl_context = client_context(settings)
        except (TlsConfigError, OSError) as exc:
            raise AdminConfigError(f"{where}: {exc}") from None
    if protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
        sasl = _sasl_of(settings, where)
    return Security(ssl_context, sasl)


def _sasl_of(settings, where):
    from ..server.authentication.jaas import JaasError, parse_jaas
    from ..server.authentication.sasl_client import client_for
    mechanism = settings.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in _SASL_MECHANISMS:
        raise AdminConfigError(f"{where}: sasl.mechanism {mechanism!r} is not one of "
                               f"{', '.join(_SASL_MECHANISMS)}")
    text = settings.get("sasl.jaas.config")
    if text is None:
        raise AdminConfigError(f"{where}: SASL needs sasl.jaas.config")
    try:
        options = parse_jaas(text).options
    except JaasError as exc:
        raise AdminConfigError(f"{where}: sasl.jaas.config: {exc}") from None
    if mechanism != "OAUTHBEARER" and not {"username", "password"} <= set(options):
        raise AdminConfigError(f"{where}: sasl.jaas.config needs username and password")
    return lambda: client_for(mechanism, options)


class AdminClient:
    """Blocking requests to the brokers of a cluster; see the module docstring.
    ``bootstrap``: the ``--bootstrap-server`` text; ``security``: a :class:`Security`;
    ``timeout``: seconds to connect and to wait for each answer."""

    def __init__(self, bootstrap, *, security=None, timeout=30.0, client_id="kqlite-admin"):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security or Security()
        self.timeout = timeout
        self.client_id = client_id
        self._runner = asyncio.Runner()
        self._connections = {}       # (host, port) -> BrokerConnection
        self._bootstrap_node = None

    def call(self, api_key, body, *, versions=None, node=None):
        """Send one request (at the highest version the broker, the codec and ``versions``
        share) to ``node`` (None: the bootstrap broker) and return the answer's body."""
        return self._runner.run(self._call(api_key, body, versions, node))

    async def _call(self, api_key, body, versions, node):
        from ..cluster.network.broker_client import BrokerClientError
        try:
            conn = await (self._bootstrap() if node is None else self._connect(node))
            return await conn.request(api_key, conn.version_for(api_key, versions), body)
        except BrokerClientError as exc:
            raise AdminClientError(str(exc)) from None

    async def _bootstrap(self):
        from ..cluster.network.broker_client import BrokerConnectError
        if self._bootstrap_node is not None:
            return await self._connect(self._bootstrap_node)
        failure = None
        for node in self.bootstrap:
            try:
                conn = await self._connect(node)
            except BrokerConnectError as exc:
                failure = exc
                continue
            self._bootstrap_node = node
            return conn
        raise failure

    async def _connect(self, node):
        from ..cluster.network.broker_client import BrokerConnection
        conn = self._connections.get(node)
        if conn is not None and not conn.closed:
            return conn
        conn = await BrokerConnection.connect(
            *node, client_id=self.client_id, connect_timeout=self.timeout,
            request_timeout=self.timeout, ssl=self.security.ssl, sasl=self.security.sasl)
        try:
            if conn.api_versions is None:
                await conn.negotiate_versions()
        except BaseException:
            await conn.close()
            raise
        self._connections[node] = conn
        return conn

    def close(self):
        async def close_all():
            for conn in self._connections.values():
                await conn.close()
        try:
            self._runner.run(close_all())
        finally:
            self._connections.clear()
            self._runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
