"""A real `kqlite serve` child process on a free loopback port, and small test helpers.

Kept out of conftest.py so test modules can import it by a name no other test
directory uses.
"""

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time


class BrokerProcess:
    def __init__(self, data_dir, extra=(), global_args=(), max_open_files=None):
        """``max_open_files``: the broker's soft RLIMIT_NOFILE (``ulimit -n``)."""
        self.data_dir = str(data_dir)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kqlite.cli", *global_args, "serve", "--data-dir", self.data_dir,
             "--listen", "127.0.0.1:0", "--num-partitions", "3", *extra],
            stderr=subprocess.PIPE, text=True,
            preexec_fn=None if max_open_files is None else lambda: _limit_files(max_open_files))
        self.port = None
        self.lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.lines))
        os.set_blocking(self.proc.stderr.fileno(), False)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def stderr(self):
        try:
            more = self.proc.stderr.read() or ""
        except (TypeError, OSError):
            more = ""
        self.lines.append(more)
        return "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _limit_files(soft):
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique(prefix):
    return f"{prefix}-{int(time.time() * 1000) % 10**9}-{os.getpid()}"


class RawClient:
    """Requests encoded by kqlite's own codec over a plain socket."""

    def __init__(self, broker, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
        self.correlation = 0

    def call(self, api_key, version, body):
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def send(self, api_key, version, body):
        """Send a request without waiting for its response (see :meth:`receive`)."""
        from kqlite.protocol.connection import encode_request
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "raw", body))

    def receive(self, api_key, version):
        """The response to the last request sent."""
        from kqlite.protocol.connection import decode_response
        frame = self.frame()
        assert frame is not None, "the broker closed the connection"
        correlation, response = decode_response(api_key, version, frame)
        assert correlation == self.correlation
        return response

    def has_response(self):
        """Whether response bytes are waiting to be read, without blocking."""
        import select
        return bool(select.select([self.sock], [], [], 0)[0])

    def frame(self):
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def metadata_ok(self):
        from kqlite.protocol import ApiKey
        body = self.call(ApiKey.METADATA, 1, {"topics": None})
        return [b["node_id"] for b in body["brokers"]] == [0]

    def close(self):
        self.sock.close()
