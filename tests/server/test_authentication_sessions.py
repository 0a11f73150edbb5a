"""What authentication leaves on a connection, on a broker in a thread: the principal each
listener establishes (as the authorizer sees it), Metadata answering each client with its
own listener's endpoint, re-authentication (KIP-368) by librdkafka, a session that expires
closing the connection at its next request, and SCRAM users managed over the wire with
confluent-kafka's AdminClient and used at once."""

import threading
import time

import pytest

from broker_process import unique
from broker_thread import BrokerThread

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.authentication.listener_security import build_listeners
from kqlite.server.authorization import AllowAll

pytest.importorskip("cryptography")
from certificates import Authority  # noqa: E402
from test_sasl_hostile import Raw  # noqa: E402

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


class SeeingAuthorizer(AllowAll):
    """Allows everything, remembering who asked over which listener."""

    def __init__(self):
        self.seen = set()
        self._lock = threading.Lock()

    def authorize(self, context, operation, resource, *, log_if_denied=True):
        with self._lock:
            self.seen.add((context.listener_name, context.security_protocol.name,
                           str(context.principal)))
        return True


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("sessions")
    certs = Authority(root / "certs")
    server = certs.issue("broker", {"CN": "localhost"}, server=True)
    client = certs.issue("alice", {"CN": "Alice", "O": "Acme"})
    listeners = build_listeners({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "REAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "ssl.keystore.location": server["pem"], "ssl.truststore.location": str(certs.ca_file),
        "ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.connections.max.reauth.ms": "1500"})
    authorizer = SeeingAuthorizer()
    broker = BrokerThread(root / "data", listeners=listeners, authorizer=authorizer)
    broker.broker.db.create_topic("seen", 1)    # Metadata asks DESCRIBE on it
    broker.ports = {listener.name: listener.endpoint.port for listener in broker.broker.listeners}
    broker.ca, broker.client, broker.authorizer = str(certs.ca_file), client, authorizer
    yield broker
    broker.stop()


def _config(served, listener, **extra):
    config = {"bootstrap.servers": f"127.0.0.1:{served.ports[listener]}"}
    if listener == "SSL":
        config.update({"security.protocol": "SSL", "ssl.ca.location": served.ca})
    elif listener != "PLAINTEXT":
        config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                       "sasl.username": "alice", "sasl.password": "alice-secret"})
    config.update(extra)
    return config


def _metadata_brokers(config):
    admin_module = pytest.importorskip("confluent_kafka.admin")
    admin = admin_module.AdminClient(config)
    metadata = admin.list_topics(timeout=20)
    return {(b.host, b.port) for b in metadata.brokers.values()}


@pytest.mark.parametrize("listener,extra,principal", [
    ("PLAINTEXT", {}, "User:ANONYMOUS"),
    ("SSL", {}, "User:ANONYMOUS"),
    ("SSL", "certificate", "User:alice"),
    ("SASL_PLAINTEXT", {}, "User:alice"),
])
def test_each_listener_establishes_its_principal_and_answers_its_own_endpoint(
        served, listener, extra, principal):
    if extra == "certificate":
        extra = {"ssl.certificate.location": served.client["cert"],
                 "ssl.key.location": served.client["key"]}
    served.authorizer.seen.clear()
    assert _metadata_brokers(_config(served, listener, **extra)) == {
        ("127.0.0.1", served.ports[listener])}
    protocol = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}.get(listener, "SASL_PLAINTEXT")
    assert (listener, protocol, principal) in served.authorizer.seen


def test_librdkafka_reauthenticates_before_its_session_expires(served):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    errors, delivered = [], []
    producer = confluent_kafka.Producer({**_config(served, "REAUTH"),
                                         "error_cb": errors.append})
    topic = unique("reauth")
    expired_before = served.broker.metrics.expired_sessions_closed
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.25)
    assert producer.flush(20) == 0
    assert len(delivered) >= 15 and not any(delivered), delivered
    assert served.broker.metrics.expired_sessions_closed == expired_before
    assert not errors, errors


def test_a_session_not_reauthenticated_is_closed_at_its_next_request_after_expiry(served):
    c = Raw(served.ports["REAUTH"])
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    answer = c.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"})
    assert answer["error_code"] == 0 and answer["session_lifetime_ms"] == 1500
    assert c.call(ApiKey.METADATA, 12, {"topics": None})["brokers"]
    time.sleep(1.7)
    c.send(ApiKey.METADATA, 12, {"topics": None})
    assert c.closed()


def test_a_raw_client_reauthenticates_on_the_same_connection(served):
    c = Raw(served.ports["REAUTH"])
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    c.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"})
    time.sleep(1.1)
    assert c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    assert c.call(ApiKey.SASL_AUTHENTICATE, 1,
                  {"auth_bytes": b"\0alice\0alice-secret"})["error_code"] == 0
    time.sleep(0.8)     # past the first session's end, within the second's
    assert c.call(ApiKey.METADATA, 12, {"topics": None})["brokers"]


def test_a_handshake_sooner_than_a_second_after_the_last_is_illegal(served):
    c = Raw(served.ports["REAUTH"])
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    c.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"})
    assert c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) == {
        "error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


def test_scram_users_managed_over_the_wire_log_in_at_once(served):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    admin = AdminClient(_config(served, "PLAINTEXT"))
    user = unique("carol")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, b"carol-secret")])
    futures[user].result(20)
    described = admin.describe_user_scram_credentials([user])[user].result(20)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]

    def login(password):
        errors = []
        producer = confluent_kafka.Producer({
            "bootstrap.servers": f"127.0.0.1:{served.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": password, "error_cb": errors.append,
            "message.timeout.ms": 5000})
        producer.produce(unique("carol"), b"x")
        return producer.flush(10) == 0 and not errors

    assert login("carol-secret")
    assert not login("wrong")
    admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])[user].result(20)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.describe_user_scram_credentials([user])[user].result(20)
    assert not login("carol-secret")
