"""SASL/PLAIN's server side (RFC 4616) against the users of the listener's JAAS entry, as
Kafka's ``PlainSaslServer`` and ``PlainServerCallbackHandler`` check them.

The client sends one message, ``[authzid] NUL authcid NUL passwd`` in UTF-8; the users are
the ``user_<name>="<password>"`` options of the listener's
``org.apache.kafka.common.security.plain.PlainLoginModule`` entry (its ``username`` and
``password`` are the broker's own, for the connections it makes). Every refusal is shown to
the client, and an unknown user and a wrong password get the same text. The password is
compared in constant time over the whole supplied password, an unknown user's against a
placeholder, so the time taken tells nothing either.

Kafka's rules, one failure each:

  not three NUL-separated fields     CredentialsRejected  "Invalid SASL/PLAIN response"
  empty user name                    AuthenticationFailed "username not specified"
  empty password                     AuthenticationFailed "password not specified"
  authzid given and not the user     AuthenticationFailed "... different from username"
  unknown user or wrong password     AuthenticationFailed "Invalid username or password"
"""

import hmac

from .mechanism import AuthenticationFailed, CredentialsRejected, MechanismServer

__all__ = ["PlainServer", "MECHANISM", "users_of"]

MECHANISM = "PLAIN"
_USER_PREFIX = "user_"


def users_of(jaas_options):
    """``{user: password}`` from a PlainLoginModule entry's ``user_<name>`` options."""
    return {key[len(_USER_PREFIX):]: value for key, value in jaas_options.items()
            if key.startswith(_USER_PREFIX) and len(key) > len(_USER_PREFIX)}


class PlainServer(MechanismServer):
    mechanism = MECHANISM

    def __init__(self, users):
        super().__init__()
        self._users = users

    def respond(self, token, now_ms):
        try:
            fields = bytes(token).decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise CredentialsRejected("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(fields) != 3:
            raise CredentialsRejected(f"Invalid SASL/PLAIN response: expected 3 tokens, got "
                                      f"{len(fields)}")
        authzid, user, password = fields
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        expected = self._users.get(user)
        # compare_digest's time follows the length of its second argument: the supplied
        # password, whoever the user is.
        matches = hmac.compare_digest((expected or "").encode("utf-8"),
                                      password.encode("utf-8"))
        if expected is None or not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.principal_name = user
        self.complete = True
        return b""
