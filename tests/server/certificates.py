"""Test certificates, made at test time with ``cryptography`` (no key material is committed):
a CA, a broker certificate for localhost and 127.0.0.1, and client certificates with chosen
subjects. Files are PEM, written into a directory the caller gives."""

import datetime
import ipaddress
from pathlib import Path

x509 = None


def _lib():
    global x509
    from cryptography import x509 as _x509
    x509 = _x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    return hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def _name(subject):
    """``{"CN": "alice", "OU": "eng"}`` -> an x509.Name, the least specific attribute first
    (C, ST, L, O, OU, CN), as certificates usually list them."""
    _, _, _, _, NameOID = _lib()
    oids = {"C": NameOID.COUNTRY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME,
            "L": NameOID.LOCALITY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    order = ["C", "ST", "L", "O", "OU", "CN"]
    return x509.Name([x509.NameAttribute(oids[k], subject[k]) for k in order if k in subject])


class Authority:
    """A CA that signs server and client certificates into ``directory``."""

    def __init__(self, directory, name="kqlite test CA"):
        hashes, serialization, ec, _, _ = _lib()
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = _name({"CN": name, "O": "kqlite tests"})
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                                  crl_sign=True, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False,
                                                  key_agreement=False, encipher_only=False,
                                                  decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.ca_file = self.dir / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem, subject, *, server=False, password=None):
        """Write ``<stem>.key`` and ``<stem>.crt`` (and ``<stem>.pem``, both together, the
        form of Kafka's PEM key store); returns a dict of their paths."""
        hashes, serialization, ec, EKU, _ = _lib()
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(subject))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False).add_extension(
                x509.ExtendedKeyUsage([EKU.SERVER_AUTH, EKU.CLIENT_AUTH]), critical=False)
        else:
            builder = builder.add_extension(x509.ExtendedKeyUsage([EKU.CLIENT_AUTH]),
                                            critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8, encryption)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        paths = {"key": self.dir / f"{stem}.key", "cert": self.dir / f"{stem}.crt",
                 "pem": self.dir / f"{stem}.pem"}
        paths["key"].write_bytes(key_pem)
        paths["cert"].write_bytes(cert_pem)
        paths["pem"].write_bytes(key_pem + cert_pem)
        for path in paths.values():
            path.chmod(0o600)
        return {k: str(v) for k, v in paths.items()}

    def pkcs12(self, stem, subject, password):
        """A PKCS#12 key store with a new server certificate; returns its path."""
        _, serialization, _, _, _ = _lib()
        from cryptography.hazmat.primitives.serialization import pkcs12
        paths = self.issue(stem, subject, server=True)
        key = serialization.load_pem_private_key(Path(paths["key"]).read_bytes(), None)
        cert = x509.load_pem_x509_certificate(Path(paths["cert"]).read_bytes())
        data = pkcs12.serialize_key_and_certificates(
            stem.encode(), key, cert, [self.cert],
            serialization.BestAvailableEncryption(password.encode()))
        path = self.dir / f"{stem}.p12"
        path.write_bytes(data)
        return str(path)
