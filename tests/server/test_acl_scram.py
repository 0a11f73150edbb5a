"""ACLs on principals that logged in: a ``kqlite serve --config server.properties`` broker
with SASL listeners and Kafka's ACL authorizer, SCRAM users made with ``kqlite users``,
ACLs added with ``kqlite acls`` on its data dir while it runs. confluent-kafka as alice
(SCRAM-SHA-256) may produce to her topic and not read it; as bob (SCRAM-SHA-512) may
consume in his group and not produce; each refusal is Kafka's code to the client and a
line of the audit log on the broker."""

import time

import pytest

from broker_process import unique

pytest.importorskip("cryptography")
confluent_kafka = pytest.importorskip("confluent_kafka")
from secured_broker import PASSWORDS, SecuredBroker, kqlite  # noqa: E402

SECONDS = 20     # a liveness guard: the broker applies the ACL file within a second


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = SecuredBroker(tmp_path_factory.mktemp("acl-scram"), extra={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"})
    yield b
    b.stop()


def _client(broker, user, mechanism, **extra):
    return dict({"bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
                 "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                 "sasl.username": user, "sasl.password": PASSWORDS[user]}, **extra)


def _produce(config, topic, value):
    outcome = []
    producer = confluent_kafka.Producer(dict(config, **{"message.timeout.ms": 5000}))
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    return outcome[0] if outcome else "no delivery report"


def _consume(config, topic, group):
    consumer = confluent_kafka.Consumer(dict(config, **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            return msg.error() or msg.value()
    finally:
        consumer.close()
    return None


def test_scram_users_are_held_to_their_acls(broker):
    topic = unique("orders")
    data = str(broker.data_dir)
    # Bob's first: the broker reads the whole file, so once alice may produce (the wait
    # below), bob's ACLs are in force too.
    for argv in (["--allow-principal", "User:bob", "--consumer", "--topic", topic,
                  "--group", "billing"],
                 ["--allow-principal", "User:alice", "--producer", "--topic", topic]):
        done = kqlite("acls", "add", "--data-dir", data, *argv)
        assert done.returncode == 0, done.stderr
    alice = _client(broker, "alice", "SCRAM-SHA-256")
    bob = _client(broker, "bob", "SCRAM-SHA-512")
    deadline = time.monotonic() + SECONDS
    while (err := _produce(alice, topic, b"first order")) is not None:
        assert time.monotonic() < deadline, f"alice could never produce: {err}"
        time.sleep(0.5)
    assert _consume(bob, topic, "billing") == b"first order"
    refused = _produce(bob, topic, b"not bob's to write")
    assert refused is not None and \
        refused.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = _consume(alice, topic, "alices-group")
    assert isinstance(denied, confluent_kafka.KafkaError) and denied.code() in (
        confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED,
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED)
    deadline = time.monotonic() + 5
    while "Principal = User:bob is Denied operation = Write" not in broker.stderr():
        assert time.monotonic() < deadline, broker.stderr()[-3000:]
        time.sleep(0.1)


def _command_config(tmp_path, user, mechanism):
    path = tmp_path / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{PASSWORDS[user]}";\n')
    return str(path)


def test_kqlite_acls_manages_acls_over_sasl_as_the_principal_it_logs_in_as(broker, tmp_path):
    server = broker.bootstrap("SASL_PLAINTEXT")
    as_alice = ["--bootstrap-server", server,
                "--command-config", _command_config(tmp_path, "alice", "SCRAM-SHA-256")]
    topic = unique("managed")
    grant = ["--allow-principal", "User:carol", "--operation", "Read", "--topic", topic]
    # Logged in, but without ALTER on the cluster: Kafka's refusal, nothing stored.
    refused = kqlite("acls", "add", *as_alice, *grant)
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr + \
        refused.stdout, refused.stderr
    granted = kqlite("acls", "add", "--data-dir", str(broker.data_dir), "--allow-principal",
                     "User:alice", "--operation", "Alter", "--operation", "Describe",
                     "--cluster")
    assert granted.returncode == 0, granted.stderr
    deadline = time.monotonic() + SECONDS
    while (added := kqlite("acls", "add", *as_alice, *grant)).returncode != 0:
        assert time.monotonic() < deadline, added.stderr
        time.sleep(0.5)
    listed = kqlite("acls", "list", *as_alice, "--topic", topic)
    assert listed.returncode == 0 and "User:carol" in listed.stdout, listed.stderr
    # The same listener without the credentials cannot even ask.
    anonymous = kqlite("acls", "list", "--bootstrap-server", server, "--timeout", "5")
    assert anonymous.returncode == 1 and "User:carol" not in anonymous.stdout


@pytest.mark.parametrize("command", [["acls", "list"], ["quotas", "describe"]])
def test_command_config_goes_with_a_bootstrap_server(broker, tmp_path, command):
    config = _command_config(tmp_path, "bob", "SCRAM-SHA-512")
    wrong = kqlite(*command, "--data-dir", str(broker.data_dir), "--command-config", config)
    assert wrong.returncode == 2 and "--command-config goes with --bootstrap-server" in \
        wrong.stderr
    missing = kqlite(*command, "--bootstrap-server", broker.bootstrap("SASL_PLAINTEXT"),
                     "--command-config", str(tmp_path / "absent.properties"))
    assert missing.returncode == 2 and "absent.properties" in missing.stderr
