"""A cluster of ``kqlite serve --config server.properties --zookeeper`` processes whose
brokers talk to each other over SASL_SSL (SCRAM-SHA-512, certificates made at test time
by kqlite's own development CA), each with two listeners:

  SASL_SSL    127.0.0.1:<port>   clients and the other brokers (inter.broker.listener.name)
  PLAINTEXT   127.0.0.1:<port>   clients only, advertised as localhost:<port>

The SCRAM users (``broker``, ``admin``) are written to ZooKeeper before a broker starts, as
an operator does with ``kqlite users --zookeeper`` (or Kafka's ``kafka-configs``).
"""

import os

from cluster_processes import ClusterBroker, free_port

from kqlite.cli.cluster_security import CertificateAuthority, scram_jaas, write_properties
from kqlite.cluster.zookeeper.credentials import set_credentials
from kqlite.server.authentication import scram

PASSWORDS = {"broker": "broker-secret", "admin": "admin-secret"}
MECHANISM = "SCRAM-SHA-512"


def add_users(zk, passwords):
    mechanism = scram.MECHANISMS[MECHANISM]
    for user, password in passwords.items():
        set_credentials(zk, user, {MECHANISM: scram.make_credential(mechanism, password)
                                   .to_text()})


class SecuredBroker(ClusterBroker):
    """One broker with a SASL_SSL and (unless ``plaintext`` is false) a PLAINTEXT
    listener; ``password`` is the one its own connections to other brokers authenticate
    with."""

    def __init__(self, broker_id, root, zk_hosts, authority, extra=(), *,
                 password=PASSWORDS["broker"], plaintext=True):
        super().__init__(broker_id, root / f"broker-{broker_id}", zk_hosts, extra)
        self.secure_port = self.port
        self.plain_port = free_port() if plaintext else None
        self.ca = authority.ca_file
        keystore = authority.issue(f"broker-{broker_id}", f"broker {broker_id}",
                                   ["127.0.0.1", "localhost"])
        self.config = str(root / f"broker-{broker_id}.properties")
        write_properties(self.config, {
            "listeners": f"SASL_SSL://127.0.0.1:{self.secure_port}" + (
                f",PLAINTEXT://127.0.0.1:{self.plain_port}" if plaintext else ""),
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{self.secure_port}" + (
                f",PLAINTEXT://localhost:{self.plain_port}" if plaintext else ""),
            "inter.broker.listener.name": "SASL_SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": authority.ca_file,
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                scram_jaas("broker", password)})

    def serve_arguments(self):
        return ["--log-level", "info", "serve", "--data-dir", self.data_dir,
                "--config", self.config, "--broker-id", str(self.broker_id),
                "--zookeeper", self.zk_hosts]

    def client(self, user="admin", password=None, **extra):
        """confluent-kafka settings for a SASL_SSL client of this broker."""
        return {"bootstrap.servers": f"127.0.0.1:{self.secure_port}",
                "security.protocol": "SASL_SSL", "ssl.ca.location": self.ca,
                "sasl.mechanism": MECHANISM, "sasl.username": user,
                "sasl.password": password or PASSWORDS.get(user), **extra}

    def plaintext_client(self, **extra):
        return {"bootstrap.servers": f"127.0.0.1:{self.plain_port}", **extra}


class SecuredCluster:
    """Brokers 1..size over one ZooKeeper chroot (users added first), started in
    parallel."""

    def __init__(self, root, zk_hosts, size=3, extra=()):
        self.root = root
        self.zk_hosts = zk_hosts
        self.extra = list(extra)
        self.authority = CertificateAuthority(str(root / "ca"))
        self.brokers = {b: SecuredBroker(b, root, zk_hosts, self.authority, self.extra)
                        for b in range(1, size + 1)}

    def __getitem__(self, broker_id):
        return self.brokers[broker_id]

    def add(self, broker_id, **options):
        broker = SecuredBroker(broker_id, self.root, self.zk_hosts, self.authority,
                               self.extra, **options)
        self.brokers[broker_id] = broker
        return broker

    def client(self, **extra):
        config = self.brokers[1].client(**extra)
        config["bootstrap.servers"] = ",".join(f"127.0.0.1:{b.secure_port}"
                                               for b in self.brokers.values() if b.alive)
        return config

    def start(self):
        for b in self.brokers.values():
            b.start()
        for b in self.brokers.values():
            b.wait_listening()
        return self

    def kill(self):
        for b in self.brokers.values():
            b.kill()

    def logs(self):
        return "\n".join(f"--- broker {b.broker_id} ---\n{b.log()}"
                         for b in self.brokers.values())


def private(path):
    """Whether ``path`` is readable by its owner only."""
    return os.stat(path).st_mode & 0o077 == 0
