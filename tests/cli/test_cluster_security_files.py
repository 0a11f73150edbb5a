"""What ``kqlite cluster up --security`` makes before any process starts
(kqlite/cli/cluster_security.py): each broker's server.properties, usable as it is by
``kqlite serve``; certificates naming the listen host, signed by the cluster's CA; private
key material and passwords; and the same material read back when ``up --dir`` resumes."""

import os
import ssl

import pytest

from kqlite.cli.cluster_security import DevSecurity, SecuritySetupError
from kqlite.cluster.network.inter_broker import from_properties
from kqlite.server.authentication.listener_security import build_listeners

pytest.importorskip("cryptography")


def _private(path):
    return os.stat(path).st_mode & 0o077 == 0


def test_a_sasl_ssl_cluster_gets_a_ca_certificates_users_and_properties(tmp_path):
    security = DevSecurity(str(tmp_path / "security"), "sasl_ssl")
    security.prepare([1, 2], "127.0.0.1")
    props = security.broker_properties(2, "127.0.0.1", 9093)
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9093"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert 'username="broker"' in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    # What kqlite serve builds from them: the listener and the inter-broker client.
    listeners = build_listeners(props)
    inter = from_properties(props, listeners)
    assert (inter.name, inter.sasl_mechanism, inter.sasl_options["username"]) == \
        ("SASL_SSL", "SCRAM-SHA-512", "broker")
    # The broker's certificate names the host and chains to the CA.
    context = ssl.create_default_context(cafile=security.ca_file)
    context.load_cert_chain(props["ssl.keystore.location"])
    for path in (props["ssl.keystore.location"], tmp_path / "security" / "ca.key",
                 tmp_path / "security" / "passwords.properties",
                 tmp_path / "security" / "client.properties"):
        assert _private(path), path
    client = security.client_config()
    assert client["sasl.password"] == security.passwords["admin"] != \
        security.passwords["broker"]
    assert client["ssl.ca.location"] == security.ca_file


def test_resuming_reads_the_same_material_back(tmp_path):
    first = DevSecurity(str(tmp_path), "sasl_ssl")
    first.prepare([1], "127.0.0.1")
    keystore = first.broker_properties(1, "127.0.0.1", 1)["ssl.keystore.location"]
    with open(keystore, "rb") as f:
        key_material = f.read()
    again = DevSecurity(str(tmp_path), "sasl_ssl")
    again.prepare([1], "127.0.0.1")
    assert again.passwords == first.passwords
    with open(again.broker_properties(1, "127.0.0.1", 1)["ssl.keystore.location"], "rb") as f:
        assert f.read() == key_material


def test_sasl_plaintext_needs_no_certificates_and_plaintext_nothing(tmp_path):
    security = DevSecurity(str(tmp_path / "s"), "sasl_plaintext")
    security.prepare([1], "127.0.0.1")
    props = security.broker_properties(1, "127.0.0.1", 9092)
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092"
    assert not any(key.startswith("ssl.") for key in props)
    assert not os.path.exists(tmp_path / "s" / "ca.pem")
    plain = DevSecurity(str(tmp_path / "p"), "plaintext")
    plain.prepare([1], "127.0.0.1")
    assert plain.broker_properties(1, "127.0.0.1", 9092) == {}
    assert plain.client_config() == {} and not os.path.exists(tmp_path / "p")
    with pytest.raises(SecuritySetupError, match="unknown security"):
        DevSecurity(str(tmp_path), "kerberos")


def test_zookeeper_set_acl_true_stops_the_start_with_its_reason(tmp_path, capfd):
    """A cluster broker cannot authenticate to ZooKeeper, so it refuses to promise ZooKeeper
    ACLs (docs/security.md, "ZooKeeper"); false, Kafka's default, is accepted."""
    from kqlite.cli.main import main
    status = main(["serve", "--data-dir", str(tmp_path / "d"), "--override",
                   "zookeeper.set.acl=true"])
    err = capfd.readouterr().err
    assert status == 2 and "zookeeper.set.acl" in err and "protect ZooKeeper" in err
    assert not (tmp_path / "d").exists()
