"""A stand-in for authentication in tests of in-process brokers: each connection gets the
principal the test chose for it.

The broker makes a connection's Session in one place (``_Connection``, with
``Session.plaintext(peer)``); :meth:`Principals.installed` puts a Session class there whose
``plaintext`` gives the connection from a registered client port the principal registered
for it, and every other connection ``User:ANONYMOUS`` as before. :meth:`Principals.client`
binds a client socket first, registers its port, then connects, so the broker can never
see the connection before the test has said who it is.
"""

import contextlib
import dataclasses
import socket

from broker_process import RawClient

from kqlite.protocol.security import KafkaPrincipal
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
                    dataclasses.replace(session, principal=chosen)

        broker_module.Session = ChosenSession
        try:
            yield self
        finally:
            broker_module.Session = original
