"""SCRAM's server side (Kafka's ``ScramSaslServer``), with one change: an unknown user
cannot be told from a wrong password.

Theory of operation. Two client messages, two answers:

1. client-first: parsed whole (scram.py); an authorization id other than the user name and
   any extension but ``tokenauth`` are refused; the user's credential for this mechanism is
   looked up in memory; the answer is server-first: the client's nonce extended by a
   130-bit server nonce, the credential's salt and iterations.
2. client-final: parsed whole; its nonce must end with the combined nonce of this exchange
   (a client-final replayed from another exchange never does); the proof must satisfy
   ``H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey``, compared in constant time;
   the answer is server-final, ``v=`` and the server's signature. The principal is the user.

Kafka fails an unknown user right after client-first, so whether a name has a credential
shows in where the exchange stops (the project's security notes, section 8). Here an
unknown user, or one whose stored iterations are below 4096, is answered with a
credential derived from a server secret and the name, as RFC 5802 section 5.1 suggests: a
salt that looks like Kafka's and is the same on every attempt and every broker sharing the
secret, the default 4096 iterations, and keys no password matches. The exchange then
fails at client-final, after the same computation, with the same text.

Every failure is :class:`~.mechanism.CredentialsRejected`: the client sees only Kafka's
generic text, whatever the reason (as Kafka, whose ScramSaslServer throws plain
SaslExceptions).

  client-first does not parse          "invalid SCRAM client-first message"
  authzid is not the user name         "authorization id differs from the user name"
  tokenauth=true (delegation tokens)   "delegation tokens are not supported"
  client-final does not parse          "invalid SCRAM client-final message"
  nonce not this exchange's            "Invalid client nonce in the final client message"
  wrong proof (or an unknown user)     "Invalid client credentials"
  a message after the exchange ended   "unexpected message"
"""

import hmac

from . import scram
from .mechanism import CredentialsRejected, MechanismServer

__all__ = ["ScramServer", "unknown_user_credential"]

_INITIAL, _FIRST_SENT, _DONE = range(3)


def unknown_user_credential(mechanism, secret, user):
    """The credential an unknown ``user`` is answered with: derived from ``secret`` and the
    name only, so every attempt (on every broker sharing the secret) sees the same salt."""
    def derive(label):
        return hmac.new(secret, b"%s\0%s\0%s" % (label, mechanism.name.encode(),
                                                  user.encode("utf-8")),
                        mechanism.hash_name).digest()
    salt_number = int.from_bytes(derive(b"salt")[:17], "big") & ((1 << 130) - 1)
    salt = scram.base36(salt_number).encode("ascii")
    return scram.ScramCredential(salt, derive(b"stored_key"), derive(b"server_key"),
                                 scram.DEFAULT_ITERATIONS)


class ScramServer(MechanismServer):
    """``lookup(mechanism_name, user)`` gives a stored ScramCredential or None;
    ``secret`` (bytes) derives the answer to unknown users."""

    def __init__(self, mechanism, lookup, secret):
        super().__init__()
        self.mechanism = mechanism.name
        self._scram = mechanism
        self._lookup = lookup
        self._secret = secret
        self._state = _INITIAL
        self._first = None
        self._server_first = None
        self._credential = None
        self._known = False

    def respond(self, token, now_ms):
        if self._state == _INITIAL:
            return self._client_first(token)
        if self._state == _FIRST_SENT:
            return self._client_final(token)
        raise CredentialsRejected("unexpected message after the SCRAM exchange ended")

    def _client_first(self, token):
        try:
            first = scram.parse_client_first(token)
        except scram.ScramFormatError as exc:
            raise CredentialsRejected(str(exc)) from None
        if first.authzid and first.authzid != first.user:
            raise CredentialsRejected("authorization id differs from the user name")
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise CredentialsRejected("delegation tokens are not supported")
        credential = self._lookup(self.mechanism, first.user)
        self._known = credential is not None and \
            credential.iterations >= scram.MIN_ITERATIONS
        if not self._known:
            credential = unknown_user_credential(self._scram, self._secret, first.user)
        self._first = first
        self._credential = credential
        self._server_first = scram.ServerFirst(first.nonce + scram.random_nonce(),
                                               credential.salt, credential.iterations)
        self._state = _FIRST_SENT
        return self._server_first.to_text().encode("ascii")

    def _client_final(self, token):
        self._state = _DONE
        try:
            final = scram.parse_client_final(token)
        except scram.ScramFormatError as exc:
            raise CredentialsRejected(str(exc)) from None
        if not final.nonce.endswith(self._server_first.nonce):
            raise CredentialsRejected("Invalid client nonce in the final client message")
        mechanism, credential = self._scram, self._credential
        auth_message = ",".join((self._first.bare, self._server_first.to_text(),
                                 final.without_proof)).encode("utf-8")
        client_key = scram.recovered_client_key(mechanism, credential.stored_key,
                                                auth_message, final.proof)
        proven = hmac.compare_digest(mechanism.digest(client_key), credential.stored_key)
        if not (proven and self._known):
            raise CredentialsRejected("Invalid client credentials")
        self.principal_name = self._first.user
        self.complete = True
        signature = scram.server_signature(mechanism, credential.server_key, auth_message)
        return b"v=" + scram.b64(signature).encode("ascii")
