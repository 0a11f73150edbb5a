"""SASL/OAUTHBEARER's server side (RFC 7628, KIP-255) with Kafka's unsecured JWS validator:
for tests and development only, since an unsigned token proves nothing.

Theory of operation. The client sends one message,
``n,[a=authzid],\\x01auth=Bearer <token>\\x01[key=value\\x01]*\\x01``. The token is an unsecured
JWS, ``base64url(header).base64url(claims).`` with an empty signature; Kafka's
``OAuthBearerUnsecuredValidatorCallbackHandler`` accepts it when:

  the header's "alg" is "none"                      else invalid_token
  the principal claim is a non-empty string         (``unsecuredValidatorPrincipalClaimName``, default "sub")
  "exp" is a number, not in the past                less ``unsecuredValidatorAllowableClockSkewMs``
  "iat", when present, is not in the future         plus that skew
  every ``unsecuredValidatorRequiredScope`` scope   is in the scope claim (``unsecuredValidatorScopeClaimName``,
                                                    default "scope", a string or a list), else insufficient_scope

The principal is the principal claim; the credential expires at "exp" (seconds), which bounds
the session (KIP-368). A token that fails is answered, as RFC 7628 section 3.2.2 says and
Kafka does, with a JSON challenge (``{"status":"invalid_token"}``); the client must answer
``\\x01``, and only then does the exchange fail, with that JSON as the message the client
sees. A message that does not parse fails at once with Kafka's generic text.
"""

import base64
import binascii
import json
import re

from .mechanism import AuthenticationFailed, CredentialsRejected, MechanismServer

__all__ = ["OAuthBearerServer", "MECHANISM", "unsecured_token"]

MECHANISM = "OAUTHBEARER"
_CONTROL_A = "\x01"
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")


class _TokenRefused(Exception):
    def __init__(self, status, scope=None):
        super().__init__(status)
        self.challenge = json.dumps({"status": status, **({"scope": scope} if scope else {})},
                                    separators=(",", ":"))


def _b64url(text):
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise _TokenRefused("invalid_token") from None


def _json_object(part):
    try:
        value = json.loads(_b64url(part).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _TokenRefused("invalid_token") from None
    if not isinstance(value, dict):
        raise _TokenRefused("invalid_token")
    return value


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def unsecured_token(principal, *, lifetime_s=3600, issued_at_s, scope=None, claim="sub"):
    """An unsecured JWS such as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes
    (tests and the inter-broker client use it)."""
    def part(doc):
        raw = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
    claims = {claim: principal, "iat": issued_at_s, "exp": issued_at_s + lifetime_s}
    if scope:
        claims["scope"] = scope
    return f"{part({'alg': 'none'})}.{part(claims)}."


class OAuthBearerServer(MechanismServer):
    mechanism = MECHANISM

    def __init__(self, jaas_options):
        super().__init__()
        self._principal_claim = jaas_options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self._scope_claim = jaas_options.get("unsecuredValidatorScopeClaimName", "scope")
        self._required_scope = jaas_options.get("unsecuredValidatorRequiredScope", "").split()
        try:
            self._skew_ms = int(jaas_options.get("unsecuredValidatorAllowableClockSkewMs", 0))
        except ValueError:
            self._skew_ms = 0
        self._refusal = None

    def respond(self, token, now_ms):
        if self._refusal is not None:
            # The client's answer to the error challenge ends the exchange.
            raise AuthenticationFailed(self._refusal)
        try:
            authzid, bearer = _parse_client_message(bytes(token))
        except ValueError as exc:
            raise CredentialsRejected(str(exc)) from None
        try:
            principal, expiry_ms = self._validate(bearer, now_ms)
        except _TokenRefused as refused:
            self._refusal = refused.challenge
            return refused.challenge.encode("utf-8")
        if authzid and authzid != principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({principal})")
        self.principal_name = principal
        self.expiry_ms = expiry_ms
        self.complete = True
        return b""

    def _validate(self, token, now_ms):
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise _TokenRefused("invalid_token")
        header, claims = _json_object(parts[0]), _json_object(parts[1])
        if header.get("alg") != "none":
            raise _TokenRefused("invalid_token")
        principal = claims.get(self._principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise _TokenRefused("invalid_token")
        expiry, issued = claims.get("exp"), claims.get("iat")
        if not _number(expiry) or expiry * 1000 <= now_ms - self._skew_ms:
            raise _TokenRefused("invalid_token")
        if issued is not None and (not _number(issued)
                                   or issued * 1000 > now_ms + self._skew_ms):
            raise _TokenRefused("invalid_token")
        scope = claims.get(self._scope_claim, [])
        scopes = scope.split() if isinstance(scope, str) else \
            [s for s in scope if isinstance(s, str)] if isinstance(scope, list) else []
        missing = [s for s in self._required_scope if s not in scopes]
        if missing:
            raise _TokenRefused("insufficient_scope", " ".join(self._required_scope))
        return principal, int(expiry * 1000)


def _parse_client_message(data):
    """(authzid, bearer token) of the client's first message (RFC 7628 section 3.1)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("OAUTHBEARER message is not UTF-8") from None
    if not text.startswith("n,"):
        raise ValueError("OAUTHBEARER message without the n GS2 header")
    authz, sep, rest = text[2:].partition(",")
    if not sep or (authz and not authz.startswith("a=")):
        raise ValueError("invalid OAUTHBEARER GS2 header")
    if not rest.startswith(_CONTROL_A) or not rest.endswith(_CONTROL_A * 2):
        raise ValueError("invalid OAUTHBEARER message framing")
    pairs = {}
    for item in rest[1:-2].split(_CONTROL_A):
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key) or key in pairs or \
                (value and not _VALUE.fullmatch(value)):
            raise ValueError("invalid OAUTHBEARER key/value pair")
        pairs[key] = value
    auth = _AUTH.fullmatch(pairs.get("auth", ""))
    if auth is None or auth["scheme"].lower() != "bearer":
        raise ValueError("OAUTHBEARER message without an auth=Bearer token")
    return authz[2:], auth["token"]
