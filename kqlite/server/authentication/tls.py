"""TLS contexts from Kafka's ``ssl.*`` settings (Python's ``ssl``, OpenSSL underneath).

Theory of operation. A TLS listener gets one server :class:`ssl.SSLContext`, built once at
start from the listener's settings (``listener.name.<l>.ssl.*`` over ``ssl.*``); a cluster
broker's connections to other brokers get one client context from the inter-broker
listener's settings. What each of Kafka's settings becomes:

  ssl.keystore.type                 PEM or PKCS12 (read with ``cryptography``); JKS is
                                    refused (convert it with keytool). Unset: the file's
                                    contents decide (Kafka's default, JKS, cannot be read)
  ssl.keystore.location             the key store file: PEM with the private key and the
                                    certificate chain, or PKCS#12
  ssl.keystore.certificate.chain    the same, inline PEM (KIP-651),
  ssl.keystore.key                  with ssl.key.password for an encrypted key
  ssl.keystore.password             the PKCS#12 file's password
  ssl.truststore.*                  the certificates a peer's certificate must chain to:
                                    a PEM or PKCS#12 file, or inline PEM
                                    (ssl.truststore.certificates); none: the system's
  ssl.client.auth                   none / requested / required: CERT_NONE, CERT_OPTIONAL,
                                    CERT_REQUIRED (a server context)
  ssl.enabled.protocols             the lowest and highest TLS version allowed
                                    (default TLSv1.2,TLSv1.3, as Kafka on Java 11+)
  ssl.cipher.suites                 OpenSSL's names of the TLS 1.2 suites allowed (empty:
                                    OpenSSL's defaults, as Kafka's empty value means the
                                    JVM's); TLS 1.3 suites are OpenSSL's and not settable
  ssl.endpoint.identification.algorithm
                                    ``https`` (default): a client context checks that the
                                    peer's certificate names the host it dialled; empty:
                                    it does not

Key material given inline or as PKCS#12 reaches OpenSSL through a file readable only by
this process, in a private temporary directory removed at once. A setting that cannot be
used is a :class:`TlsConfigError` naming it, at start.
"""

import os
import shutil
import ssl
import tempfile

__all__ = ["TlsConfigError", "server_context", "client_context", "CLIENT_AUTH",
           "DEFAULT_ENABLED_PROTOCOLS"]

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"
_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """An ``ssl.*`` setting that cannot be used; ``key`` names it."""

    def __init__(self, key, message):
        super().__init__(f"{key}: {message}")
        self.key = key


def _get(settings, key, default=None):
    value = settings.get(key)
    return default if value is None or value == "" else value


class _Scratch:
    """A private directory for key material OpenSSL must read from a file."""

    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="kqlite-tls-")
        os.chmod(self.path, 0o700)
        return self

    def write(self, name, data):
        path = os.path.join(self.path, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def _read(key, path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TlsConfigError(key, f"cannot read {path}: {exc.strerror}") from None


def _store_type(settings, prefix, data):
    kind = _get(settings, f"{prefix}.type")
    if kind is None:
        return "PEM" if data.lstrip().startswith(b"-----BEGIN") else "PKCS12"
    kind = kind.upper()
    if kind == "JKS":
        raise TlsConfigError(f"{prefix}.type", "JKS key stores cannot be read here; convert "
                                               "it to PKCS12 (keytool -importkeystore) or PEM")
    if kind not in ("PEM", "PKCS12"):
        raise TlsConfigError(f"{prefix}.type", f"{kind!r} is not PEM, PKCS12 or JKS")
    return kind


def _pkcs12(key, data, password):
    try:
        from cryptography.hazmat.primitives.serialization import (
            BestAvailableEncryption, Encoding, NoEncryption, PrivateFormat, pkcs12)
    except ImportError:
        raise TlsConfigError(key, "reading PKCS#12 needs the 'cryptography' package; "
                                  "or give PEM") from None
    try:
        private_key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(key, f"not a PKCS#12 store, or a wrong password: {exc}") from None
    certs = ([cert] if cert is not None else []) + list(extra or [])
    pem_certs = b"".join(c.public_bytes(Encoding.PEM) for c in certs)
    pem_key = b""
    if private_key is not None:
        encryption = BestAvailableEncryption(password.encode()) if password else NoEncryption()
        pem_key = private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption)
    return pem_key, pem_certs


def _load_key_store(context, settings, scratch):
    """The certificate chain and private key this side presents, if any are given."""
    chain = _get(settings, "ssl.keystore.certificate.chain")
    inline_key = _get(settings, "ssl.keystore.key")
    location = _get(settings, "ssl.keystore.location")
    key_password = _get(settings, "ssl.key.password")
    if chain or inline_key:
        if not (chain and inline_key):
            raise TlsConfigError("ssl.keystore.key", "an inline key store needs both "
                                 "ssl.keystore.certificate.chain and ssl.keystore.key")
        if location:
            raise TlsConfigError("ssl.keystore.location", "give the key store either as a "
                                                          "file or inline, not both")
        pem = inline_key.encode() + b"\n" + chain.encode()
        key = "ssl.keystore.key"
    elif location:
        data = _read("ssl.keystore.location", location)
        key = "ssl.keystore.location"
        if _store_type(settings, "ssl.keystore", data) == "PKCS12":
            password = _get(settings, "ssl.keystore.password")
            pem_key, pem_certs = _pkcs12(key, data, password)
            pem, key_password = pem_key + pem_certs, password
        else:
            pem = data
    else:
        return False
    path = scratch.write("keystore.pem", pem)
    try:
        context.load_cert_chain(path, password=key_password)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(key, f"no usable private key and certificate: {exc}") from None
    return True


def _load_trust_store(context, settings, scratch, purpose):
    inline = _get(settings, "ssl.truststore.certificates")
    location = _get(settings, "ssl.truststore.location")
    try:
        if inline:
            context.load_verify_locations(cadata=inline)
            return
        if location:
            data = _read("ssl.truststore.location", location)
            if _store_type(settings, "ssl.truststore", data) == "PKCS12":
                _, pem = _pkcs12("ssl.truststore.location", data,
                                 _get(settings, "ssl.truststore.password"))
                context.load_verify_locations(cadata=pem.decode("ascii"))
            else:
                context.load_verify_locations(cafile=scratch.write("truststore.pem", data))
            return
    except (ssl.SSLError, ValueError) as exc:
        key = "ssl.truststore.certificates" if inline else "ssl.truststore.location"
        raise TlsConfigError(key, f"no usable certificates: {exc}") from None
    context.load_default_certs(purpose)


def _protocols_and_ciphers(context, settings):
    text = _get(settings, "ssl.enabled.protocols", DEFAULT_ENABLED_PROTOCOLS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise TlsConfigError("ssl.enabled.protocols", f"unknown protocols {unknown or text!r} "
                                                      f"(TLSv1.2, TLSv1.3)")
    versions = sorted(_VERSIONS[n] for n in names)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    protocol = _get(settings, "ssl.protocol", "TLSv1.3")
    if protocol not in _VERSIONS and protocol not in ("TLS", "SSL"):
        raise TlsConfigError("ssl.protocol", f"unknown protocol {protocol!r}")
    suites = [s.strip() for s in _get(settings, "ssl.cipher.suites", "").split(",") if s.strip()]
    tls12 = [s for s in suites if not s.startswith("TLS_AES_") and
             not s.startswith("TLS_CHACHA20_")]
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise TlsConfigError("ssl.cipher.suites", f"OpenSSL knows none of {tls12!r} "
                                                      f"(use OpenSSL's suite names)") from None


def server_context(settings):
    """The server context of a TLS listener; ``settings``: the listener's ``ssl.*``
    values (listener prefix resolved)."""
    auth = _get(settings, "ssl.client.auth", "none").lower()
    if auth not in CLIENT_AUTH:
        raise TlsConfigError("ssl.client.auth", f"{auth!r} is not none, requested or required")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols_and_ciphers(context, settings)
    with _Scratch() as scratch:
        if not _load_key_store(context, settings, scratch):
            raise TlsConfigError("ssl.keystore.location", "a TLS listener needs its "
                                 "certificate and key (ssl.keystore.location, or "
                                 "ssl.keystore.certificate.chain and ssl.keystore.key)")
        context.verify_mode = CLIENT_AUTH[auth]
        if auth != "none":
            _load_trust_store(context, settings, scratch, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(settings):
    """The client context of this broker's connections to other brokers' TLS listener."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols_and_ciphers(context, settings)
    # Kafka's empty value (not an absent one) turns the host name check off.
    identification = settings.get("ssl.endpoint.identification.algorithm")
    context.check_hostname = identification is None or \
        identification.strip().lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    with _Scratch() as scratch:
        _load_key_store(context, settings, scratch)
        _load_trust_store(context, settings, scratch, ssl.Purpose.SERVER_AUTH)
    return context
