"""The offset-preserving mirror between two kqlite single brokers (children on the C
helpers): the source's batches byte for byte at the same offsets on the target, the log
start and a gap included; the mode chosen by the target's answer; a producer refused fast
by confluent-kafka; a consumer group moved to the target resuming at exactly its committed
offset; the mirror command SIGKILLed and restarted with no duplicate and no gap; promote
waiting for the copy, and --force at once. Default run: about 10 s."""

import asyncio
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from kqlite.mirror import MirrorSettings, PreservingMirror, chosen_mode
from kqlite.mirror.client import ClusterClient
from kqlite.mirror.preserve import whole_batches
from kqlite.protocol import ErrorCode

from mirror_helpers import ENV, ROOT, wait_for


def _settings(a, b, **kw):
    base = dict(source=a, target=b, source_alias="A", target_alias="B", mode="preserve",
                refresh_interval=0.3, checkpoint_interval=0.3, fetch_max_wait_ms=100)
    base.update(kw)
    return MirrorSettings(**base)


def _produce(bootstrap, topic, values, **config):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures = []
    for v in values:
        p.produce(topic, v, callback=lambda err, _m: err and failures.append(err))
    p.flush(30)
    return failures


def _log(bootstrap, topic, partition=0, tries=20):
    """(log start, whole-batch bytes from it to the log end) as Fetch answers them. A
    read the log changes under (its start moved past the offset asked: an error and no
    records; its leader moved) starts again, at most ``tries`` times."""
    async def read():
        c = ClusterClient(bootstrap)
        try:
            await c.refresh([topic])
            if c.partitions.get(topic, 0) <= partition:
                return None
            tp = (topic, partition)
            for _ in range(tries):
                start = (await c.list_offsets([tp], -2))[tp]
                end = (await c.list_offsets([tp], -1))[tp]
                data, offset = b"", start
                while offset < end:
                    body = await c.fetch(c.leader_address(*tp), {tp: offset}, max_wait_ms=0,
                                         isolation_level=0)
                    (p,) = [p for t in body["responses"] for p in t["partitions"]]
                    chunk, next_offset = whole_batches(p["records"] or b"")
                    if p["error_code"] or next_offset <= offset:
                        break
                    data, offset = data + chunk, next_offset
                else:
                    return start, data
                await asyncio.sleep(0.1)
                await c.refresh([topic])
            raise AssertionError(f"{topic}-{partition} changed under each of {tries} reads")
        finally:
            await c.close()
    return asyncio.run(read())


def _mode(a, b):
    return asyncio.run(chosen_mode(MirrorSettings(source=a, target=b)))


def test_batches_byte_identical_at_the_same_offsets_and_read_only(two_brokers, run_mirror):
    a, b = two_brokers
    assert _mode(a, b) == "preserve"
    KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("orders", 2, 1)])
    assert not _produce(a, "orders", [b"v%04d" % i for i in range(500)],
                        **{"enable.idempotence": True})
    # The log start moves past the first records: the target starts there too.
    asyncio.run(_delete_records(a, "orders", 0, 20))
    running = run_mirror(PreservingMirror(_settings(a, b, topics="orders")))
    for partition in (0, 1):
        wait_for(lambda: _log(b, "orders", partition) == _log(a, "orders", partition),
                 f"orders-{partition} copied")
    assert _log(b, "orders", 0)[0] == _log(a, "orders", 0)[0] > 0
    text = running.mirror.metrics.text()
    assert 'kqlite_mirror_records_total{topic="orders"}' in text
    wait_for(lambda: 'kqlite_mirror_lag_records{partition="1",topic="orders"} 0.0'
             in running.mirror.metrics.text(), "the lag at 0")
    # Read-only: confluent-kafka fails the record (no retry until delivery.timeout.ms).
    began = time.monotonic()
    failures = _produce(b, "orders", [b"forbidden"], **{"delivery.timeout.ms": 20000})
    assert len(failures) == 1 and failures[0].code() == ErrorCode.INVALID_REQUEST
    assert time.monotonic() - began < 10
    running.stop()


async def _delete_records(bootstrap, topic, partition, offset):
    from kqlite.protocol import ApiKey
    c = ClusterClient(bootstrap)
    try:
        await c.refresh([topic])
        body = await c.request(c.leader_address(topic, partition), ApiKey.DELETE_RECORDS, {
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "offset": offset}]}], "timeout_ms": 5000})
        assert body["topics"][0]["partitions"][0]["error_code"] == 0
    finally:
        await c.close()


def _consumer(bootstrap, group):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe(["events"])
    return c


def _take(consumer, n):
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.value()))
    return got


def _cli(a, b, *more):
    return subprocess.Popen(
        [sys.executable, "-m", "kqlite.cli", "mirror", "--source", a, "--target", b,
         "--topics", "events", "--source-alias", "A", "--refresh-interval", "0.3",
         "--checkpoint-interval", "0.3", *more],
        env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _promote(a, b, topic, *more):
    return subprocess.run(
        [sys.executable, "-m", "kqlite.cli", "mirror", "promote", topic, "--target", b,
         *(["--source", a] if a else []), *more],
        env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_failover_killed_mirror_group_offsets_and_promote(two_brokers):
    a, b = two_brokers
    KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("events", 1, 1)])
    values = [b"e%04d" % i for i in range(300)]
    assert not _produce(a, "events", values[:200])
    mirror = _cli(a, b)           # no --mode: chosen by the target
    try:
        wait_for(lambda: _log(b, "events") == _log(a, "events"), "the first copy")
        # SIGKILL in the middle of copying, then a restart: offsets preserved make a
        # duplicate impossible, and the logs end byte-identical.
        assert not _produce(a, "events", values[200:])
        mirror.send_signal(signal.SIGKILL)
        mirror.wait(10)
        mirror = _cli(a, b)
        wait_for(lambda: _log(b, "events") == _log(a, "events"), "the copy after a restart")
        # A group consumes 120 records on the source and commits; it moves to the target.
        source_consumer = _consumer(a, "g")
        taken = _take(source_consumer, 120)
        assert [o for o, _ in taken] == list(range(120))
        source_consumer.commit(asynchronous=False)
        source_consumer.close()

        def synced():
            c = Consumer({"bootstrap.servers": b, "group.id": "g"})
            try:
                (tp,) = c.committed([TopicPartition("events", 0)], timeout=5)
                return tp.offset == 120
            finally:
                c.close()
        wait_for(synced, "the group's offset copied")
        # promote waits for the copy: produce more on the source first.
        assert not _produce(a, "events", [b"late%d" % i for i in range(50)])
        promoted = _promote(a, b, "events")
        assert promoted.returncode == 0, promoted.stderr
        assert _log(b, "events") == _log(a, "events")
        # The running mirror sees the promotion at its next append and stops the copy.
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(mirror.stderr), daemon=True)
        reader.start()
        assert not _produce(a, "events", [b"not copied"])
        wait_for(lambda: any("events is no mirror topic any more" in line for line in lines),
                 "the mirror to stop copying the promoted topic")
    finally:
        mirror.send_signal(signal.SIGTERM)
        mirror.wait(30)
    target_consumer = _consumer(b, "g")
    resumed = _take(target_consumer, 230)
    target_consumer.close()
    # Exactly at the committed offset: nothing missed, nothing read again; the record
    # produced on the source after the promotion is not on the target.
    assert [o for o, _ in resumed] == list(range(120, 350))
    assert [v for _, v in resumed[:180]] == values[120:]
    assert b"not copied" not in [v for _, v in resumed]
    # Promoted: producers are taken, after the mirrored end.
    assert not _produce(b, "events", [b"after"])
    assert _promote(a, b, "events", "--force").returncode == 1       # no mirror any more


def test_promote_force_and_refusals(two_brokers, run_mirror):
    a, b = two_brokers
    KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("t", 1, 1)])
    assert not _produce(a, "t", [b"x%d" % i for i in range(10)])
    running = run_mirror(PreservingMirror(_settings(a, b, topics="t")))
    wait_for(lambda: _log(b, "t") == _log(a, "t"), "the copy")
    running.stop()
    assert _promote(None, b, "t").returncode == 2      # neither --source nor --force
    forced = _promote(None, b, "t", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not _produce(b, "t", [b"y"])


def test_the_mode_is_forced_by_the_option_and_probed_otherwise(tansu, two_brokers):
    _a, b = two_brokers
    forced = MirrorSettings(source="127.0.0.1:1", target="127.0.0.1:1", mode="mm2")
    assert asyncio.run(chosen_mode(forced)) == "mm2"        # nothing asked
    assert _mode(tansu, b) == "preserve"
    assert _mode(b, tansu) == "mm2"           # a broker that does not know the mark
