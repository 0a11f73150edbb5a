"""``kqlite cluster``: a real development cluster started by ``kqlite cluster up`` (its
own ZooKeeper and three broker processes), used by confluent-kafka and inspected by
``describe`` and ``partitions``; and the commands' answer when ZooKeeper is unreachable."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from cluster_processes import child_environment, until

WAIT = 120   # seconds: liveness guards only, never a pass/fail timing
KQLITE = [sys.executable, "-m", "kqlite.cli"]


def kqlite(*args, timeout=60):
    return subprocess.run([*KQLITE, *args], capture_output=True, text=True, timeout=timeout,
                          env=child_environment())


class Up:
    """``kqlite cluster up`` as a child process; stdout is read by a thread."""

    def __init__(self, tmp_path, *args):
        self.err_path = tmp_path / "up.err"
        self._err = open(self.err_path, "w")
        self.proc = subprocess.Popen([*KQLITE, "cluster", "up", *args], text=True,
                                     stdout=subprocess.PIPE, stderr=self._err,
                                     stdin=subprocess.DEVNULL, env=child_environment())
        self.out = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self):
        for line in self.proc.stdout:
            self.out.append(line)

    def field(self, label):
        for line in self.out:
            m = re.match(rf"\s*{label}:\s*(\S+)", line)
            if m:
                return m.group(1)
        return None

    def progress(self):
        return self.err_path.read_text()

    def pids(self):
        """Every child pid the progress lines named (ZooKeeper and the brokers)."""
        return {int(p) for p in re.findall(r"\(pid (\d+)", self.progress())}

    def broker_pid(self, broker_id):
        m = re.search(rf"broker {broker_id} starting on \S+ \(pid (\d+)", self.progress())
        return int(m.group(1))

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                pytest.fail(f"kqlite cluster up exited with {self.proc.returncode}:\n"
                            f"{self.progress()}")
            return self.field("bootstrap servers")
        return until(ready, "the bootstrap line of kqlite cluster up")

    def close(self):
        if self.proc.poll() is None:       # a failed test: do not leave the cluster behind
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._err.close()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:     # a zombie is dead, only not yet reaped
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _listening(address):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _partitions(zk, *flags):
    result = kqlite("cluster", "partitions", "--zookeeper", zk, "--json", *flags)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_up_runs_a_cluster_clients_use_and_ctrl_c_stops_it(tmp_path):
    up = Up(tmp_path, "--brokers", "3", "--dir", str(tmp_path / "cluster"))
    try:
        bootstrap = up.wait_ready()
        zk = up.field("zookeeper")
        addresses = bootstrap.split(",")
        assert len(addresses) == 3

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("orders", 3, 3)],
                            request_timeout=60)["orders"].result(WAIT)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True})
        failed = []
        for i in range(200):
            producer.produce("orders", value=str(i).encode(),
                             on_delivery=lambda err, _m: err and failed.append(err))
        assert producer.flush(WAIT) == 0 and failed == []
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-test",
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("orders", p, 0) for p in range(3)])
        values = []
        deadline = time.monotonic() + WAIT
        while len(values) < 200 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                values.append(int(m.value()))
        consumer.close()
        assert sorted(values) == list(range(200))

        described = kqlite("cluster", "describe", "--zookeeper", zk, "--json")
        assert described.returncode == 0, described.stderr
        doc = json.loads(described.stdout)
        assert len(doc["cluster_id"]) == 22
        assert sorted(f"{b['host']}:{b['port']}" for b in doc["brokers"]) == sorted(addresses)
        assert [b["id"] for b in doc["brokers"]] == [1, 2, 3]
        assert doc["controller"]["id"] in (1, 2, 3) and doc["controller"]["epoch"] >= 1
        assert doc["topic_count"] >= 1 and doc["partition_count"] >= 3
        text = kqlite("cluster", "describe", "--zookeeper", zk)
        assert text.returncode == 0 and f"broker {doc['controller']['id']}" in text.stdout

        rows = _partitions(zk, "--topic", "orders")
        assert [r["partition"] for r in rows] == [0, 1, 2]
        for r in rows:
            assert sorted(r["replicas"]) == [1, 2, 3] and sorted(r["isr"]) == [1, 2, 3]
            assert r["leader"] in r["replicas"] and r["flags"] == []
        assert _partitions(zk, "--under-replicated", "--offline") == []

        victim = 3 if doc["controller"]["id"] != 3 else 2
        os.kill(up.broker_pid(victim), signal.SIGKILL)
        # The controller drops the dead broker from every ISR once its session expires.
        def all_under_replicated():
            rows = _partitions(zk, "--under-replicated", "--topic", "orders")
            return rows if len(rows) == 3 and all(victim not in r["isr"] for r in rows) \
                else None
        under = until(all_under_replicated, "every partition of the topic under-replicated")
        for r in under:
            assert "UNDER-REPLICATED" in r["flags"] and r["leader"] != victim
            assert "OFFLINE" not in r["flags"]
        table = kqlite("cluster", "partitions", "--zookeeper", zk, "--under-replicated",
                       "--topic", "orders")
        assert table.returncode == 0 and table.stdout.count("UNDER-REPLICATED") == 3
        until(lambda: f"broker {victim} (pid" in up.progress()
              and "exited unexpectedly" in up.progress(), "the dead broker reported")

        pids = up.pids()
        assert len(pids) == 4            # ZooKeeper and three brokers
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(WAIT) == 0, up.progress()
        assert [p for p in pids if _alive(p)] == []
        assert [a for a in addresses + [zk] if _listening(a)] == []
        assert "ZooKeeper stopped" in up.progress()
        assert (tmp_path / "cluster" / "broker-1").is_dir()     # --dir is kept
    finally:
        up.close()


@pytest.mark.parametrize("command", ["describe", "partitions"])
def test_an_unreachable_zookeeper_is_a_clear_error(command):
    with socket.socket() as s:         # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = kqlite("cluster", command, "--zookeeper", f"127.0.0.1:{port}",
                    "--timeout", "2", timeout=30)
    assert result.returncode == 1
    assert "cannot reach ZooKeeper" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_chroot_without_a_cluster_is_a_clear_error(zk_hosts):
    result = kqlite("cluster", "describe", "--zookeeper", zk_hosts, timeout=60)
    assert result.returncode == 1
    assert "no Kafka or kqlite cluster" in result.stderr and "Traceback" not in result.stderr


def test_a_one_broker_cluster_runs_consumer_groups_and_removes_its_temp_dir(tmp_path):
    up = Up(tmp_path, "--brokers", "1")
    try:
        bootstrap = up.wait_ready()
        root = up.field("data")
        assert os.path.isdir(root)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("solo", value=str(i).encode())
        assert producer.flush(WAIT) == 0
        # A group needs __consumer_offsets: with one broker its replication factor is 1.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "solo-readers",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["solo"])
        values = []
        deadline = time.monotonic() + WAIT
        while len(values) < 10 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                values.append(int(m.value()))
        assert sorted(values) == list(range(10))
        committed = consumer.commit(asynchronous=False)
        assert [tp.offset for tp in committed] == [10]
        consumer.close()
        pids = up.pids()
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(WAIT) == 0, up.progress()
        assert [p for p in pids if _alive(p)] == []
        assert not os.path.exists(root)          # no --dir: the temporary dir is removed
    finally:
        up.close()


def test_up_without_zookeeper_installed_says_what_to_install(tmp_path):
    env = {k: v for k, v in child_environment().items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)          # no java on it
    result = subprocess.run([*KQLITE, "cluster", "up", "--brokers", "1",
                             "--dir", str(tmp_path / "c")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1
    assert "apt-get install zookeeper" in result.stderr and "Traceback" not in result.stderr
    assert "bootstrap servers" not in result.stdout


def test_killing_up_itself_takes_its_children_with_it(tmp_path):
    """SIGKILL gives ``up`` no chance to stop anything: its children learn of it from the
    kernel (PR_SET_PDEATHSIG) and stop by themselves, so nothing is left running."""
    up = Up(tmp_path, "--brokers", "1", "--dir", str(tmp_path / "cluster"))
    try:
        up.wait_ready()
        pids = up.pids()
        assert len(pids) == 2                    # ZooKeeper and the broker
        up.proc.kill()
        up.proc.wait(WAIT)
        until(lambda: not [p for p in pids if _alive(p)], "the children of a killed up to exit")
    finally:
        up.close()


def test_up_with_security_starts_a_sasl_ssl_cluster(tmp_path):
    """``--security sasl_ssl``: every broker registers its SASL_SSL listener (the
    inter-broker one too), and the printed client properties (the admin's SCRAM user,
    the CA) are all a client needs."""
    up = Up(tmp_path, "--brokers", "2", "--security", "sasl_ssl",
            "--dir", str(tmp_path / "cluster"))
    try:
        bootstrap = up.wait_ready()
        properties = up.field("client properties")
        assert properties == str(tmp_path / "cluster" / "security" / "client.properties")
        assert up.field("CA certificate") == str(tmp_path / "cluster" / "security" / "ca.pem")
        config = dict(line.strip().split("=", 1) for line in open(properties) if "=" in line)
        assert config["security.protocol"] == "SASL_SSL" and config["sasl.username"] == "admin"
        assert os.stat(properties).st_mode & 0o077 == 0
        config["bootstrap.servers"] = bootstrap
        admin = AdminClient(config)
        admin.create_topics([NewTopic("secure", 2, 2)], request_timeout=60)["secure"] \
            .result(WAIT)
        producer = Producer({**config, "acks": "all"})
        for i in range(20):
            producer.produce("secure", str(i).encode())
        assert producer.flush(WAIT) == 0
        until(lambda: all(len(p.isrs) == 2 for p in admin.list_topics(
            "secure", timeout=10).topics["secure"].partitions.values()),
            "both partitions replicated over SASL_SSL")
        described = kqlite("cluster", "describe", "--zookeeper", up.field("zookeeper"),
                           "--json")
        doc = json.loads(described.stdout)
        assert [b["endpoints"] for b in doc["brokers"]] == [
            [f"SASL_SSL://{address}"] for address in bootstrap.split(",")]
        assert all(b["host"] is None and b["port"] == -1 for b in doc["brokers"])
        plain = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
        with pytest.raises(confluent.KafkaException):
            plain.list_topics(timeout=3)      # a plaintext client gets nowhere
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(WAIT) == 0, up.progress()
    finally:
        up.close()
