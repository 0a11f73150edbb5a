"""A standalone ZooKeeper server as a child process, for development clusters and tests.

kqlite does not ship ZooKeeper: it runs the real server from Debian's ``zookeeper``
package (``apt-get install zookeeper``; ``scripts/test`` installs it). Only the class path
``/etc/zookeeper/conf:/usr/share/java/zookeeper.jar`` is used: globbing the other jars in
/usr/share/java pulls in a logging jar the server cannot load.

    with ZooKeeperProcess(data_dir) as zk:
        print(zk.connect_string)      # "127.0.0.1:PORT"
"""

import os
import shutil
import signal
import socket
import subprocess
import time

from ...errors import KqliteError

__all__ = ["ZooKeeperProcess", "ZooKeeperUnavailable", "find_zookeeper"]

_JAR_CANDIDATES = ("/usr/share/java/zookeeper.jar",)
_CONF_DIR = "/etc/zookeeper/conf"
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperUnavailable(KqliteError):
    """No ZooKeeper server (or no Java runtime) is installed on this machine."""


def find_zookeeper():
    """(java, class path) for Debian's ZooKeeper, or raise ZooKeeperUnavailable saying
    what to install."""
    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                    if os.environ.get("JAVA_HOME") else None)
    jar = next((j for j in _JAR_CANDIDATES if os.path.exists(j)), None)
    if java is None or jar is None:
        missing = " and ".join(x for x, ok in (("a Java runtime", java), ("zookeeper.jar", jar))
                               if not ok)
        raise ZooKeeperUnavailable(
            f"cannot start ZooKeeper: {missing} not found; install Debian's package with "
            "`apt-get install zookeeper` (scripts/test does this)")
    return java, f"{_CONF_DIR}:{jar}" if os.path.isdir(_CONF_DIR) else jar


def _free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_PR_SET_PDEATHSIG = 1   # <linux/prctl.h>


class ZooKeeperProcess:
    """One standalone ZooKeeper server on loopback, with its data under ``data_dir``.

    ``port=0`` picks a free port. ``start()`` returns once the server answers the ``srvr``
    command (or raises with the tail of its log); ``stop()`` sends SIGTERM, then SIGKILL.
    ``pause()``/``resume()`` SIGSTOP/SIGCONT the JVM (fault injection)."""

    def __init__(self, data_dir, *, host="127.0.0.1", port=0, tick_ms=500,
                 max_session_timeout_ms=60000):
        self.data_dir = os.path.abspath(data_dir)
        self.host = host
        self.port = port or _free_port(host)
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.process = None
        self._log = None

    @property
    def connect_string(self):
        return f"{self.host}:{self.port}"

    @property
    def log_path(self):
        return os.path.join(self.data_dir, "zookeeper.log")

    def _write_config(self):
        os.makedirs(os.path.join(self.data_dir, "data"), exist_ok=True)
        path = os.path.join(self.data_dir, "zoo.cfg")
        # A short tick lets tests use session timeouts of a few seconds (ZooKeeper's
        # minimum session timeout is 2 ticks).
        with open(path, "w") as f:
            f.write(f"tickTime={self.tick_ms}\n"
                    f"dataDir={os.path.join(self.data_dir, 'data')}\n"
                    f"clientPort={self.port}\n"
                    f"clientPortAddress={self.host}\n"
                    f"maxSessionTimeout={self.max_session_timeout_ms}\n"
                    "admin.enableServer=false\n"
                    "4lw.commands.whitelist=srvr,ruok,stat,mntr\n"
                    "maxClientCnxns=0\n")
        return path

    def start(self, timeout=60.0, *, die_with_parent=False):
        """Start and wait until it serves. ``die_with_parent``: see :func:`die_with_parent`
        (only for a process started from a thread that lives as long as the parent)."""
        java, class_path = find_zookeeper()
        config = self._write_config()
        self._log = open(self.log_path, "ab")
        env = dict(os.environ, ZOO_LOG_DIR=self.data_dir)
        self.process = subprocess.Popen(
            [java, "-Xmx256m", "-XX:+UseSerialGC", "-cp", class_path,
             f"-Dzookeeper.log.dir={self.data_dir}", _MAIN, config],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True, preexec_fn=_die_with_parent if die_with_parent else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with {self.process.returncode}: {self._tail()}")
            if self.is_serving():
                return self
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not answer within {timeout:.0f} s: "
                                   f"{self._tail()}")

    def is_serving(self):
        """True when the server answers ``srvr`` as a serving standalone/leader node."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                s.sendall(b"srvr")
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
        except OSError:
            return False
        return b"Mode: standalone" in reply or b"Mode: leader" in reply

    def _tail(self):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 2000))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def pause(self):
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self, timeout=10.0):
        p = self.process
        if p is not None and p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout)
            except ProcessLookupError:
                pass
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def die_with_parent():
    """A ``preexec_fn``: the child gets SIGTERM when its parent dies, even by SIGKILL
    (Linux's PR_SET_PDEATHSIG), so a development cluster leaves no orphans behind. The
    signal follows the *thread* that forked, hence only for children started from the
    main thread. Elsewhere, or without prctl, it does nothing."""
    parent = os.getppid()
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:      # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


_die_with_parent = die_with_parent   # start()'s flag of the same name hides it
