"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka implements them (KIP-84):
the mechanisms, the credential a broker stores, and the four messages of an exchange.

Theory of operation. A client proves it knows a password without sending it. The server
stores, per user and mechanism, a :class:`ScramCredential`: a salt, an iteration count and
two keys derived from the password (RFC 5802 section 3)::

    SaltedPassword = Hi(password, salt, iterations)      PBKDF2 with the mechanism's HMAC
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

The exchange is client-first (user name, client nonce), server-first (the nonce extended
by the server, the salt, the iterations), client-final (the proof) and server-final (the
server's signature, proving it holds the credential too). The messages are parsed here
with the whole-message grammars of Kafka's ``ScramMessages`` (a message that does not
match is refused as a whole), and the server's side of the exchange is
``scram_server.py``'s; a client's is ``sasl_client.py``'s.

Kafka's choices, kept because stored credentials and clients depend on them:

- the password is UTF-8 encoded without SASLprep (``ScramFormatter.normalize``);
- salts the broker or ``kafka-configs`` make are the UTF-8 text of a 130-bit random number
  in base 36 (``ScramFormatter.secureRandomBytes``); salts given through
  AlterUserScramCredentials are used as given;
- iterations are 4096 at least (a login with a stored count below it fails) and at most
  16384 through the admin API (``ScramMechanism``);
- the stored text form is ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``
  (``ScramCredentialUtils``), in ZooKeeper under ``/config/users/<user>``, keyed by the
  mechanism's name.

Sources: ``org.apache.kafka.common.security.scram.internals.{ScramMechanism,ScramFormatter,
ScramMessages}``, ``org.apache.kafka.common.security.scram.ScramCredential``,
``ScramCredentialUtils`` (Kafka 3.9); RFC 5802 sections 3, 5 and 7.
"""

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from typing import NamedTuple

__all__ = ["ScramMechanism", "MECHANISMS", "BY_TYPE", "ScramCredential", "ScramFormatError",
           "MIN_ITERATIONS", "MAX_ITERATIONS", "DEFAULT_ITERATIONS", "random_salt",
           "random_nonce", "base36", "b64", "salted_password", "credential_from_salted_password",
           "make_credential", "client_proof", "recovered_client_key",
           "server_signature", "ClientFirst", "ServerFirst", "ClientFinal",
           "parse_client_first", "parse_server_first", "parse_client_final",
           "parse_server_final", "encode_name", "decode_name"]

MIN_ITERATIONS = 4096           # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384          # the admin API's ceiling (ZkAdminManager)
DEFAULT_ITERATIONS = 4096       # kafka-configs' default


class ScramFormatError(ValueError):
    """A SCRAM message or stored credential that does not match its grammar."""


class ScramMechanism(NamedTuple):
    """A SCRAM mechanism: its SASL name, its hash, and the type code the admin APIs use."""
    name: str
    hash_name: str
    type_code: int

    def digest(self, data):
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key, data):
        return hmac.new(key, data, self.hash_name).digest()


# WIRE: Kafka-defined names and type codes (ScramMechanism.java; 0 is UNKNOWN).
SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE = {m.type_code: m for m in MECHANISMS.values()}


def b64(data):
    return base64.b64encode(data).decode("ascii")


def _unb64(text, what):
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramFormatError(f"{what} is not base64") from None


class ScramCredential(NamedTuple):
    """What the broker stores for one user and mechanism (never the password)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self):
        """Kafka's stored form (``ScramCredentialUtils.credentialToString``)."""
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text):
        """Parse Kafka's stored form: exactly its four keys
        (``ScramCredentialUtils.credentialFromString``)."""
        fields = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key in fields:
                raise ScramFormatError(f"not a SCRAM credential: {text!r}")
            fields[key] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"} or \
                not fields["iterations"].isdigit():
            raise ScramFormatError(f"not a SCRAM credential: {text!r}")
        return cls(_unb64(fields["salt"], "salt"), _unb64(fields["stored_key"], "stored_key"),
                   _unb64(fields["server_key"], "server_key"), int(fields["iterations"]))


def random_salt():
    """A salt as Kafka makes one: the UTF-8 text of a 130-bit random number in base 36."""
    return base36(secrets.randbits(130)).encode("ascii")


def random_nonce():
    """A server (or client) nonce as Kafka makes one: a 130-bit random number in base 36."""
    return base36(secrets.randbits(130))


def base36(n):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while True:
        n, r = divmod(n, 36)
        out.append(digits[r])
        if not n:
            return "".join(reversed(out))


def salted_password(mechanism, password, salt, iterations):
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC over the UTF-8 password."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism, salted, salt, iterations):
    """The stored credential of a salted password (what AlterUserScramCredentials sends)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt, mechanism.digest(client_key),
                           mechanism.hmac(salted, b"Server Key"), iterations)


def make_credential(mechanism, password, iterations=DEFAULT_ITERATIONS, salt=None):
    """A new credential for ``password`` (a fresh salt unless one is given)."""
    salt = random_salt() if salt is None else salt
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _xor(a, b):
    return bytes(x ^ y for x, y in zip(a, b))


def client_proof(mechanism, salted, auth_message):
    """ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage) (the client's side)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    signature = mechanism.hmac(mechanism.digest(client_key), auth_message)
    return _xor(client_key, signature)


def recovered_client_key(mechanism, stored_key, auth_message, proof):
    """The ClientKey a proof implies: proof XOR HMAC(StoredKey, AuthMessage). The proof
    is right when H(this) equals StoredKey."""
    return _xor(proof, mechanism.hmac(stored_key, auth_message))


def server_signature(mechanism, server_key, auth_message):
    return mechanism.hmac(server_key, auth_message)


# -- Messages (RFC 5802 section 7, as Kafka's ScramMessages matches them) ---------------

# A saslname: 7-bit characters other than ',' and '=', or the escapes =2C and =3D.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"          # a nonce: printable, no comma
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"              # an attribute value: 7-bit, no comma
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"

_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?"
    rf"n=(?P<name>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),"
    rf"i=(?P<iterations>[0-9]+)(?:{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<binding>{_BASE64}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?:{_EXTENSIONS})),p=(?P<proof>{_BASE64})")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE})|v=(?P<signature>{_BASE64}))"
                           rf"(?:{_EXTENSIONS})")


def encode_name(name):
    """A user name as a saslname: ',' as =2C and '=' as =3D."""
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_name(saslname):
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _text(data, what):
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramFormatError(f"{what} is not UTF-8") from None


def _match(pattern, data, what):
    match = pattern.fullmatch(_text(data, what))
    if match is None:
        raise ScramFormatError(f"invalid SCRAM {what}")
    return match


def _extensions(text):
    return dict(part.split("=", 1) for part in text.split(",") if part)


class ClientFirst(NamedTuple):
    user: str
    authzid: str          # "" when absent
    nonce: str
    extensions: dict
    bare: str             # client-first-message-bare, part of the AuthMessage


class ServerFirst(NamedTuple):
    nonce: str
    salt: bytes
    iterations: int

    def to_text(self):
        return f"r={self.nonce},s={b64(self.salt)},i={self.iterations}"


class ClientFinal(NamedTuple):
    binding: str
    nonce: str
    proof: bytes
    without_proof: str    # client-final-message-without-proof, part of the AuthMessage


def parse_client_first(data):
    m = _match(_CLIENT_FIRST, data, "client-first message")
    return ClientFirst(decode_name(m["name"]), decode_name(m["authzid"] or ""), m["nonce"],
                       _extensions(m["extensions"]), m["bare"])


def parse_server_first(data):
    m = _match(_SERVER_FIRST, data, "server-first message")
    return ServerFirst(m["nonce"], _unb64(m["salt"], "salt"), int(m["iterations"]))


def parse_client_final(data):
    m = _match(_CLIENT_FINAL, data, "client-final message")
    return ClientFinal(m["binding"], m["nonce"], _unb64(m["proof"], "proof"),
                       m["without_proof"])


def parse_server_final(data):
    """The server's signature; ScramFormatError for an ``e=`` error answer."""
    m = _match(_SERVER_FINAL, data, "server-final message")
    if m["error"] is not None:
        raise ScramFormatError(f"the server refused: {m['error']}")
    return _unb64(m["signature"], "server signature")
