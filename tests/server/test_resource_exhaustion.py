"""Running out of disk space or file descriptors under a running broker: the requests
that need the resource get KAFKA_STORAGE_ERROR (the connection stays), the broker logs
the cause once per episode, the acceptor does not spin on EMFILE, and once the resource
is back the same broker produces and fetches on the same partitions again."""

import errno
import logging
import os
import re
import socket
import time
import urllib.request

import pytest

import kqlite
from broker_process import BrokerProcess, RawClient, free_port
from broker_thread import BrokerThread

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.format.batch import build_batch, decode_batch  # noqa: E402
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402
from kqlite.storage.fs import OsFile, OsFileSystem  # noqa: E402

FULL = "No space left on device"


class FullDisk(OsFileSystem):
    """The real file system, whose writes fail with ENOSPC on the files ``full(path)``
    names, as writes on a full file system do; new files cannot be created then."""

    def __init__(self):
        self.full = lambda path: False

    def open(self, path, create=False):
        if create and self.full(path) and not os.path.exists(path):
            raise OSError(errno.ENOSPC, FULL, path)
        f = super().open(path, create)
        seam = _FullFile(f.path, f._fd)
        seam.fs = self
        return seam


class _FullFile(OsFile):
    __slots__ = ("fs",)

    def pwrite(self, data, pos):
        if self.fs.full(self.path):
            raise OSError(errno.ENOSPC, FULL, self.path)
        super().pwrite(data, pos)


def produce(client, topic, value, partition=0):
    body = client.call(ApiKey.PRODUCE, 7, {"acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition,
                                                         "records": build_batch([value])}]}]})
    return body["responses"][0]["partition_responses"][0]


def fetch(client, topic, partition, offset=0):
    body = client.call(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return body["responses"][0]["partitions"][0]


def values(part):
    data, pos, out = bytes(part["records"]), 0, []
    while pos < len(data):
        header, records = decode_batch(data, pos)
        out += [r.value for r in records]
        pos += header.batch_length + 12          # WIRE: baseOffset and batchLength precede it
    return out


def test_full_disk_answers_storage_error_logs_once_and_recovers_without_restart(
        tmp_path, caplog):
    data = tmp_path / "data"
    with kqlite.open(data) as db:
        db.create_topic("t", 1)
    disk = FullDisk()
    caplog.set_level(logging.INFO, logger="kqlite")
    with BrokerThread(data, fs=disk) as b:
        client = RawClient(b)
        assert produce(client, "t", b"before")["error_code"] == ErrorCode.NONE
        # Nothing can be written: the append is refused and nothing is stored.
        disk.full = lambda path: True
        for i in range(3):
            assert produce(client, "t", b"lost-%d" % i)["error_code"] == \
                ErrorCode.KAFKA_STORAGE_ERROR
        # The records fit but the log's state record does not: the write leaves the log
        # refusing writes until it is reopened.
        disk.full = lambda path: path.endswith(".kqlite-state")
        for i in range(3):
            assert produce(client, "t", b"half-%d" % i)["error_code"] == \
                ErrorCode.KAFKA_STORAGE_ERROR
        assert client.metadata_ok()                          # the connection stays
        disk.full = lambda path: False                       # space is freed
        after = produce(client, "t", b"after")
        assert after["error_code"] == ErrorCode.NONE
        part = fetch(client, "t", 0)
        assert part["error_code"] == ErrorCode.NONE
        got = values(part)
        assert got[0] == b"before" and got[-1] == b"after"
        assert not any(v.startswith(b"lost-") for v in got)
        assert part["high_watermark"] == after["base_offset"] + 1 == len(got)
        assert b.broker.io.alarms.failures["disk space"] >= 6
        client.close()
    text = [r.getMessage() for r in caplog.records]
    out = [m for m in text if m.startswith("out of disk space")]
    assert len(out) == 1, text                   # once for the whole episode
    assert "append to t-0" in out[0] and FULL in out[0]
    assert sum(m.startswith("disk space available again") for m in text) == 1
    assert not any("writer that died" in m for m in text), text


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^([a-z_]+) (\S+)$", text.decode(), re.M)}


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


LIMIT = 64


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/<pid>/fd")
def test_out_of_descriptors_fails_requests_not_connections_and_recovers(tmp_path):
    data = tmp_path / "data"
    with kqlite.open(data) as db:
        db.create_topic("t", 3)
    metrics = free_port()
    broker = BrokerProcess(data, max_open_files=LIMIT, extra=[
        "--max-connections", "1000", "--max-connections-per-ip", "1000",
        "--metrics-listen", f"127.0.0.1:{metrics}"])
    flood = []
    try:
        client = RawClient(broker)
        assert produce(client, "t", b"p0", partition=0)["error_code"] == ErrorCode.NONE
        pid = broker.proc.pid
        deadline = time.monotonic() + 60
        while "out of file descriptors" not in "".join(broker.lines):
            assert time.monotonic() < deadline, broker.stderr()
            flood.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
            time.sleep(0.02)
            broker.stderr()
        assert open_descriptors(pid) >= LIMIT - 1
        exhausted_at = time.monotonic()
        # Partition 1's log is not open: opening it needs descriptors there are not.
        assert produce(client, "t", b"p1", partition=1)["error_code"] == \
            ErrorCode.KAFKA_STORAGE_ERROR
        assert fetch(client, "t", 1)["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        time.sleep(2)                  # the acceptor faces EMFILE all this time
        episode = broker.stderr()
        held = time.monotonic() - exhausted_at
        for sock in flood:
            sock.close()
        flood.clear()
        deadline = time.monotonic() + 60
        while True:                    # the same broker, the same partition, no restart
            answer = produce(client, "t", b"p1", partition=1)
            if answer["error_code"] == ErrorCode.NONE:
                break
            assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
            assert time.monotonic() < deadline, broker.stderr()
            time.sleep(0.1)
        part = fetch(client, "t", 1)
        assert part["error_code"] == ErrorCode.NONE and values(part) == [b"p1"]
        assert values(fetch(client, "t", 0)) == [b"p0"]
        fresh = RawClient(broker)          # the acceptor is back
        assert fresh.metadata_ok()
        fresh.close()
        client.close()
        # Every failed accept waited for a close or a second: a spinning acceptor
        # would count thousands in that time.
        failed_accepts = scrape(metrics)["kqlite_accept_errors_total"]
        assert 1 <= failed_accepts <= 2 * (held + 10), failed_accepts
    finally:
        for sock in flood:
            sock.close()
        code = broker.stop()
    assert code == 0, broker.stderr()
    assert episode.count("out of file descriptors") == 1, episode
    assert "Traceback" not in broker.stderr(), broker.stderr()
