"""A ``kqlite serve --console`` child process for the console's tests, and the HTTP calls
they make to it.

The broker runs with the C helpers whichever pass starts it (KQLITE_PURE_PYTHON is taken
out of its environment): the console's tests run in the pure-Python pass, and the broker
they look at is not what they test."""

import base64
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ENV = {k: v for k, v in os.environ.items() if k != "KQLITE_PURE_PYTHON"}
ENV["PYTHONUNBUFFERED"] = "1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConsoleBroker:
    """``kqlite serve`` with ``--console`` on a free ``--metrics-listen`` port;
    ``config``: a server.properties to start from (None: a plaintext broker)."""

    def __init__(self, data_dir, extra=(), config=None):
        self.http_port = free_port()
        args = ["--config", str(config)] if config else [
            "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kqlite.cli", "serve", *args, "--num-partitions", "1",
             "--metrics-listen", f"127.0.0.1:{self.http_port}", "--console", *extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=ENV)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.lines.append(line)
                found = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if found:
                    self.port = int(found.group(1))
                if "kqlite console on" in line:
                    ready.set()
        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 60
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("broker did not start:\n" + "".join(self.lines))
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.http_port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def get(url, auth=None):
    """(status, body bytes) of a GET."""
    return _call(urllib.request.Request(url), auth)


def post(url, fields, auth=None):
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    return _call(request, auth)


def _call(request, auth):
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def form_token(page):
    """The console's form token, from a page that shows a write form."""
    return re.search(rb'name="token" value="([^"]+)"', page).group(1).decode()
