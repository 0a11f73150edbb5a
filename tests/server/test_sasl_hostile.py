"""The SASL exchange and TLS handshake against hostile and careless clients, on a broker in a
thread (raw sockets, kqlite's own codec): requests before authentication, oversized frames,
malformed SCRAM messages (hypothesis), replayed nonces, a TLS handshake that never
finishes, plaintext sent to a TLS port. Each is answered or closed without a traceback, and
leaves no descriptor or memory behind; an unknown user and a wrong password get the same
answer at the same step, in the same time."""

import gc
import logging
import os
import socket
import statistics
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from broker_thread import BrokerThread

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.connection import decode_response, encode_request
from kqlite.server.authentication import credential_file, scram
from kqlite.server.authentication.listener_security import build_listeners
from kqlite.server.authentication.sasl_client import ScramClient

pytest.importorskip("cryptography")
from certificates import Authority  # noqa: E402

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')
MAX_RECEIVE = 4096


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    certs = Authority(root / "certs")
    server = certs.issue("broker", {"CN": "localhost"}, server=True)
    data = root / "data"
    data.mkdir()

    def add(users):
        users["alice"] = {m: scram.make_credential(scram.MECHANISMS[m], "alice-secret")
                          .to_text() for m in scram.MECHANISMS}
    credential_file.change_credentials(str(data), add)
    listeners = build_listeners({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.location": server["pem"],
        "sasl.server.max.receive.size": str(MAX_RECEIVE),
        "connections.max.reauth.ms": "0"})
    b = BrokerThread(data, listeners=listeners, authentication_timeout_ms=1500,
                     failed_authentication_delay_ms=100)
    b.ports = {listener.name: listener.endpoint.port for listener in b.broker.listeners}
    b.data_dir = str(data)
    yield b
    b.stop()


@pytest.fixture(autouse=True)
def no_traceback(caplog):
    caplog.set_level(logging.INFO, logger="kqlite")
    yield
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


class Raw:
    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0

    def send(self, api_key, version, body):
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "raw", body))

    def call(self, api_key, version, body):
        self.send(api_key, version, body)
        frame = self.frame()
        assert frame is not None, "closed"
        return decode_response(api_key, version, frame)[1]

    def frame(self):
        head = self._exactly(4)
        return None if head is None else self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n):
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return out

    def closed(self):
        return self.frame() is None

    def close(self):
        self.sock.close()


def _sasl(broker):
    return Raw(broker.ports["SASL_PLAINTEXT"])


def _authenticate(c, token, version=2):
    return c.call(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


@pytest.mark.parametrize("api_key,version,body", [
    (ApiKey.METADATA, 12, {"topics": None}),
    (ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": []}),
    (ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"}),
    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}),
])
def test_a_request_before_authentication_closes_unanswered(broker, api_key, version, body):
    c = _sasl(broker)
    c.send(api_key, version, body)
    assert c.closed()
    c.close()


def test_api_versions_is_served_before_authentication_and_only_once(broker):
    c = _sasl(broker)
    answer = c.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                             "client_software_version": "1"})
    assert answer["error_code"] == 0 and {17, 36} <= {k["api_key"] for k in answer["api_keys"]}
    c.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                    "client_software_version": "1"})
    assert c.closed()


def test_an_unknown_api_versions_version_gets_the_v0_answer_and_the_state_stays(broker):
    c = _sasl(broker)
    c.sock.sendall(struct.pack(">ihhih", 10, 18, 99, 7, 0))
    correlation, body = decode_response(ApiKey.API_VERSIONS, 0, c.frame())
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed(broker):
    c = _sasl(broker)
    answer = c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                      "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]}
    assert c.closed()


def test_plain_with_a_v0_handshake_takes_raw_tokens(broker):
    c = _sasl(broker)
    assert c.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    token = b"\0alice\0alice-secret"
    c.sock.sendall(struct.pack(">i", len(token)) + token)
    assert c.call(ApiKey.METADATA, 12, {"topics": None})["brokers"]


def test_a_wrong_raw_token_closes_without_an_answer(broker):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    token = b"\0alice\0wrong"
    c.sock.sendall(struct.pack(">i", len(token)) + token)
    assert c.closed()


def test_a_wrong_password_is_answered_after_the_delay_and_nothing_else_is_served(broker):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    started = time.monotonic()
    answer = _authenticate(c, b"\0alice\0wrong")
    assert time.monotonic() - started >= 0.09
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer["error_message"] == "Authentication failed: Invalid username or password"
    c.send(ApiKey.METADATA, 12, {"topics": None})
    assert c.closed()


def test_a_request_other_than_sasl_authenticate_after_the_handshake_closes(broker):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    c.send(ApiKey.METADATA, 12, {"topics": None})
    assert c.closed()


@pytest.mark.parametrize("size", [MAX_RECEIVE + 1, 1 << 30, -1])
def test_a_frame_over_the_receive_bound_closes_before_it_is_read(broker, size):
    c = _sasl(broker)
    c.sock.sendall(struct.pack(">i", size) + b"x" * 16)
    assert c.closed()


def test_an_oversized_token_after_the_handshake_closes(broker):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    c.send(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=alice,r=" + b"x" * MAX_RECEIVE})
    assert c.closed()


def _scram_start(broker, mechanism="SCRAM-SHA-256", user="alice", password="alice-secret"):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    client = ScramClient(scram.MECHANISMS[mechanism], user, password)
    answer = _authenticate(c, client.first())
    return c, client, answer


def test_scram_logs_in_and_the_server_proves_it_holds_the_credential(broker):
    c, client, answer = _scram_start(broker)
    assert answer["error_code"] == 0
    final = _authenticate(c, client.respond(answer["auth_bytes"]))
    assert final["error_code"] == 0
    client.respond(final["auth_bytes"])          # checks the server's signature
    assert client.complete
    assert c.call(ApiKey.METADATA, 12, {"topics": None})["brokers"]


def _failure(broker, user, password):
    """(where the exchange stopped, the answer, seconds the failing step took)."""
    c, client, first = _scram_start(broker, user=user, password=password)
    if first["error_code"]:
        return "first", first, None
    started = time.monotonic()
    final = _authenticate(c, client.respond(first["auth_bytes"]))
    took = time.monotonic() - started
    assert c.closed()
    return "final", final, took


def test_an_unknown_user_and_a_wrong_password_are_indistinguishable(broker):
    unknown = [_failure(broker, "mallory", "x") for _ in range(8)]
    wrong = [_failure(broker, "alice", "x") for _ in range(8)]
    for step, answer, _ in unknown + wrong:
        assert step == "final"
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer["error_message"] == ("Authentication failed during authentication due "
                                           "to invalid credentials with SASL mechanism "
                                           "SCRAM-SHA-256")
    assert abs(statistics.median(t for *_, t in unknown) -
               statistics.median(t for *_, t in wrong)) < 0.02


def test_an_unknown_user_sees_the_same_salt_every_time(broker):
    def server_first(user):
        c, _, answer = _scram_start(broker, user=user)
        c.close()
        return scram.parse_server_first(answer["auth_bytes"])
    first, second = server_first("mallory"), server_first("mallory")
    assert (first.salt, first.iterations) == (second.salt, second.iterations)
    assert first.iterations == scram.DEFAULT_ITERATIONS
    assert first.salt.isalnum() and first.nonce != second.nonce
    assert server_first("trudy").salt != first.salt


def test_a_replayed_client_final_fails(broker):
    c, client, first = _scram_start(broker)
    final_token = client.respond(first["auth_bytes"])
    assert _authenticate(c, final_token)["error_code"] == 0
    replay = _sasl(broker)
    replay.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    _authenticate(replay, client.first())
    answer = _authenticate(replay, final_token)
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert replay.closed()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_malformed_scram_messages_fail_cleanly(broker, first, final):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    answer = _authenticate(c, first)
    if answer["error_code"] == 0:
        answer = _authenticate(c, final)
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert c.closed()
    c.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=300))
def test_garbage_frames_before_authentication_close_cleanly(broker, garbage):
    c = _sasl(broker)
    c.sock.sendall(struct.pack(">i", len(garbage)) + garbage)
    assert c.frame() is None or True     # answered (ApiVersions by chance) or closed
    c.close()


def test_a_tls_handshake_that_never_finishes_is_closed(broker):
    s = socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10)
    started = time.monotonic()
    assert s.recv(1) == b""
    assert time.monotonic() - started < 8
    s.close()


def test_plaintext_sent_to_a_tls_port_is_closed(broker):
    s = socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10)
    s.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "raw", {
        "client_software_name": "raw", "client_software_version": "1"}))
    try:
        data = s.recv(4096)
    except ConnectionResetError:
        data = b""
    assert not data.startswith(b"\0\0")        # at most a TLS alert, never a Kafka answer
    s.close()


def test_a_client_that_stops_mid_exchange_is_closed_at_the_deadline(broker):
    c = _sasl(broker)
    c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    started = time.monotonic()
    assert c.closed()
    assert 1.0 <= time.monotonic() - started < 8


def _broker_descriptors(broker):
    """The descriptors of this process that are the broker's: the connections it accepted
    on its ports, and files under its data dir. The process's other descriptors come and
    go with other threads (a client of an earlier test still reconnecting somewhere, the
    session's ZooKeeper client), which is no sign of a leak of the broker's."""
    ports = set(broker.ports.values())
    accepted = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                # local address "IP:PORT" in hex; state 0A is LISTEN; the inode
                if int(fields[1].rsplit(":", 1)[1], 16) in ports and fields[3] != "0A":
                    accepted.add(f"socket:[{fields[9]}]")
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue    # closed since the listing
        count += target in accepted or target.startswith(broker.data_dir + os.sep)
    return count


def test_hostile_connections_leave_no_descriptor_or_memory_behind(broker, caplog):
    # INFO records kept by the log capture would count as the broker's memory.
    caplog.set_level(logging.WARNING, logger="kqlite")

    def round_of_abuse():
        for size in (MAX_RECEIVE + 1, -5):
            c = _sasl(broker)
            c.sock.sendall(struct.pack(">i", size))
            c.closed()
            c.close()
        for user in ("alice", "mallory"):
            c, client, first = _scram_start(broker, user=user, password="x")
            _authenticate(c, client.respond(first["auth_bytes"]))
            c.closed()
            c.close()
        s = socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        try:
            s.recv(100)
        except OSError:
            pass
        s.close()

    round_of_abuse()
    time.sleep(0.3)
    gc.collect()
    tracemalloc.start()
    before_fds = _broker_descriptors(broker)
    held = _sasl(broker)        # the measure counts a connection the broker accepted
    deadline = time.monotonic() + 5
    while _broker_descriptors(broker) == before_fds and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _broker_descriptors(broker) == before_fds + 1
    held.close()
    before = tracemalloc.take_snapshot()
    for _ in range(10):
        round_of_abuse()
    time.sleep(0.5)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    deadline = time.monotonic() + 5     # a close on a loaded machine may come late
    while _broker_descriptors(broker) > before_fds and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _broker_descriptors(broker) <= before_fds
    assert grown < 512 * 1024, grown
    assert broker.run(_connections(broker.broker)) == 0


async def _connections(broker):
    return len(broker._connections)
