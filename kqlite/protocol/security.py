"""Who is at the other end of a connection, and over what: Kafka's security protocols and
principals as values.

Theory of operation. A Kafka broker listens on named listeners; each speaks one
:class:`SecurityProtocol` (plaintext, TLS, SASL over either), whose id goes on the wire in
UpdateMetadata's broker endpoints. Authentication on a connection ends with a
:class:`KafkaPrincipal`, ``Type:name`` (``User:alice``): the identity ACLs name and
authorization checks. A connection that authenticates nothing (PLAINTEXT, or TLS without
a client certificate) is :data:`ANONYMOUS`, ``User:ANONYMOUS``, as Kafka's
``DefaultKafkaPrincipalBuilder`` makes it.

Sources: ``org.apache.kafka.common.security.auth.{SecurityProtocol,KafkaPrincipal}`` (Kafka 3.9).
"""

import enum
from typing import NamedTuple

__all__ = ["SecurityProtocol", "KafkaPrincipal", "ANONYMOUS", "USER_TYPE"]

USER_TYPE = "User"    # WIRE: Kafka's KafkaPrincipal.USER_TYPE


class SecurityProtocol(enum.IntEnum):
    """A listener's protocol (``SecurityProtocol.java``)."""
    # WIRE: Kafka-defined ids (an int16 in UpdateMetadata endpoints).
    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


class KafkaPrincipal(NamedTuple):
    """An authenticated identity: ``principal_type`` (``User`` for every principal Kafka's
    own authenticators make) and ``name``. ``str()`` is Kafka's ``Type:name``, the form
    ACLs and the ACL APIs use."""
    principal_type: str
    name: str

    def __str__(self):
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
