"""Connections are bounded as Kafka bounds them: connections.max.idle.ms closes idle ones,
max.connections.per.ip (with overrides) closes a connection over its address's cap at
once and logs it once per interval, max.connections holds new connections in the
backlog until one closes, and queued.max.request.bytes bounds the bytes of requests
read and not yet answered, whatever the number of clients sending large requests."""

import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import kqlite
from broker_process import BrokerProcess, RawClient, free_port
from broker_thread import BrokerThread, GatedFS, segment_of

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.format.batch import build_batch  # noqa: E402
from kqlite.protocol import ApiKey, ErrorCode, decode_response, encode_request  # noqa: E402


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    values = {}
    for line in text.decode().splitlines():
        m = re.match(r"^([a-z_]+)(?:\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) not in values:
            values[m.group(1)] = float(m.group(2))
    return values


def connect(port, source="127.0.0.1"):
    return socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))


def api_versions_answered(sock):
    """Send ApiVersions v0; True when answered, False when the broker closed the
    connection instead."""
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, 7, "limits", {}))
    head = _recv_exactly(sock, 4)
    if head is None:
        return False
    frame = _recv_exactly(sock, struct.unpack(">i", head)[0])
    correlation, body = decode_response(ApiKey.API_VERSIONS, 0, frame)
    return correlation == 7 and body["error_code"] == ErrorCode.NONE


def _recv_exactly(sock, n):
    out = b""
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        out += chunk
    return out


def closed_by_broker(sock):
    """True when the broker closes the connection (EOF or reset) without a request."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_idle_connection_is_closed_but_not_while_a_request_is_in_progress(tmp_path):
    metrics = free_port()
    broker = BrokerProcess(tmp_path / "data", extra=[
        "--connections-max-idle-ms", "400", "--metrics-listen", f"127.0.0.1:{metrics}"])
    try:
        client = RawClient(broker)
        assert client.metadata_ok()
        # A Fetch waiting in the purgatory for longer than the idle time is a request in
        # progress, not idleness: it gets its answer.
        body = client.call(ApiKey.METADATA, 9, {"topics": [{"name": "idle"}],
                                                "allow_auto_topic_creation": True})
        assert body["topics"][0]["error_code"] == ErrorCode.NONE
        fetch = client.call(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 1500, "min_bytes": 1 << 20,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": "idle", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        assert fetch["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        # Then nothing more is sent: the broker closes the connection.
        assert closed_by_broker(client.sock)
        client.close()
        assert scrape(metrics)["kqlite_idle_connections_closed_total"] >= 1
    finally:
        assert broker.stop() == 0, broker.stderr()


def test_connections_over_the_per_address_cap_are_closed_at_once_and_logged_once(tmp_path):
    metrics = free_port()
    broker = BrokerProcess(tmp_path / "data", extra=[
        "--max-connections-per-ip", "3",
        "--max-connections-per-ip-overrides", "127.0.0.2:5",
        "--metrics-listen", f"127.0.0.1:{metrics}"])
    started = time.monotonic()
    held, refused = [], 0
    try:
        for _ in range(3):
            held.append(connect(broker.port))
            assert api_versions_answered(held[-1])
        for _ in range(20):
            with connect(broker.port) as extra:
                assert not api_versions_answered(extra)
            refused += 1
        for _ in range(5):                     # its override is above the default cap
            held.append(connect(broker.port, source="127.0.0.2"))
            assert api_versions_answered(held[-1])
        with connect(broker.port, source="127.0.0.2") as extra:
            assert not api_versions_answered(extra)
        refused += 1
        assert scrape(metrics)["kqlite_connections_refused_total"] == refused
        # A connection that closes gives its address its slot back.
        held.pop(0).close()
        deadline = time.monotonic() + 30
        while True:
            with connect(broker.port) as again:
                if api_versions_answered(again):
                    break
            assert time.monotonic() < deadline, "the closed connection's slot never came back"
    finally:
        for sock in held:
            sock.close()
        code = broker.stop()
    assert code == 0, broker.stderr()
    lines = [line for line in broker.stderr().splitlines()
             if "max.connections.per.ip" in line]
    # Logged once per interval (a minute), not once per refused connection.
    assert 1 <= len(lines) <= 1 + int(time.monotonic() - started) // 60, lines
    assert "127.0.0.1" in lines[0] and "cap of 3" in lines[0]


def test_at_max_connections_new_connections_wait_until_one_closes(tmp_path):
    metrics = free_port()
    broker = BrokerProcess(tmp_path / "data", extra=[
        "--max-connections", "3", "--max-connections-per-ip", "10",
        "--metrics-listen", f"127.0.0.1:{metrics}"])
    held = []
    try:
        for _ in range(3):
            held.append(connect(broker.port))
            assert api_versions_answered(held[-1])
        waiting = connect(broker.port)       # completes in the kernel's listen backlog
        waiting.sendall(encode_request(ApiKey.API_VERSIONS, 0, 7, "limits", {}))
        # Not accepted, not closed: it waits (Kafka's acceptor waits for a slot).
        assert not select.select([waiting], [], [], 1.0)[0]
        assert scrape(metrics)["kqlite_connections"] == 3
        held.pop().close()
        waiting.settimeout(30)
        head = _recv_exactly(waiting, 4)
        assert head is not None, "the waiting connection was closed instead of served"
        _, body = decode_response(ApiKey.API_VERSIONS, 0,
                                  _recv_exactly(waiting, struct.unpack(">i", head)[0]))
        assert body["error_code"] == ErrorCode.NONE
        held.append(waiting)
    finally:
        for sock in held:
            sock.close()
        assert broker.stop() == 0, broker.stderr()
    assert broker.stderr().count("max.connections (3) reached") == 1, broker.stderr()


CAP = 1 << 20
VALUE = b"v" * (400 * 1024)       # two such requests fit under CAP, three do not
CLIENTS = 12


def test_request_bytes_in_flight_never_exceed_queued_max_request_bytes(tmp_path):
    data = tmp_path / "data"
    with kqlite.open(data) as db:
        db.create_topic("big", 1)
    fs = GatedFS()
    gate = fs.gate("pwrite", segment_of("big", 0))
    with BrokerThread(data, fs=fs, max_request_size=CAP,
                      queued_max_request_bytes=CAP) as b:
        memory = b.broker.request_memory
        request = {"acks": 1, "timeout_ms": 30000, "topic_data": [
            {"name": "big", "partition_data": [{"index": 0,
                                                "records": build_batch([VALUE])}]}]}
        clients = [RawClient(b, timeout=60) for _ in range(CLIENTS)]
        clients[0].send(ApiKey.PRODUCE, 7, request)
        gate.wait_entered()        # its append is held in storage, its bytes reserved
        for client in clients[1:]:
            client.send(ApiKey.PRODUCE, 7, request)
        deadline = time.monotonic() + 30
        while memory.waiting < CLIENTS - 2:   # one more fits beside it; the rest wait
            assert time.monotonic() < deadline, (memory.in_use, memory.waiting)
            time.sleep(0.01)
        assert memory.in_use <= CAP
        assert memory.in_use >= 2 * len(VALUE)
        gate.release()
        answers = [None] * CLIENTS

        def receive(i):
            answers[i] = clients[i].receive(ApiKey.PRODUCE, 7)
        threads = [threading.Thread(target=receive, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        parts = [a["responses"][0]["partition_responses"][0] for a in answers]
        assert [p["error_code"] for p in parts] == [ErrorCode.NONE] * CLIENTS
        assert sorted(p["base_offset"] for p in parts) == list(range(CLIENTS))
        assert memory.waits >= CLIENTS - 2
        assert len(VALUE) * 2 <= memory.peak <= CAP
        for client in clients:
            client.close()
        deadline = time.monotonic() + 30
        while memory.in_use:          # connections release what they hold as they end
            assert time.monotonic() < deadline, memory.in_use
            time.sleep(0.01)
        text = b.run(b.broker.metrics.scrape())
        assert f"kqlite_queued_request_bytes_max {memory.peak}" in text
        assert f"kqlite_queued_max_request_bytes {CAP}" in text


def test_request_memory_serves_waiters_in_order_and_forgets_cancelled_ones():
    import asyncio
    from kqlite.server.request_memory import RequestMemory

    async def scenario():
        memory = RequestMemory(100, 100)
        assert await memory.acquire(60) == 60
        large = asyncio.ensure_future(memory.acquire(70))
        small = asyncio.ensure_future(memory.acquire(10))
        gone = asyncio.ensure_future(memory.acquire(30))
        await asyncio.sleep(0)
        # The small one would fit, but it came after the large one: no overtaking.
        assert (memory.in_use, memory.waiting) == (60, 3)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert memory.waiting == 2
        memory.release(60)
        await asyncio.sleep(0)
        assert large.done() and small.done() and memory.in_use == 80
        memory.release(70)
        memory.release(10)
        assert (memory.in_use, memory.peak, memory.waiting) == (0, 80, 0)
    asyncio.run(scenario())


@pytest.mark.parametrize("args, message", [
    (["--max-request-bytes", "2000000", "--queued-max-request-bytes", "1000000"],
     "must be at least --max-request-bytes"),
    (["--max-connections-per-ip-overrides", "127.0.0.1"], "expected HOST:COUNT"),
    (["--connections-max-idle-ms", "0"], "expected a positive integer"),
])
def test_serve_refuses_bad_connection_settings(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "kqlite.cli", "serve", "--data-dir",
                           str(tmp_path / "data"), "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
