"""Embedded transactions (db.transaction()) and Kafka clients' transactions through
`kqlite serve` on one data dir: one producer-id space, one ``__transaction_state``, and
each sees the other's results.

- while the broker serves the data dir, an embedded process commits a transaction over
  two partitions with an offset commit, and rolls one back; a confluent-kafka
  transactional producer commits through the broker meanwhile. Their producer ids
  differ; a confluent-kafka read_committed consumer through the broker sees exactly the
  committed records of both, a read_uncommitted one sees the rolled-back ones too, and
  the group's offsets are the embedded commit's; the broker's DescribeTransactions
  answers the embedded id's state (CompleteCommit) from the shared state;
- an embedded process SIGKILLed inside a transaction whose records are written leaves
  its Ongoing record; a broker started on the data dir (its Database's open decides what
  dead embedded owners left, before its coordinator loads) aborts it, and read_committed
  consumers get past it;
- while a broker serves the data dir, an embedded process is SIGKILLed inside a
  transaction: the broker's next timed-out-transactions tick (200 ms here) has the data
  dir decide what the dead owner left, long before the transaction's own timeout (60 s);
- a broker that starts while a live embedded handle is between its PrepareCommit and its
  markers leaves them to the handle (no markers of its own, no late CompleteCommit); once
  the owner is gone, the broker's next check finishes the transaction.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from broker_process import BrokerProcess, RawClient, unique

import kqlite
from kqlite.db.transaction_owners import Owner, OwnerLock, write_owner
from kqlite.format.batch import build_batch
from kqlite.format.transaction_records import TransactionLogValue, TransactionStatus as S
from kqlite.format.validate import AppendOrigin
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.storage import Isolation

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EMBEDDED = """
import sys, kqlite
db = kqlite.open(sys.argv[1], retention_check_interval_ms=0)
with db.transaction("embedded-1") as tx:
    for i in range(4):
        tx.send(sys.argv[2], value=b"e%d" % i, partition=i % 2)
    tx.commit_offsets("embedded-group", {(sys.argv[2], 0): 2, (sys.argv[2], 1): 2})
try:
    with db.transaction("embedded-1", batch_bytes=1) as tx:   # each record written at once
        tx.send(sys.argv[2], value=b"rolled-back", partition=0)
        raise RuntimeError("roll back")
except RuntimeError:
    pass
print(tx.producer_id, flush=True)
db.close()
"""

KILLED = """
import os, signal, sys, kqlite
db = kqlite.open(sys.argv[1], retention_check_interval_ms=0)
tx = db.transaction(sys.argv[3], batch_bytes=1)
tx.send(sys.argv[2], value=b"never", partition=0)
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def embedded(script, data_dir, topic, *args):
    return subprocess.run([sys.executable, "-c", script, data_dir, topic, *args],
                          capture_output=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)


def create_topic(broker, name, partitions):
    c = RawClient(broker)
    answer = c.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})
    c.close()
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE


def describe(broker, tid):
    """DescribeTransactions of ``tid``, once the coordinator has loaded."""
    raw = RawClient(broker)
    deadline = time.monotonic() + 30
    try:
        while True:
            answer = raw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
            (state,) = answer["transaction_states"]
            if state["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or \
                    time.monotonic() > deadline:
                return state
            time.sleep(0.1)
    finally:
        raw.close()


def read(ck, broker, topic, committed, expected):
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("reader"),
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(2)])
    got, deadline, idle = [], time.monotonic() + 30, None
    while time.monotonic() < deadline:
        batch = [m.value().decode() for m in c.consume(100, 0.2) if m.error() is None]
        got += batch
        if len(got) >= expected:
            idle = idle or time.monotonic()
            if time.monotonic() - idle > 0.5:
                break
    c.close()
    return sorted(got)


def test_embedded_and_client_transactions_share_a_data_dir_through_the_broker(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    try:
        create_topic(broker, "shared", 2)
        done = embedded(EMBEDDED, str(data), "shared")
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        embedded_pid = int(done.stdout.split()[0])

        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "client-1",
                         "linger.ms": 5})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("shared", b"k0", partition=1)
        p.produce("shared", b"k1", partition=0)
        p.flush(30)
        p.commit_transaction(30)

        committed = ["e0", "e1", "e2", "e3", "k0", "k1"]
        assert read(ck, broker, "shared", True, 6) == committed
        assert read(ck, broker, "shared", False, 7) == sorted(committed + ["rolled-back"])

        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "embedded-group"})
        offsets = c.committed([ck.TopicPartition("shared", 0), ck.TopicPartition("shared", 1)],
                              timeout=30)
        c.close()
        assert [tp.offset for tp in offsets] == [2, 2]

        states = {tid: describe(broker, tid) for tid in ("embedded-1", "client-1")}
        assert states["embedded-1"]["error_code"] == ErrorCode.NONE
        assert states["embedded-1"]["transaction_state"] == "CompleteAbort"
        assert states["embedded-1"]["producer_id"] == embedded_pid
        assert states["client-1"]["transaction_state"] == "CompleteCommit"
        assert states["client-1"]["producer_id"] != embedded_pid
    finally:
        broker.stop()


def test_a_broker_started_on_the_data_dir_aborts_what_a_killed_embedded_owner_left(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    data = tmp_path / "data"
    db = kqlite.open(data, retention_check_interval_ms=0)
    db.create_topic("cut", 2)
    db.close()
    killed = embedded(KILLED, str(data), "cut", "embedded-2")
    assert killed.returncode == -signal.SIGKILL and killed.stdout.strip() == b"written"
    broker = BrokerProcess(data)
    try:
        state = describe(broker, "embedded-2")
        assert state["transaction_state"] == S.COMPLETE_ABORT.state_name
        p = ck.Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("cut", b"after", partition=0)
        p.flush(30)
        assert read(ck, broker, "cut", True, 1) == ["after"]
    finally:
        broker.stop()


def test_a_running_broker_decides_what_an_embedded_owner_killed_meanwhile_left(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=(
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200"))
    try:
        create_topic(broker, "live", 2)
        killed = embedded(KILLED, str(data), "live", "embedded-3")
        assert killed.returncode == -signal.SIGKILL and killed.stdout.strip() == b"written"
        deadline = time.monotonic() + 30
        while describe(broker, "embedded-3")["transaction_state"] != "CompleteAbort":
            assert time.monotonic() < deadline, describe(broker, "embedded-3")
            time.sleep(0.2)
        p = ck.Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("live", b"after", partition=0)
        p.flush(30)
        assert read(ck, broker, "live", True, 1) == ["after"]
    finally:
        broker.stop()


def test_a_broker_leaves_a_live_embedded_owners_decision_to_it(tmp_path):
    data = tmp_path / "data"
    db = kqlite.open(data, retention_check_interval_ms=0)
    db.create_topic("held", 1)
    pid = db.producer_ids.allocate()
    write_owner(db.fs, db.path, Owner("embedded-4", pid, {("held", 0)}))
    lock = OwnerLock(db.fs, db.path, "embedded-4")
    assert lock.try_take()                   # a live handle, between PrepareCommit and markers
    db.log("held", 0).append_batches(
        build_batch([b"decided"], producer_id=pid, producer_epoch=0, base_sequence=0,
                    transactional=True), origin=AppendOrigin.LOCAL)
    db.transaction_state.write("embedded-4", TransactionLogValue(
        pid, 0, 60000, S.PREPARE_COMMIT, (("held", (0,)),), 1, 1))
    broker = BrokerProcess(data, extra=(
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200"))
    try:
        assert describe(broker, "embedded-4")["transaction_state"] == "PrepareCommit"
        time.sleep(1.0)                      # several checks: the owner lives, nothing done
        assert db.log("held", 0).ongoing_transactions() == [(pid, 0)]
        assert db.transaction_state.state("embedded-4").status is S.PREPARE_COMMIT
        lock.release()                       # the owner is gone
        deadline = time.monotonic() + 30
        while describe(broker, "embedded-4")["transaction_state"] != "CompleteCommit":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert [r.value for r in db.log("held", 0).read(isolation=Isolation.COMMITTED)] == \
            [b"decided"]
    finally:
        broker.stop()
        db.close()
