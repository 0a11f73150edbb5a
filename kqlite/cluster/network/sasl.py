"""The SASL exchange a broker runs on its connections to other brokers' SASL listeners, as
Kafka's ``SaslClientAuthenticator`` runs it (kafka-security.md, sections 3.1 and 3.5).

Theory of operation. After connecting (and, on SASL_SSL, the TLS handshake), the client
asks ApiVersions (served before authentication), then sends SaslHandshake v1 naming its
mechanism, then SaslAuthenticate requests carrying the mechanism's tokens
(kqlite/server/authentication/sasl_client.py) at the highest version both sides know, until
the mechanism is complete. Each step's refusal ends the exchange with
:class:`SaslExchangeError`, whose text names it:

  SaslHandshake error (UNSUPPORTED_SASL_MECHANISM)   the broker's enabled mechanisms
  SaslAuthenticate error (SASL_AUTHENTICATION_FAILED) the broker's message
  a challenge the mechanism refuses                   (a wrong server signature, a
                                                       refused token)

Success gives the session's lifetime (SaslAuthenticate v1+ ``session_lifetime_ms``, 0 when
unlimited, KIP-368). The client re-authenticates on the same connection before it ends, at
a random point between 85 % and 95 % of it (:func:`reauthentication_delay`, Kafka's
``ReauthInfo``), by the same exchange without ApiVersions; the connection
(broker_client.py) holds its other requests meanwhile, since the broker reads the exchange's
frames before any other request.
"""

import random

from ...errors import KqliteError
from ...protocol import ApiKey, ErrorCode
from ...server.authentication.sasl_client import SaslClientError

__all__ = ["SaslExchangeError", "authenticate", "reauthentication_delay",
           "HANDSHAKE_VERSION", "AUTHENTICATE_VERSIONS"]

HANDSHAKE_VERSION = 1             # WIRE: v1 frames the tokens in SaslAuthenticate
AUTHENTICATE_VERSIONS = (0, 2)    # WIRE: Kafka 3.9's SaslAuthenticate versions
_REAUTH_LOW, _REAUTH_SPREAD = 0.85, 0.10    # Kafka's client: 85-95 % of the lifetime


class SaslExchangeError(KqliteError):
    """The broker refused the authentication, or the exchange could not complete."""


def _code_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


async def authenticate(request, client, authenticate_version):
    """Run one exchange of ``client`` (a MechanismClient) through ``request(api_key,
    version, body) -> response body``; returns the session lifetime in ms (0:
    unlimited)."""
    handshake = await request(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION,
                              {"mechanism": client.mechanism})
    if handshake["error_code"]:
        raise SaslExchangeError(
            f"SaslHandshake for {client.mechanism} refused "
            f"({_code_name(handshake['error_code'])}; the broker enables "
            f"{', '.join(handshake.get('mechanisms') or []) or 'none'})")
    token = client.first()
    lifetime_ms = 0
    while True:
        answer = await request(ApiKey.SASL_AUTHENTICATE, authenticate_version,
                               {"auth_bytes": token})
        if answer["error_code"]:
            raise SaslExchangeError(
                f"{client.mechanism} authentication failed "
                f"({_code_name(answer['error_code'])}: "
                f"{answer.get('error_message') or 'no message'})")
        lifetime_ms = answer.get("session_lifetime_ms") or 0
        challenge = bytes(answer.get("auth_bytes") or b"")
        if client.complete and not challenge:
            return lifetime_ms
        try:
            token = client.respond(challenge)
        except SaslClientError as exc:
            raise SaslExchangeError(f"{client.mechanism} authentication failed: {exc}") \
                from None
        if client.complete and not token:
            return lifetime_ms


def reauthentication_delay(lifetime_ms, rng=random):
    """Seconds after authenticating to re-authenticate a session of ``lifetime_ms``
    (None when it is unlimited)."""
    if lifetime_ms <= 0:
        return None
    return lifetime_ms * (_REAUTH_LOW + _REAUTH_SPREAD * rng.random()) / 1000.0
