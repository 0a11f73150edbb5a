"""Real clients over every kind of listener of one ``kqlite serve --config`` broker:
confluent-kafka, kafka-python, aiokafka and kafkajs produce and consume in a group over SSL
(with and without a client certificate), SASL_PLAINTEXT and SASL_SSL with PLAIN and both
SCRAM mechanisms; a wrong password gets SASL_AUTHENTICATION_FAILED and nothing else; kcat
over TLS and SASL_SSL (Debian's build has both). Certificates are made at test time."""

import asyncio
import json
import os
import shutil
import subprocess
import time

import pytest

from broker_process import unique
from secured_broker import PASSWORDS, SecuredBroker

pytest.importorskip("cryptography")

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
COUNT = 20


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = SecuredBroker(tmp_path_factory.mktemp("secured"))
    yield broker
    broker.stop()
    assert "Traceback" not in broker.stderr()


def _confluent_config(broker, listener, mechanism=None, password=None, certificate=False):
    config = {"bootstrap.servers": broker.bootstrap(listener)}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        config.update({"security.protocol": "SSL" if listener != "SASL_SSL" else "SASL_SSL",
                       "ssl.ca.location": broker.ca})
    if certificate:
        config.update({"ssl.certificate.location": broker.client["cert"],
                       "ssl.key.location": broker.client["key"]})
    if mechanism is not None:
        if listener == "SASL_PLAINTEXT":
            config["security.protocol"] = "SASL_PLAINTEXT"
        config.update({"sasl.mechanism": mechanism, "sasl.username": "alice",
                       "sasl.password": password or PASSWORDS["alice"]})
    return config


def _confluent_roundtrip(config):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic, errors = unique("sec"), []
    producer = confluent_kafka.Producer({**config, "error_cb": errors.append})
    for i in range(COUNT):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0, errors
    consumer = confluent_kafka.Consumer({**config, "group.id": unique("g"),
                                         "auto.offset.reset": "earliest",
                                         "error_cb": errors.append})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 40
    while len(seen) < COUNT and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.add(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert len(seen) == COUNT, errors


@pytest.mark.parametrize("listener,certificate", [("SSL", False), ("SSL", True),
                                                  ("MTLS", True)])
def test_confluent_over_tls(secured, listener, certificate):
    _confluent_roundtrip(_confluent_config(secured, listener, certificate=certificate))


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_over_sasl(secured, listener, mechanism):
    _confluent_roundtrip(_confluent_config(secured, listener, mechanism))


def test_confluent_oauthbearer_unsecured(secured):
    config = {"bootstrap.servers": secured.bootstrap("SASL_PLAINTEXT"),
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
              "sasl.oauthbearer.config": "principal=alice",
              "enable.sasl.oauthbearer.unsecure.jwt": True}
    _confluent_roundtrip(config)


def test_mtls_refuses_a_client_without_a_certificate(secured):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    errors = []
    producer = confluent_kafka.Producer({**_confluent_config(secured, "MTLS"),
                                         "error_cb": errors.append,
                                         "message.timeout.ms": 3000})
    producer.produce(unique("mtls"), b"x")
    producer.flush(5)
    assert errors and all(e.code() in (confluent_kafka.KafkaError._TRANSPORT,
                                       confluent_kafka.KafkaError._SSL,
                                       confluent_kafka.KafkaError._ALL_BROKERS_DOWN,
                                       confluent_kafka.KafkaError._MSG_TIMED_OUT)
                          for e in errors), errors


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_wrong_password_is_sasl_authentication_failed(secured, mechanism):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    errors = []
    producer = confluent_kafka.Producer({
        **_confluent_config(secured, "SASL_SSL", mechanism, password="wrong"),
        "error_cb": errors.append, "message.timeout.ms": 3000})
    producer.produce(unique("denied"), b"x")
    producer.flush(5)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Authentication failed" in e.str() for e in errors), errors


def _kafka_python_config(broker, listener, mechanism=None, certificate=False):
    config = {"bootstrap_servers": broker.bootstrap(listener), "request_timeout_ms": 20000}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        config.update(security_protocol="SSL" if listener != "SASL_SSL" else "SASL_SSL",
                      ssl_cafile=broker.ca)
    if certificate:
        config.update(ssl_certfile=broker.client["cert"], ssl_keyfile=broker.client["key"])
    if mechanism is not None:
        if listener == "SASL_PLAINTEXT":
            config["security_protocol"] = "SASL_PLAINTEXT"
        config.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                      sasl_plain_password=PASSWORDS["alice"])
    return config


@pytest.mark.parametrize("listener,mechanism,certificate", [
    ("SSL", None, False), ("MTLS", None, True), ("SASL_PLAINTEXT", "PLAIN", False),
    ("SASL_SSL", "SCRAM-SHA-256", False), ("SASL_SSL", "SCRAM-SHA-512", False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", False)])
def test_kafka_python(secured, listener, mechanism, certificate):
    kafka = pytest.importorskip("kafka")
    config = _kafka_python_config(secured, listener, mechanism, certificate)
    topic = unique("kp")
    producer = kafka.KafkaProducer(**config)
    for i in range(COUNT):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, group_id=unique("g"), auto_offset_reset="earliest",
                                   consumer_timeout_ms=20000, **config)
    seen = set()
    for message in consumer:
        seen.add(message.value)
        if len(seen) == COUNT:
            break
    consumer.commit()
    consumer.close()
    assert len(seen) == COUNT


@pytest.mark.parametrize("listener,mechanism,certificate", [
    ("SSL", None, False), ("MTLS", None, True), ("SASL_SSL", "PLAIN", False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", False), ("SASL_SSL", "SCRAM-SHA-512", False)])
def test_aiokafka(secured, listener, mechanism, certificate):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    config = {"bootstrap_servers": secured.bootstrap(listener)}
    if listener != "SASL_PLAINTEXT":
        config.update(security_protocol="SSL" if listener != "SASL_SSL" else "SASL_SSL",
                      ssl_context=create_ssl_context(
                          cafile=secured.ca,
                          certfile=secured.client["cert"] if certificate else None,
                          keyfile=secured.client["key"] if certificate else None))
    if mechanism is not None:
        if listener == "SASL_PLAINTEXT":
            config["security_protocol"] = "SASL_PLAINTEXT"
        config.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                      sasl_plain_password=PASSWORDS["alice"])
    topic = unique("aio")

    async def roundtrip():
        producer = aiokafka.AIOKafkaProducer(**config)
        await producer.start()
        try:
            for i in range(COUNT):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, group_id=unique("g"),
                                             auto_offset_reset="earliest", **config)
        await consumer.start()
        seen = set()
        try:
            async with asyncio.timeout(40):
                async for message in consumer:
                    seen.add(message.value)
                    if len(seen) == COUNT:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return seen

    assert len(asyncio.run(roundtrip())) == COUNT


def _kafkajs(secured, listener, security):
    node = shutil.which("node")
    tool = os.path.join(os.path.dirname(__file__), "node", "kafkajs_tool.js")
    if node is None or not os.path.isdir(os.path.join(os.path.dirname(tool), "node_modules")):
        pytest.skip("node or kafkajs missing")
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1",
               KAFKAJS_SECURITY=json.dumps(security))
    proc = subprocess.run([node, tool, "roundtrip", secured.bootstrap(listener), unique("js"),
                           unique("g"), str(COUNT)], capture_output=True, text=True,
                          timeout=90, env=env)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, lines, proc.stderr


@pytest.mark.parametrize("listener,mechanism,certificate", [
    ("SSL", None, False), ("MTLS", None, True), ("SASL_PLAINTEXT", "plain", False),
    ("SASL_SSL", "scram-sha-256", False), ("SASL_SSL", "scram-sha-512", False)])
def test_kafkajs(secured, listener, mechanism, certificate):
    security = {}
    if listener != "SASL_PLAINTEXT":
        security["ssl"] = {"ca": secured.ca}
        if certificate:
            security["ssl"].update(cert=secured.client["cert"], key=secured.client["key"])
    if mechanism:
        security["sasl"] = {"mechanism": mechanism, "username": "alice",
                            "password": PASSWORDS["alice"]}
    code, lines, stderr = _kafkajs(secured, listener, security)
    assert code == 0 and lines[-1] == {"read": COUNT}, (lines, stderr[-3000:])


def test_kafkajs_wrong_password(secured):
    code, lines, _ = _kafkajs(secured, "SASL_SSL", {
        "ssl": {"ca": secured.ca},
        "sasl": {"mechanism": "scram-sha-256", "username": "alice", "password": "wrong"}})
    assert code == 1 and "SASL" in lines[-1]["error"] + lines[-1].get("type", ""), lines


def _kcat(*args):
    if shutil.which("kcat") is None:
        pytest.skip("kcat missing")
    return subprocess.run(["kcat", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("listener,extra", [
    ("SSL", []), ("MTLS", []), ("SASL_SSL", ["-X", "sasl.mechanism=SCRAM-SHA-256",
                                             "-X", "sasl.username=alice",
                                             "-X", f"sasl.password={PASSWORDS['alice']}"])])
def test_kcat(secured, listener, extra):
    protocol = "SASL_SSL" if listener == "SASL_SSL" else "SSL"
    common = ["-b", secured.bootstrap(listener), "-X", f"security.protocol={protocol}",
              "-X", f"ssl.ca.location={secured.ca}", *extra]
    if listener == "MTLS":
        common += ["-X", f"ssl.certificate.location={secured.client['cert']}",
                   "-X", f"ssl.key.location={secured.client['key']}"]
    topic = unique("kcat")
    produced = subprocess.run(["kcat", *common, "-P", "-t", topic], input="a\nb\nc\n",
                              capture_output=True, text=True, timeout=60) \
        if shutil.which("kcat") else pytest.skip("kcat missing")
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(*common, "-C", "-t", topic, "-o", "beginning", "-c", "3", "-e")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["a", "b", "c"]
