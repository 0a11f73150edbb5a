"""A stand-in for authentication in tests of in-process brokers: each connection gets the
principal the test chose for it.

The broker makes a connection's Session in one place (``_Connection``: ``Session.plaintext(peer)``,
then ``authenticated(principal, ...)`` with what the listener established, ANONYMOUS on a
PLAINTEXT listener); :meth:`Principals.installed` puts a Session class there whose sessions
of a registered client port carry the principal registered for it instead of ANONYMOUS,
and every other connection's are as before. (A real login: tests/server/test_acl_scram.py.) :meth:`Principals.client`
binds a client socket first, registers its port, then connects, so the broker can never
see the connection before the test has said who it is.
"""

import contextlib
import dataclasses
import socket

from broker_process import RawClient

from kqlite.protocol.security import ANONYMOUS, KafkaPrincipal
from kqlite.server import broker as broker_module


def principal(text):
    kind, name = text.split(":", 1)
    return KafkaPrincipal(kind, name)


class PrincipalClient(RawClient):
    """A RawClient whose connection the broker sees as ``who``."""

    def __init__(self, broker, who, principals, timeout=10):
        sock = socket.socket()
        sock.settimeout(timeout)
        sock.bind(("127.0.0.1", 0))
        principals.by_port[sock.getsockname()[1]] = principal(who)
        sock.connect(("127.0.0.1", broker.port))
        self.sock = sock
        self.correlation = 0
        self.who = who


class Principals:
    def __init__(self):
        self.by_port = {}

    def client(self, broker, who):
        return PrincipalClient(broker, who, self)

    @contextlib.contextmanager
    def installed(self):
        original = broker_module.Session
        by_port = self.by_port

        class ChosenSession(original):
            @classmethod
            def plaintext(cls, peer):
                session = original.plaintext(peer)
                chosen = by_port.get(peer[1]) if peer else None
                return session if chosen is None else \
                    ChosenSession(**dict(vars(session), principal=chosen))

            def authenticated(self, principal, listener_name, security_protocol):
                session = original.authenticated(self, principal, listener_name,
                                                 security_protocol)
                if principal == ANONYMOUS and self.principal != ANONYMOUS:
                    session = dataclasses.replace(session, principal=self.principal)
                return session

        broker_module.Session = ChosenSession
        try:
            yield self
        finally:
            broker_module.Session = original
