"""The security of a development cluster (``kqlite cluster up --security``): certificates,
SCRAM users and each broker's ``server.properties``.

Theory of operation. ``--security`` picks the protocol of the brokers' one listener, which
clients and the brokers themselves (``inter.broker.listener.name``) use:

  plaintext        no security (kqlite's default, and Kafka's)
  sasl_plaintext   SCRAM-SHA-512 logins, unencrypted
  sasl_ssl         SCRAM-SHA-512 logins over TLS

Everything a secured cluster needs is made in ``DIR/security`` (printed by ``up``), and
kept, so that ``up --dir DIR`` resumes the same cluster:

  ca.pem, ca.key                a certificate authority (sasl_ssl)
  broker-<id>.pem               each broker's key and certificate, naming the listen host
                                (an IP or DNS subject alternative name) so that clients
                                and the other brokers can check it
  passwords.properties          the SCRAM users' passwords: ``broker`` (every broker's
                                inter-broker user) and ``admin`` (a client's)
  broker-<id>.properties        the broker's server.properties
  client.properties             librdkafka properties for ``admin`` (``kcat -F``,
                                confluent-kafka)

Key files and the passwords file are readable by their owner only. The users are written
to ZooKeeper (``/config/users``) before the brokers start, as ``kafka-configs
--zookeeper`` writes them. Certificates are made with the ``cryptography`` package.
"""

import datetime
import ipaddress
import os
import secrets

from ..errors import KqliteError

__all__ = ["PROTOCOLS", "MECHANISM", "BROKER_USER", "ADMIN_USER", "DevSecurity",
           "SecuritySetupError", "CertificateAuthority"]

PROTOCOLS = ("plaintext", "sasl_plaintext", "sasl_ssl")
MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "broker"
ADMIN_USER = "admin"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_VALID_DAYS = 365


class SecuritySetupError(KqliteError):
    """The security material of a development cluster could not be made."""


def _private(path, data):
    """Write ``data`` to ``path``, readable by its owner only (made so before writing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _cryptography():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise SecuritySetupError("making certificates needs the 'cryptography' package "
                                 "(pip install cryptography)") from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


class CertificateAuthority:
    """A CA in ``directory`` (``ca.pem``, ``ca.key``): made the first time, read after."""

    def __init__(self, directory, name="kqlite development CA"):
        x509, hashes, serialization, ec, _, NameOID = _cryptography()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.directory = directory
        self.ca_file = os.path.join(directory, "ca.pem")
        key_file = os.path.join(directory, "ca.key")
        if os.path.exists(self.ca_file) and os.path.exists(key_file):
            with open(key_file, "rb") as f:
                self.key = serialization.load_pem_private_key(f.read(), None)
            with open(self.ca_file, "rb") as f:
                self.cert = x509.load_pem_x509_certificate(f.read())
            return
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                    critical=True)
                     .sign(self.key, hashes.SHA256()))
        _private(key_file, self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        with open(self.ca_file, "wb") as f:
            f.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem, common_name, hosts):
        """``<stem>.pem``: a new key and a certificate for ``common_name`` naming ``hosts``
        (IP addresses or DNS names), for servers and clients alike (Kafka's PEM key
        store: the key, then the certificate); returns its path."""
        x509, hashes, serialization, ec, EKU, NameOID = _cryptography()
        key = ec.generate_private_key(ec.SECP256R1())
        names = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage([EKU.SERVER_AUTH, EKU.CLIENT_AUTH]),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        path = os.path.join(self.directory, f"{stem}.pem")
        _private(path, key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())
                 + cert.public_bytes(serialization.Encoding.PEM))
        return path


def _read_properties(path):
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    out[key] = value
    except FileNotFoundError:
        pass
    return out


def write_properties(path, properties, private=False):
    text = "".join(f"{k}={v}\n" for k, v in properties.items()).encode("utf-8")
    if private:
        _private(path, text)
    else:
        with open(path, "wb") as f:
            f.write(text)


def scram_jaas(user, password):
    """A ScramLoginModule entry naming the broker's own credentials."""
    return f'{_SCRAM_MODULE} required username="{user}" password="{password}";'


class DevSecurity:
    """The security of a development cluster under ``directory`` (module docstring)."""

    def __init__(self, directory, protocol):
        if protocol not in PROTOCOLS:
            raise SecuritySetupError(f"unknown security {protocol!r} (one of "
                                     f"{', '.join(PROTOCOLS)})")
        self.directory = directory
        self.protocol = protocol.upper()
        self.passwords = {}
        self.ca_file = None
        self._keystores = {}

    @property
    def secured(self):
        return self.protocol != "PLAINTEXT"

    @property
    def tls(self):
        return self.protocol == "SASL_SSL"

    def prepare(self, broker_ids, host):
        """Make (or read back) the certificates and passwords; write the client's
        properties."""
        if not self.secured:
            return
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        path = os.path.join(self.directory, "passwords.properties")
        self.passwords = _read_properties(path)
        for user in (BROKER_USER, ADMIN_USER):
            self.passwords.setdefault(user, secrets.token_urlsafe(18))
        write_properties(path, self.passwords, private=True)
        client = {"security.protocol": self.protocol, "sasl.mechanism": MECHANISM,
                  "sasl.username": ADMIN_USER, "sasl.password": self.passwords[ADMIN_USER]}
        if self.tls:
            authority = CertificateAuthority(self.directory)
            self.ca_file = authority.ca_file
            for broker_id in broker_ids:
                stem = f"broker-{broker_id}"
                existing = os.path.join(self.directory, f"{stem}.pem")
                self._keystores[broker_id] = existing if os.path.exists(existing) else \
                    authority.issue(stem, f"kqlite broker {broker_id}", [host, "localhost"])
            client["ssl.ca.location"] = self.ca_file
        write_properties(os.path.join(self.directory, "client.properties"), client,
                         private=True)

    def add_users(self, zk):
        """Write the SCRAM users into ZooKeeper (``zk``: a started kazoo client)."""
        from ..cluster.zookeeper.credentials import set_credentials
        from ..server.authentication import scram
        mechanism = scram.MECHANISMS[MECHANISM]
        for user, password in sorted(self.passwords.items()):
            set_credentials(zk, user, {MECHANISM: scram.make_credential(
                mechanism, password, scram.DEFAULT_ITERATIONS).to_text()})

    def broker_properties(self, broker_id, host, port):
        """The Kafka properties of a secured broker's listener (none when plaintext)."""
        if not self.secured:
            return {}
        name = self.protocol
        props = {"listeners": f"{name}://{host}:{port}",
                 "inter.broker.listener.name": name,
                 "sasl.enabled.mechanisms": MECHANISM,
                 "sasl.mechanism.inter.broker.protocol": MECHANISM,
                 f"listener.name.{name.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
                     scram_jaas(BROKER_USER, self.passwords[BROKER_USER])}
        if self.tls:
            props.update({"ssl.keystore.type": "PEM",
                          "ssl.keystore.location": self._keystores[broker_id],
                          "ssl.truststore.type": "PEM",
                          "ssl.truststore.location": self.ca_file})
        return props

    def client_config(self):
        """confluent-kafka's settings for the admin user (bootstrap servers not
        included)."""
        return _read_properties(os.path.join(self.directory, "client.properties")) \
            if self.secured else {}
