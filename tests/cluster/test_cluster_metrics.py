"""Kafka-named Prometheus metrics scraped from three real cluster brokers: counts that
add up across the cluster, one active controller, and the ISR shrinking when a follower
dies and expanding when it comes back, as the leader's counters and gauges show; and
kqlite's count of follower fetches a leader answered from memory."""

import re
import urllib.request

import pytest

from cluster_processes import QUICK_EXPIRY, running_cluster, until

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

WAIT = 120   # seconds: liveness guards only, never a pass/fail timing
LAG_MS = 1000   # replica.lag.time.max.ms: well under the 6 s ZooKeeper session timeout
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(port):
    """{metric name: value} of the kafka_* samples and MEMORY_READS (one sample each per
    broker)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1).startswith(("kafka_", MEMORY_READS)):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


URP = "kafka_server_replicamanager_underreplicatedpartitions"
SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
EXPANDS = "kafka_server_replicamanager_isrexpands_total"
LEADERS = "kafka_server_replicamanager_leadercount"
PARTITIONS = "kafka_server_replicamanager_partitioncount"
ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"
MEMORY_READS = "kqlite_follower_fetches_from_memory_total"


@pytest.fixture
def cluster(tmp_path, zk_hosts):
    with running_cluster(tmp_path, zk_hosts, ["--replica-lag-time-max-ms", str(LAG_MS),
                                              *QUICK_EXPIRY], metrics=True) as c:
        yield c


def test_kafka_metrics_follow_leadership_and_isr_changes(cluster):
    def all_metrics():
        return {b: scrape(port) for b, port in cluster.metrics.items()
                if cluster[b].alive}

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("gauges", 3, 3)], request_timeout=60)["gauges"].result(WAIT)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("gauges", value=str(i).encode())
    assert producer.flush(WAIT) == 0

    def settled():
        m = all_metrics()
        if sum(s[LEADERS] for s in m.values()) == 3 and \
                sum(s[PARTITIONS] for s in m.values()) == 9 and \
                sum(s[URP] for s in m.values()) == 0:
            return m
        return None
    m = until(settled, "3 leaders and 9 replicas, none under-replicated")
    controllers = [b for b, s in m.items() if s[ACTIVE] == 1]
    assert len(controllers) == 1 and all(s[ACTIVE] in (0, 1) for s in m.values())
    controller = controllers[0]
    assert m[controller]["kafka_controller_kafkacontroller_globalpartitioncount"] == 3
    assert m[controller]["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
    for b, s in m.items():
        assert s['kafka_server_replicafetchermanager_maxlag{clientId="Replica"}'] >= 0
        if b != controller:
            assert s["kafka_controller_kafkacontroller_globalpartitioncount"] == 0

    def fetched_from_memory():
        # The followers' fetches of what a leader just appended are answered from its
        # memory (replica/recent_batches.py) unless another write came between.
        producer.produce("gauges", value=b"acks=all")
        producer.flush(WAIT)
        now = all_metrics()
        return now if sum(s[MEMORY_READS] for s in now.values()) > 0 else None
    served = until(fetched_from_memory, "a follower fetch answered from a leader's memory")
    producer.produce("gauges", value=b"one more")
    producer.flush(WAIT)
    later = all_metrics()
    assert all(later[b][MEMORY_READS] >= served[b][MEMORY_READS] for b in served)   # a counter

    # A leader that is not the controller, and a follower that is neither: the leader's
    # shrink then goes to a live controller (killing the controller would leave the
    # ISR change to the next one, which Kafka does not count as the leader's shrink).
    leader = next(b for b, s in m.items() if b != controller and s[LEADERS] >= 1)
    follower = next(b for b in m if b not in (controller, leader))
    before = m[leader]
    cluster[follower].kill()
    one = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})

    def shrunk():
        # A follower whose log end equals the leader's counts as caught up however long
        # it has been silent (Kafka's rule): only appends make the dead one fall behind.
        for p in range(3):
            one.produce("gauges", value=b"more", partition=p)
        one.poll(0)
        s = scrape(cluster.metrics[leader])
        return s if s[URP] >= 1 and s[SHRINKS] > before[SHRINKS] else None
    after = until(shrunk, "the leader's ISR shrunk after replica.lag.time.max.ms")
    assert after[URP] <= after[LEADERS]
    # Restart once the dead broker's session has expired: until then its registration
    # holds the broker id.
    until(lambda: len(admin.list_topics(timeout=10).brokers) == 2,
          "the dead follower unregistered")
    cluster[follower].start().wait_listening()

    def recovered():
        m = all_metrics()
        if len(m) == 3 and m[leader][EXPANDS] > before[EXPANDS] and \
                sum(s[URP] for s in m.values()) == 0:
            return m
        return None
    m = until(recovered, "the restarted follower back in every ISR")
    assert m[leader][SHRINKS] >= after[SHRINKS]       # counters never go back
    assert sum(s[LEADERS] for s in m.values()) == 3
    assert sum(s[PARTITIONS] for s in m.values()) == 9


def test_counter_totals_keep_the_counts_of_dropped_partitions():
    from types import SimpleNamespace

    from kqlite.cluster.metrics import ClusterMetricsSource

    def partition(topic, index, shrinks, expands, reads):
        return SimpleNamespace(topic=topic, index=index, isr_shrinks=shrinks,
                               isr_expands=expands, recent_reads=reads)

    def totals():
        t = source.counter_totals()
        return t["isr_shrinks"], t["isr_expands"], t["recent_reads"]
    hosted = [partition("a", 0, 2, 1, 10), partition("a", 1, 1, 0, 5)]
    node = SimpleNamespace(replicas=SimpleNamespace(hosted_replicas=lambda: list(hosted)))
    source = ClusterMetricsSource(node)
    assert totals() == (3, 1, 15)
    hosted[0].isr_shrinks = 4            # counted after the last scrape, then dropped
    hosted[0].recent_reads = 12
    dropped = hosted.pop(0)
    assert totals() == (5, 1, 17)
    hosted.append(partition(dropped.topic, dropped.index, 0, 0, 0))   # made again: from 0
    hosted[-1].isr_expands = 2
    hosted[-1].recent_reads = 1
    assert totals() == (5, 3, 18)
