"""Requests kqlite does not serve (APIs it does not know, versions it does not serve), and
SASL requests on a PLAINTEXT listener: an error answer and a connection that stays usable,
or - where no answer layout is known - a closed connection, exactly as
docs/compatibility.md says."""

import socket
import struct
import time

import pytest

from broker_process import RawClient, unique

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402


@pytest.mark.parametrize("version", [0, 1])
def test_sasl_handshake_on_plaintext_is_illegal_and_the_connection_stays(broker, version):
    # Kafka's KafkaApis answers a SaslHandshake on a non-SASL listener ILLEGAL_SASL_STATE
    # with no mechanisms.
    c = RawClient(broker)
    reply = c.call(ApiKey.SASL_HANDSHAKE, version, {"mechanism": "PLAIN"})
    assert reply == {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    assert c.metadata_ok()
    c.close()


def test_sasl_authenticate_on_plaintext_is_illegal(broker):
    c = RawClient(broker)
    reply = c.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0user\0secret"})
    assert reply["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert reply["error_message"] == ("SaslAuthenticate request received after successful "
                                      "authentication")
    assert c.metadata_ok()
    c.close()


def test_security_and_transaction_apis_are_advertised(broker):
    c = RawClient(broker)
    keys = {k["api_key"] for k in c.call(ApiKey.API_VERSIONS, 3,
                                         {"client_software_name": "raw",
                                          "client_software_version": "1"})["api_keys"]}
    assert {0, 1, 3, 18, 17, 36} <= keys
    assert {29, 30, 31, 48, 49, 50, 51} <= keys          # ACLs, quotas, SCRAM credentials
    assert {22, 24, 25, 26, 27, 28, 61, 65, 66} <= keys  # the transaction coordinator's
    c.close()


@pytest.mark.parametrize("api_key,version", [(57, 0), (1000, 0), (3, 99)],
                         ids=["UpdateFeatures", "unknown-key", "Metadata-v99"])
def test_request_without_a_known_answer_closes_only_its_connection(broker, api_key, version):
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    header = struct.pack(">hhih", api_key, version, 5, 3) + b"raw"
    s.sendall(struct.pack(">i", len(header) + 4) + header + b"\0\0\0\0")
    assert s.recv(1) == b""          # closed, as Apache Kafka does
    s.close()
    deadline = time.monotonic() + 5
    while "unsupported request" not in broker.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "closing the connection" in broker.stderr()
    c = RawClient(broker)
    assert c.metadata_ok()           # the broker itself is fine
    c.close()


def test_librdkafka_with_sasl_configured_reports_the_mechanism(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    errors = []
    p = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
        "error_cb": lambda err: errors.append(err), "message.timeout.ms": 3000})
    p.produce(unique("sasl"), b"x")
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors, "librdkafka reported nothing"
    text = " ".join(str(e) for e in errors)
    assert "SASL" in text or "mechanism" in text.lower(), text
    p.flush(0)
