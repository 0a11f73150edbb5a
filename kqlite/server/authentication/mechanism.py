"""What every SASL mechanism's server side is, and how it fails (Kafka's ``SaslServer``
and the two exceptions ``SaslServerAuthenticator`` tells apart).

Theory of operation. A mechanism's server is fed the client's tokens one at a time
(:meth:`MechanismServer.respond`) and answers each with a challenge (possibly empty)
until it is :attr:`~MechanismServer.complete`; then :attr:`~MechanismServer.principal_name`
names who authenticated, and :attr:`~MechanismServer.expiry_ms` is when the credential
stops being valid (None when it never does: PLAIN, SCRAM), which bounds the session
(KIP-368). A mechanism is a pure object: the clock is passed in, credentials are looked up
in memory, nothing waits.

A failure is one of two exceptions, as in Kafka:

- :class:`AuthenticationFailed` (Kafka's ``SaslAuthenticationException``): its text is
  sent to the client (PLAIN's "Invalid username or password", an OAUTHBEARER token's
  error);
- :class:`CredentialsRejected` (a plain ``SaslException``): the client gets only the
  fixed :func:`generic_failure` text, which cannot tell an unknown user from a wrong
  password.
"""

__all__ = ["MechanismServer", "AuthenticationFailed", "CredentialsRejected",
           "generic_failure"]


class AuthenticationFailed(Exception):
    """A failure whose message the client is shown."""


class CredentialsRejected(Exception):
    """A failure the client is told about only in general terms; the message is logged."""


def generic_failure(mechanism):
    """Kafka's text for a failure whose reason is not shown
    (``SaslServerAuthenticator.handleSaslToken``)."""
    return (f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


class MechanismServer:
    """The server side of one exchange of one mechanism; subclasses set ``mechanism`` and
    implement :meth:`respond`."""
    mechanism = ""

    def __init__(self):
        self.complete = False
        self.principal_name = None
        self.expiry_ms = None

    def respond(self, token, now_ms):
        """The challenge answering the client's ``token`` (bytes); raises
        AuthenticationFailed or CredentialsRejected."""
        raise NotImplementedError
