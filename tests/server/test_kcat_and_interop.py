"""kcat produces and consumes; broker and embedded API see the same records and offsets."""

import json
import shutil
import subprocess

import pytest

import kqlite
from broker_process import unique

kcat = shutil.which("kcat")


@pytest.mark.skipif(kcat is None, reason="kcat is installed by scripts/test (apt-get install kcat)")
def test_kcat_produce_and_consume(broker):
    topic = unique("kcat")
    lines = "".join(f"key{i}:value{i}\n" for i in range(50))
    subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":"], input=lines,
                   text=True, check=True, timeout=60)
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning",
                          "-e", "-J"], capture_output=True, text=True, check=True, timeout=60)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert sorted((r["key"], r["payload"]) for r in rows) == \
        sorted((f"key{i}", f"value{i}") for i in range(50))


def test_broker_and_embedded_api_agree(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = unique("interop")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    metas = [producer.send(topic, b"via-broker-%d" % i, partition=0).get(10) for i in range(10)]
    producer.close()
    # The broker holds the data dir open; the embedded API opens the same files.
    with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
        log = db.log(topic, 0)
        recs = list(log.read())
        assert [(r.offset, r.value) for r in recs] == \
            [(m.offset, b"via-broker-%d" % i) for i, m in enumerate(metas)]
        first = log.append([b"embedded-%d" % i for i in range(5)])
    assert first == 10
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=3000,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got = [(m.offset, m.value) for m in consumer]
    consumer.close()
    assert got[10:] == [(10 + i, b"embedded-%d" % i) for i in range(5)]
