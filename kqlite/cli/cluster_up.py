"""``kqlite cluster up``: a local development cluster in one command.

Theory of operation. ``up`` starts a ZooKeeper server (Debian's ``zookeeper`` package,
kqlite/cluster/zookeeper/process.py) and N ``kqlite serve --zookeeper`` brokers (ids
1..N) as child processes on loopback, each with its data dir and log file under DIR.
It waits until every broker has registered in ZooKeeper and a controller is elected,
then prints the bootstrap string and supervises: a broker that exits on its own is
reported with the tail of its log (the others keep running, as a real cluster would).

Children run in their own sessions, so a Ctrl-C typed in the terminal reaches ``up``
alone, which stops them in order: SIGTERM to every broker (each runs Kafka's controlled
shutdown, flushes its logs and closes its ZooKeeper session), SIGKILL to any still alive
after the grace period, then ZooKeeper. SIGINT and SIGTERM both end in this clean stop
and exit status 0. DIR defaults to a temporary directory removed at the end; a DIR
given with ``--dir`` is kept, and running ``up`` on it again resumes the same cluster.

``--security sasl_ssl`` (or ``sasl_plaintext``) starts a secured cluster: a CA and
broker certificates, SCRAM users for the brokers and an admin written to ZooKeeper
before the brokers start, and a ``server.properties`` per broker whose one listener
clients and brokers both use (cluster_security.py); ``up`` prints where they are and the
client properties to connect with.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from ..errors import KqliteError
from .cluster_security import PROTOCOLS, DevSecurity, write_properties
from .kazoo_logging import quiet_kazoo
from .serve import positive_int

DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_START_TIMEOUT = 120.0
_POLL_SECONDS = 0.2
_SHUTDOWN_BACKOFF_MS = 500   # controlled shutdown retries: the whole cluster is stopping


class ClusterStartError(KqliteError):
    """The development cluster could not be started."""


def add_parser(commands):
    u = commands.add_parser(
        "up", help="run ZooKeeper and N brokers on loopback until Ctrl-C",
        description="Start a local development cluster: a ZooKeeper server and N "
                    "`kqlite serve --zookeeper` brokers on 127.0.0.1. Prints the bootstrap "
                    "servers once every broker is registered; Ctrl-C or SIGTERM stops the "
                    "brokers (controlled shutdown), then ZooKeeper. Needs Debian's "
                    "zookeeper package (apt-get install zookeeper).")
    u.add_argument("--brokers", type=positive_int, default=3, metavar="N",
                   help="number of brokers (default 3)")
    u.add_argument("--dir", metavar="DIR",
                   help="where data dirs and logs go; kept afterwards (default: a "
                        "temporary directory, removed)")
    u.add_argument("--base-port", type=_port, metavar="P",
                   help="broker i listens on P+i-1 (default: free ports)")
    u.add_argument("--zookeeper-port", type=_port, metavar="Z",
                   help="ZooKeeper's client port (default: a free port)")
    u.add_argument("--metrics-base-port", type=_port, metavar="M",
                   help="broker i serves Prometheus metrics on M+i-1 (default: none)")
    u.add_argument("--replication-factor", type=positive_int, metavar="R",
                   help="default.replication.factor of created topics (default: "
                        "min(3, N))")
    u.add_argument("--security", choices=PROTOCOLS, default="plaintext",
                   help="the brokers' listener: plaintext (default), or SCRAM-SHA-512 users "
                        "over sasl_plaintext or sasl_ssl (certificates made in "
                        "DIR/security)")
    u.add_argument("--grace-period", type=float, default=DEFAULT_GRACE_SECONDS,
                   metavar="SECONDS",
                   help="how long stopping brokers get before SIGKILL (default "
                        f"{DEFAULT_GRACE_SECONDS:g})")
    u.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT,
                   metavar="SECONDS", help="give up if the cluster is not formed by then "
                                           f"(default {DEFAULT_START_TIMEOUT:g})")
    u.set_defaults(run=run)


def _port(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number, not {text!r}")
    return value


def _progress(text):
    print(f"kqlite cluster up: {text}", file=sys.stderr, flush=True)


def _free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _check_free(host, port, what):
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ClusterStartError(f"{what} port {port} is not free: {exc.strerror}") from None


def _tail(path, lines=15):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _describe_status(code):
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


class _Broker:
    """One ``kqlite serve --zookeeper`` child process."""

    def __init__(self, broker_id, root, host, port, metrics_port):
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.metrics_port = metrics_port
        self.data_dir = os.path.join(root, f"broker-{broker_id}")
        self.log_path = os.path.join(root, f"broker-{broker_id}.log")
        self.proc = None
        self.reported = False

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def start(self, zookeeper, replication_factor, offsets_replication_factor, security):
        from ..cluster.zookeeper.process import die_with_parent
        listener = ["--listen", self.address]
        properties = security.broker_properties(self.broker_id, self.host, self.port)
        if properties:
            config = os.path.join(security.directory, f"broker-{self.broker_id}.properties")
            write_properties(config, properties, private=True)
            listener = ["--config", config]
        command = [sys.executable, "-m", "kqlite.cli", "serve", "--data-dir", self.data_dir,
                   *listener, "--broker-id", str(self.broker_id),
                   "--zookeeper", zookeeper,
                   "--default-replication-factor", str(replication_factor),
                   "--offsets-topic-replication-factor", str(offsets_replication_factor),
                   # __transaction_state as __consumer_offsets: min(3, brokers) replicas,
                   # so a 1- or 2-broker cluster serves transactions too.
                   "--transaction-state-log-replication-factor",
                   str(offsets_replication_factor),
                   "--transaction-state-log-min-isr", str(min(2, offsets_replication_factor)),
                   "--controlled-shutdown-retry-backoff-ms", str(_SHUTDOWN_BACKOFF_MS)]
        if self.metrics_port is not None:
            command += ["--metrics-listen", f"{self.host}:{self.metrics_port}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=die_with_parent,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None


class DevCluster:
    """ZooKeeper plus brokers under ``root``; see the module docstring."""

    def __init__(self, root, brokers, *, host="127.0.0.1", base_port=None,
                 zookeeper_port=None, metrics_base_port=None, replication_factor=None,
                 security="plaintext"):
        self.root = root
        self.host = host
        self.security = DevSecurity(os.path.join(root, "security"), security)
        self.replication_factor = replication_factor or min(3, brokers)
        ports = [base_port + i for i in range(brokers)] if base_port else \
            [_free_port(host) for _ in range(brokers)]
        self.brokers = [
            _Broker(i + 1, root, host, ports[i],
                    metrics_base_port + i if metrics_base_port else None)
            for i in range(brokers)]
        self.zookeeper_port = zookeeper_port
        self.zookeeper = None

    @property
    def bootstrap(self):
        return ",".join(b.address for b in self.brokers)

    def start_zookeeper(self):
        from ..cluster.zookeeper.process import ZooKeeperProcess, find_zookeeper
        find_zookeeper()     # says what to install before anything starts
        if self.zookeeper_port:
            _check_free(self.host, self.zookeeper_port, "ZooKeeper")
        self.zookeeper = ZooKeeperProcess(os.path.join(self.root, "zookeeper"),
                                          host=self.host, port=self.zookeeper_port or 0)
        _progress(f"starting ZooKeeper on {self.zookeeper.connect_string}")
        self.zookeeper.start(die_with_parent=True)
        _progress(f"ZooKeeper ready at {self.zookeeper.connect_string} "
                  f"(pid {self.zookeeper.process.pid}, log {self.zookeeper.log_path})")

    def prepare_security(self):
        """Certificates, passwords and the SCRAM users in ZooKeeper, when secured."""
        if not self.security.secured:
            return
        from ..cluster.zookeeper.snapshot import connect
        self.security.prepare([b.broker_id for b in self.brokers], self.host)
        client = connect(self.zookeeper.connect_string, 15.0)
        try:
            self.security.add_users(client)
        finally:
            client.stop()
            client.close()
        _progress(f"{self.security.protocol} with SCRAM users written to ZooKeeper; "
                  f"certificates and properties in {self.security.directory}")

    def start_brokers(self):
        for b in self.brokers:
            _check_free(self.host, b.port, f"broker {b.broker_id}")
            if b.metrics_port is not None:
                _check_free(self.host, b.metrics_port, f"broker {b.broker_id} metrics")
        for b in self.brokers:
            # Kafka's offsets.topic.replication.factor is 3: more than a smaller cluster
            # has brokers, and groups would never get a coordinator.
            b.start(self.zookeeper.connect_string, self.replication_factor,
                    min(3, len(self.brokers)), self.security)
            _progress(f"broker {b.broker_id} starting on {b.address} (pid {b.proc.pid}, "
                      f"log {b.log_path})")

    def wait_formed(self, timeout, stop):
        """Wait until every broker is registered and a controller elected; returns the
        controller's id, or None if ``stop`` was set meanwhile."""
        from ..cluster.zookeeper.snapshot import connect
        from ..cluster.zookeeper.store import ZkStore
        client = connect(self.zookeeper.connect_string, 15.0)
        try:
            store = ZkStore(client)
            seen = set()
            deadline = time.monotonic() + timeout
            while not stop.is_set():
                registered = store.brokers() if client.exists("/brokers/ids") else {}
                for broker_id, info in sorted(registered.items()):
                    if broker_id not in seen:
                        seen.add(broker_id)
                        _progress(f"broker {broker_id} registered (broker epoch "
                                  f"{info.epoch})")
                for b in self.brokers:
                    if not b.alive:
                        raise ClusterStartError(
                            f"broker {b.broker_id} exited with "
                            f"{_describe_status(b.proc.returncode)} while starting; "
                            f"last lines of {b.log_path}:\n{_tail(b.log_path)}")
                controller = store.controller_id()
                if len(seen) == len(self.brokers) and controller >= 0:
                    return controller
                if time.monotonic() > deadline:
                    missing = sorted({b.broker_id for b in self.brokers} - seen)
                    raise ClusterStartError(
                        f"the cluster did not form within {timeout:g} s (brokers not "
                        f"registered: {missing or 'none'}; controller: "
                        f"{controller if controller >= 0 else 'none'}); logs in {self.root}")
                stop.wait(_POLL_SECONDS)
            return None
        finally:
            client.stop()
            client.close()

    def report_deaths(self):
        """Report brokers that exited on their own (each once); False if ZooKeeper died."""
        for b in self.brokers:
            if not b.reported and b.proc is not None and not b.alive:
                b.reported = True
                _progress(f"broker {b.broker_id} (pid {b.proc.pid}) exited unexpectedly "
                          f"with {_describe_status(b.proc.returncode)}; last lines of "
                          f"{b.log_path}:\n{_tail(b.log_path)}")
        zk = self.zookeeper
        if zk is not None and zk.process is not None and zk.process.poll() is not None:
            _progress(f"ZooKeeper (pid {zk.process.pid}) exited unexpectedly with "
                      f"{_describe_status(zk.process.returncode)}; last lines of "
                      f"{zk.log_path}:\n{_tail(zk.log_path)}")
            return False
        return True

    def stop(self, grace):
        """SIGTERM every broker, SIGKILL after ``grace`` seconds, then stop ZooKeeper."""
        running = [b for b in self.brokers if b.alive]
        if running:
            _progress(f"stopping {len(running)} broker(s): controlled shutdown")
        for b in running:
            b.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for b in running:
            try:
                code = b.proc.wait(max(0.0, deadline - time.monotonic()))
                _progress(f"broker {b.broker_id} stopped ({_describe_status(code)})")
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait()
                _progress(f"broker {b.broker_id} did not stop within {grace:g} s: killed")
        for b in self.brokers:       # reap any that died unreported
            if b.proc is not None:
                b.proc.poll()
        if self.zookeeper is not None and self.zookeeper.process is not None:
            self.zookeeper.stop()
            _progress("ZooKeeper stopped")


def run(args):
    quiet_kazoo(args)
    if args.replication_factor and args.replication_factor > args.brokers:
        raise ClusterStartError(f"--replication-factor {args.replication_factor} is more "
                                f"than the {args.brokers} broker(s)")
    keep = args.dir is not None
    root = os.path.abspath(args.dir) if keep else tempfile.mkdtemp(prefix="kqlite-cluster-")
    os.makedirs(root, exist_ok=True)
    cluster = DevCluster(root, args.brokers, base_port=args.base_port,
                         zookeeper_port=args.zookeeper_port,
                         metrics_base_port=args.metrics_base_port,
                         replication_factor=args.replication_factor,
                         security=args.security)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start_zookeeper()
        cluster.prepare_security()
        cluster.start_brokers()
        controller = cluster.wait_formed(args.start_timeout, stop)
        if controller is not None:
            _announce(cluster, controller, root, keep)
        while not stop.is_set():
            if not cluster.report_deaths():
                raise ClusterStartError("ZooKeeper died: the cluster cannot go on")
            stop.wait(_POLL_SECONDS)
        return 0
    finally:
        # Signals now would interrupt the stop itself: it is already what they ask for.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop(args.grace_period)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _announce(cluster, controller, root, keep):
    metrics = [f"http://{b.host}:{b.metrics_port}/metrics" for b in cluster.brokers
               if b.metrics_port is not None]
    lines = [f"kqlite cluster up: {len(cluster.brokers)} broker(s) ready, controller is "
             f"broker {controller}",
             f"  bootstrap servers: {cluster.bootstrap}",
             f"  zookeeper:         {cluster.zookeeper.connect_string}",
             f"  data:              {root}" + ("" if keep else " (removed at exit)")]
    if metrics:
        lines.append(f"  metrics:           {' '.join(metrics)}")
    security = cluster.security
    if security.secured:
        lines.append(f"  security:          {security.protocol}, SCRAM-SHA-512 user "
                     f"'admin' (brokers authenticate as 'broker')")
        lines.append(f"  client properties: "
                     f"{os.path.join(security.directory, 'client.properties')} "
                     f"(kcat -F, confluent-kafka)")
        if security.tls:
            lines.append(f"  CA certificate:    {security.ca_file}")
    lines.append("Ctrl-C stops the cluster.")
    print("\n".join(lines), flush=True)
