"""The SASL exchange on a SASL listener, before any other request is served (Kafka's
``SaslServerAuthenticator``), as a pure state machine: frames in, frames and a verdict out,
the clock passed in.

Theory of operation. Until a client has authenticated, every frame it sends comes here and
never reaches a handler. Each frame is one ``receive(frame, now_ms)``, which answers a
:class:`Step`: the bytes to send (whole response frames) and what the connection does next
(:class:`Next`). The table says which request each state takes; a frame that is not one of
them ends the connection without an answer, as Kafka's does, and so an unauthenticated client
reaches nothing but ApiVersions and the SASL requests. The API key is read before the rest of
the frame is decoded.

  state                  takes                       then
  HANDSHAKE_OR_VERSIONS  ApiVersions                 HANDSHAKE (the full API list; a version
                                                     kqlite lacks: v0 UNSUPPORTED_VERSION and
                                                     the state stays)
                         SaslHandshake               AUTHENTICATE (v1) / RAW_TOKENS (v0), or
                                                     UNSUPPORTED_SASL_MECHANISM and close
  HANDSHAKE              SaslHandshake               as above (a second ApiVersions closes)
  AUTHENTICATE           SaslAuthenticate v0-2       the mechanism's challenge; COMPLETE, or
                                                     SASL_AUTHENTICATION_FAILED and close
  RAW_TOKENS             a raw token (no header)     the challenge as a raw frame (none when
                                                     empty); COMPLETE, or close unanswered
  COMPLETE, FAILED       nothing                     (the connection has moved on)

A failure's answer is sent, and the connection closed, after
``connection.failed.authentication.delay.ms`` (:attr:`Next.FAIL`: the connection waits);
its text is the mechanism's when it may be shown, else Kafka's generic one (mechanism.py).
Success gives the principal and the session's lifetime (KIP-368): the smaller of
``connections.max.reauth.ms`` (when not 0) and what is left of the credential, sent in
SaslAuthenticate v1+ as ``session_lifetime_ms``. A client that authenticated may
re-authenticate by sending SaslHandshake again: the connection starts a new authenticator at
HANDSHAKE with that request (:meth:`SaslServerAuthenticator.reauthenticating`), which must
keep the mechanism and end with the same principal.

Source: ``org.apache.kafka.common.security.authenticator.SaslServerAuthenticator`` (Kafka 3.9)
and the project's security notes, section 3.1.
"""

import enum
import logging
import struct
from typing import NamedTuple

from ...protocol import ApiKey, ErrorCode, ProtocolError
from ...protocol.connection import decode_request, encode_response
from .mechanism import AuthenticationFailed, CredentialsRejected, generic_failure

__all__ = ["SaslServerAuthenticator", "Step", "Next", "State", "api_versions_body"]

log = logging.getLogger("kqlite.server.authentication")

_API_KEY = struct.Struct(">h")     # WIRE: a request header starts with the int16 api key
_LENGTH = struct.Struct(">i")


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw tokens"
    COMPLETE = "complete"
    FAILED = "failed"


class Next(enum.Enum):
    CONTINUE = "continue"     # send, read the next frame
    CLOSE = "close"           # send (maybe nothing), close
    FAIL = "fail"             # wait the failed-authentication delay, send, close
    COMPLETE = "complete"     # send; the connection is authenticated


class Step(NamedTuple):
    send: list                # response frames (bytes, length prefix included)
    next: Next
    reason: str = ""          # why a connection closes or fails (logged, never sent)
    principal_name: str = None
    mechanism: str = None
    session_lifetime_ms: int = 0


# state -> {api key: rule}; anything else in a framed state closes the connection unanswered.
TRANSITIONS = {
    State.HANDSHAKE_OR_VERSIONS: {ApiKey.API_VERSIONS: "_api_versions",
                                  ApiKey.SASL_HANDSHAKE: "_handshake"},
    State.HANDSHAKE: {ApiKey.SASL_HANDSHAKE: "_handshake"},
    State.AUTHENTICATE: {ApiKey.SASL_AUTHENTICATE: "_authenticate"},
}


def api_versions_body(api_versions, error_code=ErrorCode.NONE):
    """ApiVersions' answer listing ``api_versions`` (``{ApiKey: (min, max)}``)."""
    return {"error_code": error_code, "throttle_time_ms": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(api_versions.items())]}


def _raw_frame(token):
    return _LENGTH.pack(len(token)) + bytes(token)


class SaslServerAuthenticator:
    """One connection's SASL exchange. ``mechanisms``: ``{name: factory}`` of the enabled
    mechanisms in ``sasl.enabled.mechanisms`` order, each factory making a fresh
    :class:`~.mechanism.MechanismServer`; ``api_versions``: what ApiVersions lists;
    ``reauth_ms``: ``connections.max.reauth.ms`` by mechanism (absent or 0: sessions do not
    expire by time)."""

    def __init__(self, mechanisms, api_versions, *, reauth_ms=None):
        self.mechanisms = mechanisms
        self.api_versions = api_versions
        self.reauth_ms = reauth_ms or {}
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.server = None           # the mechanism's server, once the handshake chose it
        self.framed = True           # False after a v0 handshake: raw tokens follow
        self._authenticate_version = 0
        self._previous = None        # (mechanism, principal) when re-authenticating

    @classmethod
    def reauthenticating(cls, mechanisms, api_versions, *, reauth_ms, mechanism, principal_name):
        """An authenticator for a re-authentication (KIP-368) of a session that used
        ``mechanism`` and authenticated ``principal_name``: it starts at HANDSHAKE."""
        authenticator = cls(mechanisms, api_versions, reauth_ms=reauth_ms)
        authenticator.state = State.HANDSHAKE
        authenticator._previous = (mechanism, principal_name)
        return authenticator

    # -- input -------------------------------------------------------------------------

    def receive(self, frame, now_ms, request=None):
        """The step answering one frame (without its length prefix). ``request``: the frame
        already decoded, when the connection had to (a re-authentication's handshake)."""
        if self.state == State.RAW_TOKENS:
            return self._raw_token(frame, now_ms)
        rules = TRANSITIONS.get(self.state)
        if rules is None:
            return self._close(f"a frame in state {self.state.value}")
        if request is None:
            if len(frame) < _API_KEY.size:
                return self._close("a frame too short for a request header")
            api_key = _API_KEY.unpack_from(frame)[0]
            if api_key not in rules:
                return self._close(f"api key {api_key} in state {self.state.value} "
                                   f"(IllegalSaslStateException)")
            try:
                request = decode_request(frame)
            except ProtocolError as exc:
                return self._close(f"an undecodable request: {exc}")
        elif request.api_key not in rules:
            return self._close(f"{request.name} in state {self.state.value}")
        return getattr(self, rules[request.api_key])(request, now_ms)

    # -- rules -------------------------------------------------------------------------

    def _api_versions(self, request, now_ms):
        if request.unsupported:
            body = api_versions_body(self.api_versions, ErrorCode.UNSUPPORTED_VERSION)
            return Step(encode_response(request.api_key, 0, request.correlation_id, body),
                        Next.CONTINUE)
        self.state = State.HANDSHAKE
        return self._answer(request, api_versions_body(self.api_versions), Next.CONTINUE)

    def _handshake(self, request, now_ms):
        if request.unsupported:
            return self._close(f"SaslHandshake v{request.api_version} is not supported")
        wanted = request.body["mechanism"]
        enabled = list(self.mechanisms)
        if self._previous is not None and wanted != self._previous[0]:
            enabled = [self._previous[0]]
        if wanted not in enabled:
            self.state = State.FAILED
            body = {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
            return self._answer(request, body, Next.CLOSE,
                                f"mechanism {wanted!r} is not enabled")
        self.server = self.mechanisms[wanted]()
        self.framed = request.api_version >= 1
        self.state = State.AUTHENTICATE if self.framed else State.RAW_TOKENS
        return self._answer(request, {"error_code": ErrorCode.NONE, "mechanisms": enabled},
                            Next.CONTINUE)

    def _authenticate(self, request, now_ms):
        if request.unsupported:
            return self._close(f"SaslAuthenticate v{request.api_version} is not supported")
        self._authenticate_version = request.api_version
        try:
            challenge = self.server.respond(request.body["auth_bytes"], now_ms)
            self._check_previous()
        except (AuthenticationFailed, CredentialsRejected) as exc:
            self.state = State.FAILED
            body = {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                    "error_message": self._failure_text(exc), "auth_bytes": b"",
                    "session_lifetime_ms": 0}
            return self._answer(request, body, Next.FAIL, self._failure_reason(exc))
        body = {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": challenge,
                "session_lifetime_ms": 0}
        if not self.server.complete:
            return self._answer(request, body, Next.CONTINUE)
        lifetime = self._session_lifetime(now_ms)
        body["session_lifetime_ms"] = lifetime
        return self._complete(self._frames(request, body), lifetime)

    def _raw_token(self, frame, now_ms):
        try:
            challenge = self.server.respond(frame, now_ms)
            self._check_previous()
        except (AuthenticationFailed, CredentialsRejected) as exc:
            # After a v0 handshake there is no error frame: the connection just closes.
            self.state = State.FAILED
            return Step([], Next.CLOSE, self._failure_reason(exc))
        frames = [_raw_frame(challenge)] if challenge else []
        if not self.server.complete:
            return Step(frames, Next.CONTINUE)
        return self._complete(frames, self._session_lifetime(now_ms))

    # -- helpers -----------------------------------------------------------------------

    def _check_previous(self):
        """A re-authentication must end with the principal the session had."""
        if self._previous is not None and self.server.complete and \
                self.server.principal_name != self._previous[1]:
            raise AuthenticationFailed(
                f"Cannot change principals during re-authentication from User:"
                f"{self._previous[1]}: User:{self.server.principal_name}")

    def _session_lifetime(self, now_ms):
        """KIP-368: the smaller of connections.max.reauth.ms and the credential's remaining
        life, whichever are known; 0 when neither is."""
        limits = []
        reauth_ms = self.reauth_ms.get(self.server.mechanism, 0)
        if reauth_ms > 0:
            limits.append(reauth_ms)
        if self.server.expiry_ms is not None:
            limits.append(max(0, self.server.expiry_ms - now_ms))
        return min(limits) if limits else 0

    def _complete(self, frames, lifetime):
        self.state = State.COMPLETE
        return Step(frames, Next.COMPLETE, principal_name=self.server.principal_name,
                    mechanism=self.server.mechanism, session_lifetime_ms=lifetime)

    def _failure_text(self, exc):
        if isinstance(exc, AuthenticationFailed):
            return str(exc)
        return generic_failure(self.server.mechanism)

    def _failure_reason(self, exc):
        return f"{self.server.mechanism} authentication failed: {exc}"

    def _frames(self, request, body):
        return encode_response(request.api_key, request.api_version, request.correlation_id,
                               body)

    def _answer(self, request, body, next_, reason=""):
        return Step(self._frames(request, body), next_, reason)

    def _close(self, reason):
        self.state = State.FAILED
        return Step([], Next.CLOSE, reason)
