"""Broker robustness: bad frames, huge length prefixes, unsupported requests, metrics,
graceful SIGTERM."""

import os
import socket
import struct
import urllib.request

import pytest

from broker_process import BrokerProcess, free_port

protocol = pytest.importorskip("kqlite.protocol")


def api_versions_frame(version=0, correlation=7):
    body = struct.pack(">hhi", 18, version, correlation) + struct.pack(">h", 4) + b"test"
    return struct.pack(">i", len(body)) + body


def recv_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">i", head)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def connect(broker):
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    return s


def test_huge_length_prefix_closes_only_that_connection(broker):
    bad = connect(broker)
    bad.sendall(struct.pack(">i", 2_000_000_000) + b"\x00" * 16)
    assert bad.recv(1) == b""  # closed without reading 2 GB
    good = connect(broker)
    good.sendall(api_versions_frame())
    frame = recv_frame(good)
    assert frame is not None and struct.unpack(">i", frame[:4])[0] == 7
    good.close()


def test_malformed_frame_closes_that_connection(broker):
    bad = connect(broker)
    bad.sendall(struct.pack(">i", 6) + b"\x00\x03\x00\x63\xff\xff")  # truncated header
    assert bad.recv(1) == b""
    good = connect(broker)
    good.sendall(api_versions_frame())
    assert recv_frame(good) is not None


def test_unsupported_api_versions_version_gets_an_error_and_the_list(broker):
    s = connect(broker)
    s.sendall(api_versions_frame(version=99, correlation=3))
    frame = recv_frame(s)
    correlation, error = struct.unpack(">ih", frame[:6])
    assert correlation == 3 and error == 35  # UNSUPPORTED_VERSION, as a v0 body
    (count,) = struct.unpack(">i", frame[6:10])
    keys = {struct.unpack(">h", frame[10 + 6 * i:12 + 6 * i])[0] for i in range(count)}
    assert {0, 1, 2, 3, 18} <= keys


def test_metrics_and_graceful_shutdown(tmp_path):
    mport = free_port()
    b = BrokerProcess(tmp_path / "data", ["--metrics-listen", f"127.0.0.1:{mport}"])
    try:
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=b.bootstrap)
        for i in range(10):
            p.send("metered", b"x%d" % i, partition=0)
        p.flush()
        p.close()
        text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
        assert "kqlite_messages_in_total 10" in text
        assert 'kqlite_log_end_offset{topic="metered",partition="0"} 10' in text
        assert 'kqlite_requests_total{api="Produce"}' in text
    finally:
        assert b.stop() == 0
    assert os.path.exists(tmp_path / "data" / ".kafka_cleanshutdown")
    assert "shutting down" in b.stderr()


def test_sigterm_repeated_during_the_shutdown_never_kills_the_broker(tmp_path):
    # A process manager that asks again (systemd's or a test's second SIGTERM) must not
    # turn a clean stop into a death by signal: the shutdown runs once, as Kafka's hook.
    import signal
    import time
    b = BrokerProcess(tmp_path / "data")
    deadline = time.monotonic() + 30
    while b.proc.poll() is None and time.monotonic() < deadline:
        b.proc.send_signal(signal.SIGTERM)
        time.sleep(0.005)
    assert b.proc.wait(30) == 0, b.stderr()
    assert "stopped cleanly" in b.stderr()
