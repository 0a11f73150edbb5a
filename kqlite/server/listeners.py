"""A broker's listeners as Kafka configures them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and ``inter.broker.listener.name``.

Theory of operation. A listener is a name, a security protocol and an address. The broker
binds one socket set per listener (``listeners``) and tells clients, in Metadata,
FindCoordinator and DescribeCluster, the advertised address of the listener their request
arrived on (``advertised.listeners``, each listener's own address when absent). Its
registration in ZooKeeper carries every advertised endpoint and the protocol map, and
other brokers reach it on the inter-broker listener. Kafka's rules, one refusal each
(``SocketServerConfigs``, ``KafkaConfig``, ``EndPoint``), every refusal a
:class:`ListenerConfigError` naming the property:

  an endpoint is not NAME://HOST:PORT            listeners / advertised.listeners
  a port outside 0-65535                         listeners / advertised.listeners
  a listener name twice                          listeners / advertised.listeners
  two listeners on one port (other than one
  IPv4 and one IPv6 address)                     listeners
  a name the protocol map does not have          listener.security.protocol.map
  the map names a protocol Kafka does not have   listener.security.protocol.map
  an advertised name that is not a listener      advertised.listeners
  0.0.0.0 advertised                             advertised.listeners
  the inter-broker name is not advertised        inter.broker.listener.name
  both inter-broker settings given               inter.broker.listener.name

Names are case-insensitive and kept upper-case (Kafka's ``ListenerName.normalised``).
"""

import ipaddress
import re
import socket
from typing import NamedTuple

from ..protocol.security import SecurityProtocol

__all__ = ["Endpoint", "ListenerConfigError", "DEFAULT_PROTOCOL_MAP", "parse_protocol_map",
           "parse_endpoints", "check_listeners", "advertised_endpoints",
           "inter_broker_listener", "format_endpoint"]

# WIRE: Kafka's default listener.security.protocol.map.
DEFAULT_PROTOCOL_MAP = {p.name: p for p in SecurityProtocol}
_ENDPOINT = re.compile(r"(?P<name>[^:/]+)://\[?(?P<host>[0-9a-zA-Z\-%._:]*?)\]?:(?P<port>-?[0-9]+)")


class ListenerConfigError(ValueError):
    """A listener setting Kafka would refuse; ``key`` is the property."""

    def __init__(self, key, message):
        super().__init__(f"{key}: {message}")
        self.key = key


class Endpoint(NamedTuple):
    """One listener's address: ``host`` "" binds every interface."""
    listener_name: str
    host: str
    port: int
    protocol: SecurityProtocol

    def __str__(self):
        return format_endpoint(self.listener_name, self.host, self.port)


def format_endpoint(name, host, port):
    """``NAME://host:port`` as Kafka writes it, an IPv6 host in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"{name}://{shown}:{port}"


def parse_protocol_map(text, key="listener.security.protocol.map"):
    """``{NAME: SecurityProtocol}`` from ``NAME:PROTOCOL,...``."""
    mapping = {}
    for item in _items(text):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ListenerConfigError(key, f"{item!r} is not NAME:PROTOCOL")
        if protocol not in SecurityProtocol.__members__:
            raise ListenerConfigError(key, f"{protocol!r} is not a security protocol "
                                           f"(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)")
        if name in mapping:
            raise ListenerConfigError(key, f"listener {name} is mapped twice")
        mapping[name] = SecurityProtocol[protocol]
    return mapping


def _items(text):
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_endpoints(text, protocol_map, key="listeners"):
    """The endpoints of a ``listeners`` or ``advertised.listeners`` value."""
    endpoints = []
    for item in _items(text):
        match = _ENDPOINT.fullmatch(item)
        if match is None:
            raise ListenerConfigError(key, f"{item!r} is not NAME://HOST:PORT")
        name, port = match["name"].upper(), int(match["port"])
        if not 0 <= port <= 65535:
            raise ListenerConfigError(key, f"port {port} of {item!r} is not in 0-65535")
        if name not in protocol_map:
            raise ListenerConfigError(
                "listener.security.protocol.map",
                f"listener {name} (in {key}) has no security protocol in the map")
        if any(e.listener_name == name for e in endpoints):
            raise ListenerConfigError(key, f"listener name {name} is used twice")
        endpoints.append(Endpoint(name, match["host"], port, protocol_map[name]))
    if not endpoints:
        raise ListenerConfigError(key, "no listener is given")
    return endpoints


def _family(host):
    try:
        return ipaddress.ip_address(host.split("%")[0]).version
    except ValueError:
        return None


def check_listeners(endpoints):
    """Kafka's rule for ``listeners``: no two on one port, except one IPv4 and one IPv6
    address (port 0, a free port each, never clashes)."""
    by_port = {}
    for e in endpoints:
        if e.port == 0:
            continue
        by_port.setdefault(e.port, []).append(e)
    for port, sharing in by_port.items():
        families = [_family(e.host) for e in sharing]
        if len(sharing) > 2 or (len(sharing) == 2 and set(families) != {4, 6}):
            raise ListenerConfigError("listeners", f"listeners "
                                      f"{', '.join(e.listener_name for e in sharing)} share "
                                      f"port {port}")
    return endpoints


def advertised_endpoints(listeners, advertised=None):
    """The advertised endpoints: ``advertised`` (parsed ``advertised.listeners``) checked
    against the listeners, or each listener itself with an empty host replaced by this
    machine's name (as Kafka uses the canonical host name)."""
    names = {e.listener_name for e in listeners}
    if advertised is None:
        return [e._replace(host=e.host or socket.getfqdn()) for e in listeners]
    for e in advertised:
        if e.listener_name not in names:
            raise ListenerConfigError("advertised.listeners",
                                      f"{e.listener_name} is not one of the listeners")
        if e.host in ("0.0.0.0", "::"):
            raise ListenerConfigError("advertised.listeners",
                                      f"{e} advertises an address no client can reach")
    return [e._replace(host=e.host or socket.getfqdn()) for e in advertised]


def inter_broker_listener(advertised, name=None, protocol=None):
    """The listener other brokers reach this one on: ``inter.broker.listener.name``, else
    the first advertised listener of ``security.inter.broker.protocol`` (PLAINTEXT by
    default), as Kafka picks it."""
    if name is not None and protocol is not None:
        raise ListenerConfigError("inter.broker.listener.name",
                                  "set either it or security.inter.broker.protocol, not both")
    if name is not None:
        name = name.upper()
        for e in advertised:
            if e.listener_name == name:
                return e
        raise ListenerConfigError("inter.broker.listener.name",
                                  f"{name} is not an advertised listener")
    wanted = SecurityProtocol[protocol.upper()] if protocol else SecurityProtocol.PLAINTEXT
    for e in advertised:
        if e.protocol == wanted:
            return e
    if protocol is None and len(advertised) == 1:
        return advertised[0]
    raise ListenerConfigError("inter.broker.listener.name",
                              f"no advertised listener speaks {wanted.name}; name the "
                              f"inter-broker listener")
