"""Each listener's security, from Kafka's properties: its TLS context, how a client
certificate names a principal, and its SASL mechanisms with their JAAS entries.

Theory of operation. ``build_listeners(properties)`` turns the broker's Kafka properties (a
``{name: text}`` dict, as ``server.properties`` and ``--override`` give them) into one
:class:`BrokerListener` per entry of ``listeners``, with its advertised endpoint. A
security setting is looked up per listener as Kafka's ``ListenerName.configPrefix`` does:
``listener.name.<lower-case name>.<key>`` first, then ``<key>``; a SASL mechanism's JAAS
entry only as ``listener.name.<l>.<lower-case mechanism>.sasl.jaas.config`` (Kafka's
broker reads no unprefixed one), and ``connections.max.reauth.ms`` may be given per
mechanism too. Everything is checked here, at start, and a setting that cannot be used
is an error naming it:

  sasl.enabled.mechanisms on a SASL listener   each of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
                                               OAUTHBEARER (Kafka's default, GSSAPI, needs
                                               Kerberos, which kqlite does not speak)
  PLAIN enabled                                a PlainLoginModule entry with user_ options
  a JAAS entry                                 of the mechanism's login module
  SSL / SASL_SSL                               a usable key store (tls.py)
  ssl.client.auth on SASL_SSL                  only the listener-prefixed value counts
                                               (KIP-684), the broker-wide one is ignored
  ssl.principal.mapping.rules                  parses (principal_mapping.py)

A SASL listener's mechanisms are made per connection (:meth:`BrokerListener.mechanisms`),
SCRAM's over the broker's credential store.
"""

import logging
from typing import NamedTuple

from ...protocol.security import SecurityProtocol
from .. import listeners as L
from . import oauthbearer, plain, scram, scram_server, tls
from .jaas import LOGIN_MODULES, JaasError, parse_jaas
from .principal_mapping import DEFAULT_RULES, PrincipalMapper

__all__ = ["BrokerListener", "SaslSettings", "SecurityConfigError", "build_listeners",
           "listener_value", "plaintext_listener", "SUPPORTED_MECHANISMS",
           "DEFAULT_MAX_RECEIVE_SIZE", "DEFAULT_FAILED_AUTHENTICATION_DELAY_MS",
           "client_settings"]

log = logging.getLogger("kqlite.server.authentication")

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
DEFAULT_MAX_RECEIVE_SIZE = 524288            # Kafka's sasl.server.max.receive.size
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100  # Kafka's connection.failed.authentication.delay.ms
_SSL_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
             "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
             "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
             "ssl.truststore.certificates", "ssl.enabled.protocols", "ssl.protocol",
             "ssl.cipher.suites", "ssl.endpoint.identification.algorithm")


class SecurityConfigError(ValueError):
    """A security setting that cannot be used; ``key`` names the property."""

    def __init__(self, key, message):
        super().__init__(f"{key}: {message}")
        self.key = key


class SaslSettings(NamedTuple):
    mechanisms: tuple          # enabled, in sasl.enabled.mechanisms order
    jaas: dict                 # mechanism -> JaasEntry (or absent)
    reauth_ms: dict            # mechanism -> connections.max.reauth.ms
    max_receive_size: int


class BrokerListener(NamedTuple):
    """One listener: where it binds, what it advertises, and its security."""
    endpoint: L.Endpoint
    advertised: L.Endpoint
    ssl_context: object = None          # an ssl.SSLContext for SSL and SASL_SSL
    principal_mapper: object = None     # PrincipalMapper for SSL
    sasl: SaslSettings = None           # for SASL_PLAINTEXT and SASL_SSL

    @property
    def name(self):
        return self.endpoint.listener_name

    @property
    def protocol(self):
        return self.endpoint.protocol

    def mechanisms(self, credentials):
        """``{mechanism: factory}`` for one connection's SASL exchange."""
        factories = {}
        for name in self.sasl.mechanisms:
            entry = self.sasl.jaas.get(name)
            options = entry.options if entry is not None else {}
            if name == plain.MECHANISM:
                users = plain.users_of(options)
                factories[name] = lambda users=users: plain.PlainServer(users)
            elif name == oauthbearer.MECHANISM:
                factories[name] = lambda options=options: oauthbearer.OAuthBearerServer(options)
            else:
                mechanism = scram.MECHANISMS[name]
                factories[name] = lambda m=mechanism: scram_server.ScramServer(
                    m, credentials.lookup, credentials.secret)
        return factories


def plaintext_listener(host, port, advertised_host=None):
    """kqlite's default: one PLAINTEXT listener (``--listen HOST:PORT``)."""
    endpoint = L.Endpoint("PLAINTEXT", host, port, SecurityProtocol.PLAINTEXT)
    return BrokerListener(endpoint, endpoint._replace(host=advertised_host or host))


def listener_value(properties, listener, key, mechanism=None, default=None):
    """``key`` for ``listener`` (a name): the mechanism- then listener-prefixed value,
    then the broker-wide one."""
    prefix = f"listener.name.{listener.lower()}."
    candidates = []
    if mechanism is not None:
        candidates.append(f"{prefix}{mechanism.lower()}.{key}")
    candidates += [prefix + key, key]
    for candidate in candidates:
        if candidate in properties:
            return properties[candidate]
    return default


def _int(properties, key, default, listener=None, mechanism=None):
    text = listener_value(properties, listener, key, mechanism) if listener else \
        properties.get(key)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise SecurityConfigError(key, f"expected a non-negative integer, not {text!r}")
    return value


def _ssl_settings(properties, name, protocol):
    settings = {key: listener_value(properties, name, key) for key in _SSL_KEYS}
    prefixed = f"listener.name.{name.lower()}.ssl.client.auth"
    if protocol == SecurityProtocol.SASL_SSL:
        if "ssl.client.auth" in properties and prefixed not in properties:
            log.warning("ssl.client.auth is ignored on the SASL_SSL listener %s: only %s "
                        "turns on client certificates there (KIP-684)", name, prefixed)
        settings["ssl.client.auth"] = properties.get(prefixed)
    else:
        settings["ssl.client.auth"] = listener_value(properties, name, "ssl.client.auth")
    return settings


def _sasl_settings(properties, name):
    text = listener_value(properties, name, "sasl.enabled.mechanisms", default="GSSAPI")
    mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported or not mechanisms:
        raise SecurityConfigError("sasl.enabled.mechanisms", f"listener {name}: "
                                  f"{', '.join(unsupported) or 'none'} cannot be served "
                                  f"(kqlite serves {', '.join(SUPPORTED_MECHANISMS)})")
    jaas, reauth = {}, {}
    for mechanism in mechanisms:
        key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        text = properties.get(key)
        if text is not None:
            try:
                entry = parse_jaas(text)
            except JaasError as exc:
                raise SecurityConfigError(key, str(exc)) from None
            if entry.login_module != LOGIN_MODULES[mechanism]:
                raise SecurityConfigError(key, f"{mechanism} needs "
                                               f"{LOGIN_MODULES[mechanism]}, not "
                                               f"{entry.login_module}")
            jaas[mechanism] = entry
        if mechanism == plain.MECHANISM and \
                (text is None or not plain.users_of(jaas[mechanism].options)):
            raise SecurityConfigError(key, "PLAIN needs a PlainLoginModule entry with its "
                                           "users as user_<name>=\"<password>\" options")
        reauth[mechanism] = _int(properties, "connections.max.reauth.ms", 0, name, mechanism)
    return SaslSettings(mechanisms, jaas, reauth,
                        _int(properties, "sasl.server.max.receive.size",
                             DEFAULT_MAX_RECEIVE_SIZE) or DEFAULT_MAX_RECEIVE_SIZE)


def build_listeners(properties):
    """The broker's listeners from its properties (``listeners`` required)."""
    try:
        protocol_map = L.parse_protocol_map(properties["listener.security.protocol.map"]) \
            if properties.get("listener.security.protocol.map") else L.DEFAULT_PROTOCOL_MAP
        endpoints = L.check_listeners(L.parse_endpoints(properties["listeners"],
                                                        protocol_map))
        advertised_text = properties.get("advertised.listeners")
        advertised = L.advertised_endpoints(
            endpoints,
            L.parse_endpoints(advertised_text, protocol_map, "advertised.listeners")
            if advertised_text else None)
    except L.ListenerConfigError as exc:
        raise SecurityConfigError(exc.key, str(exc).split(": ", 1)[1]) from None
    by_name = {e.listener_name: e for e in advertised}
    listeners = []
    for endpoint in endpoints:
        name, protocol = endpoint.listener_name, endpoint.protocol
        ssl_context = mapper = sasl = None
        if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
            try:
                ssl_context = tls.server_context(_ssl_settings(properties, name, protocol))
            except tls.TlsConfigError as exc:
                raise SecurityConfigError(exc.key, f"listener {name}: "
                                                   f"{str(exc).split(': ', 1)[1]}") from None
        if protocol == SecurityProtocol.SSL:
            rules = listener_value(properties, name, "ssl.principal.mapping.rules",
                                   default=DEFAULT_RULES)
            try:
                mapper = PrincipalMapper(rules)
            except ValueError as exc:
                raise SecurityConfigError("ssl.principal.mapping.rules", str(exc)) from None
        if protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
            sasl = _sasl_settings(properties, name)
        listeners.append(BrokerListener(endpoint, by_name.get(name, endpoint), ssl_context,
                                        mapper, sasl))
    return listeners


def client_settings(properties, listener):
    """What this broker needs to connect to other brokers' ``listener`` (a
    BrokerListener): ``(ssl client context or None, (mechanism, JaasEntry) or None)``,
    from the listener's settings and ``sasl.mechanism.inter.broker.protocol``."""
    context = None
    if listener.protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        settings = {key: listener_value(properties, listener.name, key) for key in _SSL_KEYS}
        try:
            context = tls.client_context(settings)
        except tls.TlsConfigError as exc:
            raise SecurityConfigError(exc.key, f"inter-broker listener {listener.name}: "
                                               f"{str(exc).split(': ', 1)[1]}") from None
    if listener.sasl is None:
        return context, None
    mechanism = properties.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").upper()
    if mechanism not in listener.sasl.mechanisms:
        raise SecurityConfigError("sasl.mechanism.inter.broker.protocol",
                                  f"{mechanism} is not enabled on the inter-broker "
                                  f"listener {listener.name}")
    entry = listener.sasl.jaas.get(mechanism)
    if mechanism != oauthbearer.MECHANISM and (
            entry is None or "username" not in entry.options or "password" not in entry.options):
        raise SecurityConfigError(
            f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config",
            "the inter-broker mechanism's entry needs the broker's own username and "
            "password options")
    return context, (mechanism, entry)
