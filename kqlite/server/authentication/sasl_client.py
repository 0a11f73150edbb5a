"""The client side of a SASL exchange, for the connections a cluster broker makes to other
brokers (and for tests): PLAIN, SCRAM-SHA-256/512 and unsecured OAUTHBEARER.

Theory of operation. A :class:`MechanismClient` makes the client's tokens:
:meth:`~MechanismClient.first` is the initial response, :meth:`~MechanismClient.respond`
answers each server challenge, and ``complete`` says the exchange needs nothing more. The
connection sends them in SaslAuthenticate requests after a v1 SaslHandshake, as Kafka's
``SaslClientAuthenticator`` does. SCRAM's client checks the server's final signature, so a
server that does not hold the credential fails the exchange too.
"""

import hmac
import time

from . import oauthbearer, scram

__all__ = ["MechanismClient", "client_for", "SaslClientError"]


class SaslClientError(Exception):
    """The server's answer does not complete the exchange (a bad signature, a refusal)."""


class MechanismClient:
    mechanism = ""

    def __init__(self):
        self.complete = False

    def first(self):
        raise NotImplementedError

    def respond(self, challenge):
        raise NotImplementedError


class PlainClient(MechanismClient):
    mechanism = "PLAIN"

    def __init__(self, username, password):
        super().__init__()
        self._token = f"\0{username}\0{password}".encode("utf-8")

    def first(self):
        self.complete = True
        return self._token

    def respond(self, challenge):
        return b""


class ScramClient(MechanismClient):
    def __init__(self, mechanism, username, password, nonce=None):
        super().__init__()
        self.mechanism = mechanism.name
        self._scram = mechanism
        self._password = password
        self._nonce = nonce or scram.random_nonce()
        self._bare = f"n={scram.encode_name(username)},r={self._nonce}"
        self._expected_signature = None

    def first(self):
        return f"n,,{self._bare}".encode("utf-8")

    def respond(self, challenge):
        if self._expected_signature is None:
            return self._client_final(challenge)
        try:
            signature = scram.parse_server_final(challenge)
        except scram.ScramFormatError as exc:
            raise SaslClientError(str(exc)) from None
        if not hmac.compare_digest(signature, self._expected_signature):
            raise SaslClientError("the server's signature is wrong")
        self.complete = True
        return b""

    def _client_final(self, challenge):
        try:
            server_first = scram.parse_server_first(challenge)
        except scram.ScramFormatError as exc:
            raise SaslClientError(str(exc)) from None
        if not server_first.nonce.startswith(self._nonce) or \
                server_first.iterations < scram.MIN_ITERATIONS:
            raise SaslClientError("invalid server-first message")
        mechanism = self._scram
        salted = scram.salted_password(mechanism, self._password, server_first.salt,
                                       server_first.iterations)
        without_proof = f"c=biws,r={server_first.nonce}"
        auth_message = ",".join((self._bare, server_first.to_text(),
                                 without_proof)).encode("utf-8")
        proof = scram.client_proof(mechanism, salted, auth_message)
        self._expected_signature = scram.server_signature(
            mechanism, mechanism.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={scram.b64(proof)}".encode("utf-8")


class OAuthBearerClient(MechanismClient):
    mechanism = "OAUTHBEARER"

    def __init__(self, principal, lifetime_s=3600, scope=None):
        super().__init__()
        self._token = oauthbearer.unsecured_token(principal, lifetime_s=lifetime_s,
                                                  issued_at_s=int(time.time()), scope=scope)

    def first(self):
        self.complete = True
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode("utf-8")

    def respond(self, challenge):
        if challenge:
            raise SaslClientError(f"token refused: {bytes(challenge).decode('utf-8', 'replace')}")
        return b""


def client_for(mechanism, options):
    """The client of ``mechanism`` with a JAAS entry's ``options`` (``username`` and
    ``password``; OAUTHBEARER's ``unsecuredLoginStringClaim_sub`` names the principal)."""
    if mechanism == "PLAIN":
        return PlainClient(options["username"], options["password"])
    if mechanism in scram.MECHANISMS:
        return ScramClient(scram.MECHANISMS[mechanism], options["username"],
                           options["password"])
    if mechanism == "OAUTHBEARER":
        return OAuthBearerClient(options.get("unsecuredLoginStringClaim_sub", "admin"))
    raise ValueError(f"no client for SASL mechanism {mechanism}")
