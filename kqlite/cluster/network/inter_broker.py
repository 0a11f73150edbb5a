"""How a broker reaches the other brokers of its cluster: the inter-broker listener, and
the TLS and SASL its own connections use there (Kafka's ``inter.broker.listener.name``).

Theory of operation. Every broker registers all its advertised endpoints in ZooKeeper,
and the controller's UpdateMetadata hands them to every broker, per listener. Whatever a
broker sends another broker -- its replica fetchers' fetches, the controller's
LeaderAndIsr, UpdateMetadata and StopReplica, a leader's AlterPartition and a stopping
broker's ControlledShutdown, a coordinator's reads of a partner partition -- goes to the
other broker's endpoint of **this** broker's inter-broker listener name, as Kafka's
``ControllerChannelManager``, ``ReplicaFetcherManager`` and broker-to-controller channel
look it up (``broker.node(config.interBrokerListenerName)``). A broker that lacks that
listener cannot be reached.

The connection speaks the listener's security protocol with the listener's own settings
(``listener.name.<l>.ssl.*`` over ``ssl.*``, kqlite/server/authentication/listener_security.py
``client_settings``):

  PLAINTEXT        a TCP connection
  SSL              TLS with a client context: the listener's trust store checks the other
                   broker's certificate (and its host name, unless
                   ``ssl.endpoint.identification.algorithm`` is empty); the listener's key
                   store is presented when the other side asks for a certificate
  SASL_PLAINTEXT   SASL with ``sasl.mechanism.inter.broker.protocol``, as the ``username``
                   and ``password`` of that mechanism's JAAS entry on the listener
  SASL_SSL         both

so a broker whose credentials the others refuse is refused on every connection it makes
(and says why in its log, as the others do in theirs), while the others go on.
"""

from typing import NamedTuple

from ...protocol.security import SecurityProtocol
from ...server import listeners as L
from ...server.authentication.listener_security import SecurityConfigError, client_settings
from ...server.authentication.sasl_client import client_for
from .broker_client import BrokerConnection

__all__ = ["InterBrokerListener", "from_properties"]


class InterBrokerListener(NamedTuple):
    """The listener name other brokers are reached on, and how to connect there."""
    name: str
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: object = None       # an ssl.SSLContext for SSL and SASL_SSL
    sasl_mechanism: str = None       # for SASL_PLAINTEXT and SASL_SSL
    sasl_options: dict = None        # the mechanism's JAAS options (username, password)

    @classmethod
    def plaintext(cls, name="PLAINTEXT"):
        return cls(name)

    def sasl(self):
        """A function making a new mechanism client for each (re-)authentication, or None
        without SASL."""
        if self.sasl_mechanism is None:
            return None
        return lambda: client_for(self.sasl_mechanism, self.sasl_options)

    def endpoint_of(self, info):
        """``(host, port)`` of a registered broker (a znodes.BrokerInfo) on this listener,
        or None when it has no such listener."""
        e = info.endpoint(self.name)
        return (e.host, e.port) if e is not None else None

    async def connect(self, host, port, **options):
        """A :class:`BrokerConnection` to ``host:port`` of this listener, authenticated;
        ``options`` are :meth:`BrokerConnection.connect`'s."""
        return await BrokerConnection.connect(host, port, ssl=self.ssl_context,
                                              sasl=self.sasl(), **options)


def from_properties(properties, listeners):
    """The inter-broker listener of a broker with ``listeners`` (BrokerListener s) and Kafka
    ``properties``: ``inter.broker.listener.name``, else the first advertised listener of
    ``security.inter.broker.protocol`` (server/listeners.py), with its client settings.
    SecurityConfigError names what cannot be used."""
    advertised = [listener.advertised for listener in listeners]
    try:
        chosen = L.inter_broker_listener(advertised, properties.get("inter.broker.listener.name"),
                                         properties.get("security.inter.broker.protocol"))
    except L.ListenerConfigError as exc:
        raise SecurityConfigError(exc.key, str(exc).split(": ", 1)[1]) from None
    listener = next(lsn for lsn in listeners if lsn.name == chosen.listener_name)
    context, sasl = client_settings(properties, listener)
    if sasl is None:
        return InterBrokerListener(listener.name, listener.protocol, context)
    mechanism, entry = sasl
    return InterBrokerListener(listener.name, listener.protocol, context, mechanism,
                               dict(entry.options) if entry is not None else {})
