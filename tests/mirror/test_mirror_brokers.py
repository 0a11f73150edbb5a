"""The mirror between live brokers (kqlite single brokers, tansu as a foreign source):
every record copied in order per partition, configs, new partitions and topics picked
up, heartbeats, a consumer group failing over at a translated offset that misses
nothing, the command SIGKILLed and restarted, SIGTERM, two clusters mirroring each other
without loops. Default run: a few seconds each; the minute-long two-way run is --soak."""

import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

from kqlite.mirror import Mirror, MirrorSettings
from kqlite.mirror.mm2_records import Checkpoint, Heartbeat

from mirror_helpers import ENV, ROOT, free_port, kqlite_broker, topic_rows, wait_for


def _settings(a, b, **kw):
    base = dict(source=a, target=b, source_alias="A", target_alias="B", refresh_interval=0.3,
                checkpoint_interval=0.3, heartbeat_interval=0.3, sync_flush_interval=0.3,
                fetch_max_wait_ms=100)
    base.update(kw)
    return MirrorSettings(**base)


def _produce(bootstrap, topic, values, partition=None):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for v in values:
        p.send(topic, value=v, key=v[-1:], headers=[("n", v)], partition=partition,
               timestamp_ms=1_700_000_000_000)
    p.flush()
    p.close()


def _records(bootstrap, topic):
    """{partition: [(key, value, headers, timestamp)]} of the whole topic."""
    return topic_rows(bootstrap, topic,
                      lambda r: (r.key, r.value, tuple(r.headers), r.timestamp))


def _count(bootstrap, topic):
    return sum(len(v) for v in _records(bootstrap, topic).values())


def test_records_configs_new_partitions_topics_and_heartbeats(two_brokers, run_mirror):
    a, b = two_brokers
    admin = KafkaAdminClient(bootstrap_servers=a)
    admin.create_topics([NewTopic("orders", 2, 1, topic_configs={"retention.ms": "86400123"}),
                         NewTopic("skipped", 1, 1)])
    values = [b"v%04d" % i for i in range(300)]
    _produce(a, "orders", values)
    running = run_mirror(Mirror(_settings(a, b, topics="orders.*")))
    wait_for(lambda: _count(b, "A.orders") == 300, "the first 300 records")
    assert _records(b, "A.orders") == _records(a, "orders")
    target = KafkaAdminClient(bootstrap_servers=b)
    configs = target.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "A.orders")])
    assert "86400123" in repr(configs)
    # Picked up while running: an added partition and a new topic.
    admin.create_partitions({"orders": NewPartitions(3)})
    admin.create_topics([NewTopic("orders2", 1, 1)])
    time.sleep(0.5)
    _produce(a, "orders", [b"late"], partition=2)
    _produce(a, "orders2", [b"new"])
    wait_for(lambda: _count(b, "A.orders2") == 1 and _count(b, "A.orders") == 301,
             "the new partition and topic")
    assert _records(b, "A.orders")[2][0][1] == b"late"
    assert "A.skipped" not in target.list_topics()
    text = running.mirror.metrics.text()
    assert 'kqlite_mirror_records_total{topic="orders"} 301.0' in text
    assert "kqlite_mirror_replication_latency_seconds_count" in text
    beats = [Heartbeat.decode(r[0], r[1]) for r in _records(b, "heartbeats")[0]]
    assert beats and beats[-1][:2] == ("A", "B")
    running.stop()


def test_a_group_fails_over_at_a_translated_offset_that_misses_nothing(two_brokers, run_mirror):
    a, b = two_brokers
    KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("pay", 1, 1)])
    _produce(a, "pay", [b"p%04d" % i for i in range(500)])
    c = KafkaConsumer("pay", bootstrap_servers=a, group_id="app", auto_offset_reset="earliest",
                      enable_auto_commit=False, max_poll_records=137)
    seen = []
    while len(seen) < 137:
        for recs in c.poll(1000).values():
            seen.extend(r.value for r in recs)
    c.commit()
    c.close()
    committed = len(seen)
    running = run_mirror(Mirror(_settings(a, b, sync_group_offsets=True)))
    target = KafkaConsumer(bootstrap_servers=b, group_id="app", enable_auto_commit=False)
    tp = TopicPartition("A.pay", 0)
    wait_for(lambda: target.committed(tp) is not None, "the group's offset on the target")
    translated = target.committed(tp)
    assert translated <= committed                     # conservative: misses nothing
    assert committed - translated <= 100               # within offset.lag.max
    checkpoints = [Checkpoint.decode(k, v) for k, v, _, _ in
                   _records(b, "A.checkpoints.internal")[0]]
    assert checkpoints[-1][:4] == ("app", "A.pay", 0, committed)
    target.assign([tp])
    resumed = []
    while len(resumed) < 500 - translated:
        for recs in target.poll(1000).values():
            resumed.extend(r.value for r in recs)
    assert resumed[0] <= b"p%04d" % committed and resumed[-1] == b"p0499"
    target.close()
    running.stop()


def _cli(a, b, port):
    return subprocess.Popen(
        [sys.executable, "-m", "kqlite.cli", "mirror", "--source", a, "--target", b,
         "--topics", "logs", "--source-alias", "A", "--target-alias", "B", "--mode", "mm2",
         "--refresh-interval", "0.5", "--progress-interval", "0.5", "--metrics-port",
         str(port)], env=ENV, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def test_the_command_killed_and_restarted_resumes_and_stops_on_sigterm(two_brokers):
    a, b = two_brokers
    KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("logs", 2, 1)])
    _produce(a, "logs", [b"l%05d" % i for i in range(2000)])
    port = free_port()
    proc = _cli(a, b, port)
    wait_for(lambda: _count(b, "A.logs") > 0, "the first records")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _produce(a, "logs", [b"l%05d" % i for i in range(2000, 3000)])
    proc = _cli(a, b, port)
    try:
        wait_for(lambda: len({r[1] for p in _records(b, "A.logs").values() for r in p}) == 3000,
                 "every record after the restart")
        metrics = wait_for(lambda: _scrape(port), "the metrics endpoint")
        assert "kqlite_mirror_lag_records" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "(stopped)" in err and "lag 0" in err
    source, target = _records(a, "logs"), _records(b, "A.logs")
    for partition, records in source.items():
        copied = [r[1] for r in target[partition]]
        # At least once, in order: the target without its repeats is the source.
        assert list(dict.fromkeys(copied)) == [r[1] for r in records]


def _scrape(port):
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None


def test_bad_patterns_and_an_unreachable_source_are_refused_without_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "kqlite.cli", "mirror", "--source", "a:1",
                           "--target", "b:2", "--topics", "orders["], env=ENV, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a regular expression" in proc.stderr
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "kqlite.cli", "mirror", "--source",
                           f"127.0.0.1:{port}", "--target", f"127.0.0.1:{port}"], env=ENV,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot reach any broker" in proc.stderr
    assert "Traceback" not in proc.stderr


def _two_way(a, b, run_mirror, seconds):
    for bootstrap in (a, b):
        KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic("t", 1, 1)])
    ab = run_mirror(Mirror(_settings(a, b)))
    ba = run_mirror(Mirror(_settings(b, a, source_alias="B", target_alias="A")))
    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline or n == 0:
        _produce(a, "t", [b"a%05d" % n])
        _produce(b, "t", [b"b%05d" % n])
        n += 1
    wait_for(lambda: _count(b, "A.t") == n and _count(a, "B.t") == n, "both directions")
    time.sleep(1.0)
    ab.stop()
    ba.stop()
    for bootstrap, other in ((a, "B"), (b, "A")):
        topics = set(KafkaConsumer(bootstrap_servers=bootstrap).topics())
        assert f"{other}.t" in topics
        assert not any(t.count(".") > 1 and not t.endswith(".internal") for t in topics), topics
    assert _count(b, "A.t") == n and _count(a, "B.t") == n
    assert {r[1][:1] for r in _records(b, "A.t")[0]} == {b"a"}


def test_two_clusters_mirroring_each_other_never_loop(two_brokers, run_mirror):
    _two_way(*two_brokers, run_mirror, seconds=1.0)


@pytest.mark.soak
def test_two_clusters_mirroring_each_other_for_a_minute(two_brokers, run_mirror):
    _two_way(*two_brokers, run_mirror, seconds=60.0)


def test_a_foreign_source_tansu_mirrored_into_kqlite(tansu, tmp_path, run_mirror):
    target = kqlite_broker(tmp_path / "t")
    try:
        confluent = pytest.importorskip("confluent_kafka")
        admin = pytest.importorskip("confluent_kafka.admin")
        client = admin.AdminClient({"bootstrap.servers": tansu})
        client.create_topics([admin.NewTopic("events", 1, 1)])["events"].result(30)
        p = confluent.Producer({"bootstrap.servers": tansu})
        values = [b"e%04d" % i for i in range(200)]
        for v in values:
            p.produce("events", value=v, key=v[-1:])
        assert p.flush(30) == 0
        running = run_mirror(Mirror(_settings(tansu, target.bootstrap, topics="events",
                                              offset_syncs_location="target",
                                              emit_checkpoints=False)))
        wait_for(lambda: _count(target.bootstrap, "A.events") == 200, "tansu's records")
        running.stop()
        got = _records(target.bootstrap, "A.events")[0]
        assert [r[1] for r in got] == values and [r[0] for r in got] == [v[-1:] for v in values]
    finally:
        target.stop()


def test_a_source_topic_deleted_while_mirroring_leaves_the_others_copied(two_brokers,
                                                                         run_mirror):
    a, b = two_brokers
    admin = KafkaAdminClient(bootstrap_servers=a)
    admin.create_topics([NewTopic("keep", 1, 1), NewTopic("gone", 1, 1)])
    _produce(a, "keep", [b"k1"])
    _produce(a, "gone", [b"g1"])
    running = run_mirror(Mirror(_settings(a, b)))
    wait_for(lambda: _count(b, "A.keep") == 1 and _count(b, "A.gone") == 1, "both topics")
    admin.delete_topics(["gone"])
    wait_for(lambda: ("gone", 0) not in running.mirror.progress.partitions, "gone dropped")
    _produce(a, "keep", [b"k2"])
    wait_for(lambda: _count(b, "A.keep") == 2, "keep still mirrored")
    assert running.thread.is_alive()
    running.stop()


def test_group_offsets_are_not_synced_into_a_group_with_members_on_the_target(two_brokers,
                                                                             run_mirror):
    a, b = two_brokers
    KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("jobs", 1, 1)])
    KafkaAdminClient(bootstrap_servers=b).create_topics([NewTopic("A.jobs", 1, 1)])
    _produce(a, "jobs", [b"j%03d" % i for i in range(50)])
    source = KafkaConsumer("jobs", bootstrap_servers=a, group_id="busy",
                           auto_offset_reset="earliest", enable_auto_commit=False)
    while not source.poll(1000):
        pass
    source.commit()
    source.close()
    # A member of "busy" lives on the target before the mirror starts: KIP-545 leaves
    # that group alone while it has members.
    live = KafkaConsumer("A.jobs", bootstrap_servers=b, group_id="busy",
                         enable_auto_commit=False, auto_offset_reset="latest")
    wait_for(lambda: live.poll(200) is not None and live.assignment(), "the member joined")
    running = run_mirror(Mirror(_settings(a, b, sync_group_offsets=True)))
    wait_for(lambda: _records(b, "A.checkpoints.internal").get(0), "a checkpoint")
    for _ in range(5):                                # more checkpoint rounds
        live.poll(300)
    tp = TopicPartition("A.jobs", 0)
    assert live.committed(tp) is None
    live.close()
    # The control: once the group has no members, the offset is synced.
    probe = KafkaConsumer(bootstrap_servers=b, group_id="busy", enable_auto_commit=False)
    assert wait_for(lambda: probe.committed(tp), "the offset synced to the idle group") > 0
    probe.close()
    running.stop()
