"""What a handler knows about the request it serves besides its body: who sent it, over
which listener, from where, and which API in which version (Kafka's ``RequestContext``).

Theory of operation. Two values, one per lifetime:

- a :class:`Session` per connection: the principal and the listener the client reached,
  and its address. The connection holds it and is the one place it is set: it starts
  ``User:ANONYMOUS`` (:meth:`Session.plaintext`) and is replaced once the listener's
  authentication (a TLS client certificate, a SASL exchange) ends
  (:meth:`Session.authenticated`), so every request after that carries the principal it
  established.
- a :class:`RequestContext` per request, made by the connection from its session and the
  request header before the handler runs, and passed to the handler as
  ``handler(broker, context, request)``. It is immutable: an authorization check, an
  audit line or a group member's client host read the same context however long the
  request waits.

The authorizer (``kqlite.server.authorization``) is asked with a context, as Kafka's
``Authorizer.authorize(RequestContext, actions)`` is.
"""

from dataclasses import dataclass

from ..protocol.security import ANONYMOUS, KafkaPrincipal, SecurityProtocol

__all__ = ["Session", "RequestContext", "PLAINTEXT_LISTENER"]

PLAINTEXT_LISTENER = "PLAINTEXT"    # Kafka's listener name when only listeners=PLAINTEXT://


@dataclass(frozen=True)
class Session:
    """One connection's identity: ``principal`` as authentication left it, the
    ``listener_name`` and ``security_protocol`` of the listener the client connected to,
    and the client's address (``client_host`` is the IP address as text, as ACL host
    rules compare it)."""
    principal: KafkaPrincipal
    listener_name: str
    security_protocol: SecurityProtocol
    client_host: str
    client_port: int

    @classmethod
    def plaintext(cls, peer):
        """The session of a PLAINTEXT connection from ``peer`` (a socket's peer address, or
        None when the platform gave none): anonymous, as Kafka's
        ``DefaultKafkaPrincipalBuilder`` makes every unauthenticated client."""
        host, port = (peer[0], peer[1]) if peer else ("unknown", -1)
        return cls(ANONYMOUS, PLAINTEXT_LISTENER, SecurityProtocol.PLAINTEXT, host, port)

    def authenticated(self, principal, listener_name, security_protocol):
        """This session on ``listener_name`` once its authentication established
        ``principal`` (ANONYMOUS where the listener authenticates nobody)."""
        return Session(principal, listener_name, security_protocol, self.client_host,
                       self.client_port)


@dataclass(frozen=True)
class RequestContext:
    """One request's context: its connection's session and its header."""
    principal: KafkaPrincipal
    listener_name: str
    security_protocol: SecurityProtocol
    client_host: str
    client_port: int
    client_id: str
    api_key: int            # an ApiKey for every key Kafka defines
    api_version: int
    correlation_id: int

    @classmethod
    def of(cls, session, request):
        """The context of ``request`` (a decoded ``kqlite.protocol.Request``) received on a
        connection whose identity is ``session``."""
        return cls(session.principal, session.listener_name, session.security_protocol,
                   session.client_host, session.client_port, request.client_id or "",
                   request.api_key, request.api_version, request.correlation_id)
