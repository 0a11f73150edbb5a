"""A cluster for fault tests: its own ZooKeeper process and N ``kqlite serve --zookeeper``
broker processes, every link of which runs through a proxy of :class:`~.proxy.ProxyNet`.

Addresses (all on loopback; Linux routes the whole of 127.0.0.0/8 to ``lo``):

==================  =========================================================
127.0.0.1           clients (the test's producers and consumers) and ZooKeeper
127.0.0.(10+i):P    broker i listens here; its outgoing inter-broker
                    connections start here too (``broker_main.py``)
127.0.0.(20+i):P    broker i's proxy, the address it advertises in
                    ``/brokers/ids/i``: everyone (clients, peers) reaches it here
127.0.0.(30+i):Z    broker i's own proxy to ZooKeeper (its ``--zookeeper``)
==================  =========================================================

The proxy of broker i names a connection's source by the peer address: 127.0.0.(10+j)
is broker j, anything else is ``"client"``. Nodes are named ``"b1"``, ``"b2"``, ...,
``"zk"`` and ``"client"``; ``net.cut("b1", "b2")`` partitions two brokers,
``net.cut("b1", "zk")`` takes broker 1's ZooKeeper session away and
``net.cut("client", "b1", both_ways=False)`` hides broker 1 from clients.
"""

import json
import os
import signal
import sys
import time
import urllib.request

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from kqlite.cluster.zookeeper.process import ZooKeeperProcess

from .proxy import ProxyNet

# The broker process is tests/cluster's ClusterBroker. tests/cluster is no package: its
# directory goes on sys.path, as pytest puts it there when it collects those tests.
_CLUSTER_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "cluster")
if _CLUSTER_TESTS not in sys.path:
    sys.path.append(_CLUSTER_TESTS)
from cluster_processes import ClusterBroker, free_port, until  # noqa: E402

__all__ = ["FaultCluster", "FaultBroker", "node", "WAIT"]

WAIT = 60          # seconds: liveness guards only, never a pass/fail timing
_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "broker_main.py")


def node(broker_id):
    return f"b{broker_id}"


def _source_of(peer_host):
    parts = peer_host.split(".")
    if peer_host.startswith("127.0.0.") and 11 <= int(parts[3]) < 20:
        return node(int(parts[3]) - 10)
    return "client"


class FaultBroker(ClusterBroker):
    """One broker process of a :class:`FaultCluster`: a ``ClusterBroker`` that listens
    on its own loopback address (``listen_host``, 127.0.0.(10+i)), advertises its
    proxy's (``host``), runs through ``broker_main.py`` (which binds its outgoing
    connections to ``listen_host``) and can be paused."""

    def __init__(self, broker_id, data_dir, zookeeper, options):
        super().__init__(broker_id, data_dir, zookeeper, options,
                         listen_host=f"127.0.0.{10 + broker_id}")
        self.host = f"127.0.0.{20 + broker_id}"
        self.paused = False

    @property
    def address(self):
        """Where clients and peers reach it (its proxy)."""
        return f"{self.host}:{self.port}"

    def command(self):
        return [sys.executable, _MAIN, *self.serve_arguments(),
                "--advertised-host", self.host, *self.extra]

    def environment(self):
        return dict(super().environment(), KQLITE_FAULTS_SOURCE_IP=self.listen_host)

    def start(self):
        super().start()
        self.paused = False
        return self

    def kill(self):
        """SIGKILL (a crash; the page cache survives, so no write is lost by it)."""
        if self.alive and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        super().kill()

    def stop(self, timeout=WAIT):
        """SIGTERM: controlled shutdown, of a paused broker too. The exit code."""
        if self.alive:
            self.resume()
        return super().stop(timeout)

    def pause(self):
        """SIGSTOP: the process freezes with its connections open (a GC pause, a VM
        stall); its ZooKeeper session expires once the pause outlasts the timeout."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        if self.paused and self.alive:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def metrics(self):
        """{metric name: sum of its samples} from the broker's Prometheus endpoint (the
        cluster must be made with ``metrics=True``)."""
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                name = name.split("{", 1)[0]
                out[name] = out.get(name, 0.0) + float(value)
        return out

    def partition_dir(self, topic, partition=0):
        """The directory of ``topic-partition`` in this broker's data dir (Kafka's layout)."""
        return os.path.join(self.data_dir, f"{topic}-{partition}")


class FaultCluster:
    """ZooKeeper, ``size`` brokers (ids 1..size) and their proxies; see the module
    docstring. ``broker_options`` are extra ``kqlite serve`` arguments."""

    def __init__(self, workdir, size=3, *, session_timeout_ms=3000, lag_time_ms=3000,
                 broker_options=(), metrics=False):
        self.workdir = str(workdir)
        self.chroot = "/kqlite-faults"
        self.zk = ZooKeeperProcess(os.path.join(self.workdir, "zookeeper"))
        self.net = ProxyNet()
        self.session_timeout_ms = session_timeout_ms
        self.lag_time_ms = lag_time_ms
        options = ["--zookeeper-session-timeout-ms", str(session_timeout_ms),
                   "--replica-lag-time-max-ms", str(lag_time_ms),
                   "--controlled-shutdown-retry-backoff-ms", "300", "--no-auto-create-topics",
                   *broker_options]
        self.brokers = {}
        for b in range(1, size + 1):
            zk_proxy = (f"127.0.0.{30 + b}", free_port(f"127.0.0.{30 + b}"))
            self.brokers[b] = FaultBroker(
                b, os.path.join(self.workdir, f"broker-{b}"),
                f"{zk_proxy[0]}:{zk_proxy[1]}{self.chroot}", options)
            self.brokers[b].zk_proxy = zk_proxy
            if metrics:     # read directly (not proxied): the test's view of its state
                listen = self.brokers[b].listen_host
                self.brokers[b].metrics_address = f"{listen}:{free_port(listen)}"
                self.brokers[b].extra += ["--metrics-listen", self.brokers[b].metrics_address]
        self._admin = None

    def __getitem__(self, broker_id):
        return self.brokers[broker_id]

    @property
    def bootstrap(self):
        return ",".join(b.address for b in self.brokers.values())

    def start(self):
        self.net.start()
        self.zk.start()
        for b in self.brokers.values():
            self.net.add("zk", b.zk_proxy, (self.zk.host, self.zk.port),
                         lambda _peer, _b=b.broker_id: node(_b))
            self.net.add(node(b.broker_id), (b.host, b.port), (b.listen_host, b.port),
                         _source_of)
        for b in self.brokers.values():
            b.start()
        for b in self.brokers.values():
            b.wait_listening()
        self.wait_formed()
        return self

    def wait_formed(self):
        """Until every broker is registered and some broker's metadata lists them all
        (which it learns from the controller: so the controller knows them too)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self.wait_for(lambda: len(self.registered()) == len(self.brokers) and
                      len(admin.list_topics(timeout=10).brokers) == len(self.brokers),
                      "every broker registered and known to the controller")

    def stop(self, *, clean=False):
        """Stop every broker (SIGKILL, or SIGTERM with ``clean``), the proxies and
        ZooKeeper."""
        for b in self.brokers.values():
            b.resume()
            if clean and b.alive:
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers.values():
            b.stop(timeout=20) if clean else b.kill()
        if self._admin is not None:
            self._admin.stop()
            self._admin.close()
        self.net.close()
        self.zk.stop()

    def logs(self):
        return "\n".join(f"--- broker {b.broker_id} ---\n{b.log()[-20000:]}"
                         for b in self.brokers.values())

    def save_logs(self):
        """Each broker's whole log (since its last start) as ``broker-<id>.log`` in the
        cluster's directory, which a failed test keeps: :meth:`logs` prints only their
        ends, and an anomaly is often minutes before the end."""
        for b in self.brokers.values():
            with open(os.path.join(self.workdir, f"broker-{b.broker_id}.log"), "w") as f:
                f.write(b.log())

    # -- ZooKeeper, read directly (not through any proxy) ------------------------------------

    @property
    def admin(self):
        if self._admin is None:
            self._admin = KazooClient(hosts=f"{self.zk.connect_string}{self.chroot}",
                                      timeout=10)
            self._admin.start(timeout=WAIT)
        return self._admin

    def _read_json(self, path):
        try:
            return json.loads(self.admin.get(path)[0])
        except Exception:                   # absent, or ZooKeeper restarting
            return None

    def controller(self):
        data = self._read_json("/controller")
        return data["brokerid"] if data else None

    def registered(self):
        try:
            return sorted(int(b) for b in self.admin.get_children("/brokers/ids"))
        except Exception:
            return []

    def partition_state(self, topic, partition=0):
        """{"leader", "leader_epoch", "isr", ...} from ZooKeeper, or None."""
        return self._read_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def restart_zookeeper(self, down_seconds=0.0):
        """Stop ZooKeeper (SIGTERM), wait, start it again on the same port and data:
        sessions survive if it is back before they time out."""
        if self._admin is not None:
            self._admin.stop()
            self._admin.close()
            self._admin = None
        self.zk.stop()
        time.sleep(down_seconds)
        self.zk.start()

    def wait_for(self, predicate, what, timeout=WAIT):
        return until(predicate, what, timeout)

    def wait_session_expired(self, broker_id):
        """Until ZooKeeper dropped the broker's registration (its session expired)."""
        self.wait_for(lambda: broker_id not in self.registered(),
                      f"broker {broker_id}'s ZooKeeper session expired")

    def controller_epoch(self):
        """(epoch, zkVersion) of ``/controller_epoch``: the fence of every controller write."""
        data, stat = self.admin.get("/controller_epoch")
        return int(data), stat.version

    def restore(self):
        """Undo whatever a scenario left: links healed, paused brokers resumed, stopped
        ones started again, every broker registered (for tests that share a cluster)."""
        self.net.heal()
        for b in self.brokers.values():
            b.resume()
        down = [b for b in self.brokers.values() if not b.alive]
        for b in down:
            b.start()
        for b in down:
            b.wait_listening()
        self.wait_for(lambda: len(self.registered()) == len(self.brokers)
                      and self.controller() is not None,
                      "every broker registered and a controller elected")
        self.wait_formed()
