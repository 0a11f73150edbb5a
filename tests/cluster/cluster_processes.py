"""Real ``kqlite serve --zookeeper`` child processes on loopback, for the cluster tests.

Each broker has a fixed port (picked free once), so a broker killed and restarted comes
back at the same address, as a restarted Kafka broker does. Brokers of a cluster are
started together and waited for together: starting three costs one start-up time.
``running_cluster`` is the tests' usual fixture body: a formed cluster, its logs printed
if the setup fails, SIGKILLed at the end. The fault-injection harness
(``tests/faults/harness/cluster.py``) subclasses :class:`ClusterBroker`.
"""

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from kqlite.protocol.connection import decode_response, encode_request

_LISTENING = re.compile(r"listening on 127\.0\.0\.\d+:(\d+)")
WAIT = 120   # seconds: liveness guards only, never a pass/fail timing
# For a cluster whose tests SIGKILL a broker and wait for what follows its session's
# expiry (new leaders, an ISR without it): half the default 6 s, as the fault harness
# (ZooKeeperProcess's 500 ms tick allows down to 1 s).
QUICK_EXPIRY = ("--zookeeper-session-timeout-ms", "3000")


def until(predicate, what, timeout=WAIT, interval=0.1):
    """Poll ``predicate`` until it returns something true, and return that; fail the
    test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"never happened within {timeout} s: {what}")
        time.sleep(interval)


def request(broker, api_key, version, body, timeout=60):
    """One raw request to ``broker`` on a new connection; the decoded response body."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=timeout) as s:
        return exchange(s, api_key, version, body)


def exchange(sock, api_key, version, body, correlation=1):
    """Send one request on the connected ``sock``; the decoded response body."""
    sock.sendall(encode_request(api_key, version, correlation, "test", body))
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    return decode_response(api_key, version, _exactly(sock, size))[1]


def _exactly(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the broker closed the connection"
        out += chunk
    return out


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_accepting(port, proc, what, timeout=30):
    """Wait until a child process ``proc`` (``what``, for the error) accepts connections on
    the loopback ``port``: for children, such as tansu, whose log says nothing to wait on."""
    def accepting():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True
    until(accepting, f"{what} listening on {port}", timeout, interval=0.05)


def child_environment():
    """The environment of a kqlite child process (a broker, ``kqlite cluster up``, a tool):
    the C helpers whichever pass starts it, since cluster tests measure replication and
    leadership, not the twins (the other suites prove those), and unbuffered output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("KQLITE_PURE_PYTHON", None)
    return env


class ClusterBroker:
    """One broker process; ``start()`` launches it, ``wait_listening()`` waits for it.

    A subclass changes how it is launched through :meth:`command` and :meth:`environment`
    (``listen_host`` is the loopback address it listens on)."""

    def __init__(self, broker_id, data_dir, zk_hosts, extra=(), *, listen_host="127.0.0.1"):
        self.broker_id = broker_id
        self.data_dir = str(data_dir)
        self.zk_hosts = zk_hosts
        self.extra = list(extra)
        self.listen_host = listen_host
        self.port = free_port(listen_host)
        self.proc = None
        self._lines = []
        self._reader = None
        self._listening = threading.Event()

    @property
    def address(self):
        return f"{self.listen_host}:{self.port}"

    def serve_arguments(self):
        """``kqlite`` arguments every broker is started with, from ``--log-level`` on."""
        return ["--log-level", "info", "serve", "--data-dir", self.data_dir,
                "--listen", f"{self.listen_host}:{self.port}",
                "--broker-id", str(self.broker_id), "--zookeeper", self.zk_hosts]

    def command(self):
        return [sys.executable, "-m", "kqlite.cli", *self.serve_arguments(),
                "--controlled-shutdown-retry-backoff-ms", "500", *self.extra]

    def environment(self):
        return child_environment()

    def start(self):
        self._lines = []
        self._listening.clear()
        self.proc = subprocess.Popen(
            self.command(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env=self.environment())
        # A thread drains stderr for the whole life of the process, so that a chatty
        # broker never blocks on a full pipe.
        self._reader = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def _drain(self, proc):
        for line in proc.stderr:
            self._lines.append(line)
            if _LISTENING.search(line):
                self._listening.set()

    def wait_listening(self, timeout=60):
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker {self.broker_id} did not start:\n{self.log()}")
        return self

    def log(self):
        return "".join(self._lines)

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL: the broker dies without a word; its ZooKeeper session expires."""
        if self.alive:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=60):
        """SIGTERM (controlled shutdown); the exit code (None if it never started)."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(5)
        return self.proc.returncode if self.proc else None


class Cluster:
    """``size`` brokers (ids 1..size) over one ZooKeeper chroot, started in parallel.
    With ``metrics``, each broker serves Prometheus metrics too, on the loopback port
    ``self.metrics[broker_id]``."""

    def __init__(self, tmp_path, zk_hosts, size=3, extra=(), *, metrics=False):
        self.zk_hosts = zk_hosts
        self.brokers = {b: ClusterBroker(b, tmp_path / f"broker-{b}", zk_hosts, extra)
                        for b in range(1, size + 1)}
        self.metrics = {}
        if metrics:
            for b in self.brokers.values():
                self.metrics[b.broker_id] = free_port()
                b.extra += ["--metrics-listen", f"127.0.0.1:{self.metrics[b.broker_id]}"]

    def __getitem__(self, broker_id):
        return self.brokers[broker_id]

    @property
    def bootstrap(self):
        return ",".join(b.address for b in self.brokers.values() if b.alive)

    def start(self):
        for b in self.brokers.values():
            b.start()
        for b in self.brokers.values():
            b.wait_listening()
        return self

    def stop(self):
        """Controlled shutdown of every broker at once (SIGTERM), as an operator would."""
        for b in self.brokers.values():
            if b.alive:
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers.values():
            b.stop()

    def kill(self):
        """SIGKILL every broker: a test's teardown, which has nothing to wait for (a
        controlled shutdown of the whole cluster takes seconds of retries)."""
        for b in self.brokers.values():
            b.kill()

    def logs(self):
        return "\n".join(f"--- broker {b.broker_id} ---\n{b.log()}"
                         for b in self.brokers.values())


def formed(admin, size):
    """Whether ``size`` brokers are registered and a controller is elected, as the
    Metadata of ``admin`` (a confluent-kafka AdminClient) shows: the controller sends
    every broker the full list."""
    md = admin.list_topics(timeout=10)
    return md.controller_id >= 0 and len(md.brokers) == size


@contextlib.contextmanager
def running_cluster(tmp_path, zk_hosts, extra=(), *, metrics=False, size=3):
    """A started :class:`Cluster`, formed (see :func:`formed`); its brokers' logs are
    printed if starting it or the body of the ``with`` fails, and its brokers SIGKILLed
    at the end.

    A fixture yields the cluster from inside the ``with``: pytest does not raise a test's
    failure in its fixtures, so there only a failing setup prints the logs."""
    from confluent_kafka.admin import AdminClient
    cluster = Cluster(tmp_path, zk_hosts, size, extra, metrics=metrics)
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        until(lambda: formed(admin, size), "every broker registered and a controller elected")
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill()
