"""The broker SIGKILLed at each step of a transaction's commit, then restarted on the same
data dir: the transaction ends as its logged state says -- committed if PrepareCommit was
logged, aborted (by the timeout) if it was still Ongoing -- and read_committed readers see
all of it or none of it, on every partition.

The broker runs as tests/server/txn_crash_broker.py, whose file-system seam kills the
process at the step (after the second Ongoing record, after PrepareCommit, between the
two markers, before CompleteCommit). The transaction is driven with raw requests so that
each step is reached deterministically: AddPartitionsToTxn(t-0), a transactional batch
to t-0, AddPartitionsToTxn(t-1), a batch to t-1, EndTxn(commit).
"""

import os
import re
import subprocess
import sys
import time

import pytest

from broker_process import RawClient

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "txn_crash_broker.py")
TXN, TOPIC = "crash-txn", "crash"
TIMEOUT_MS = 3000        # the transaction's: an Ongoing one is aborted this soon after
PRODUCER_ID, EPOCH = 0, 0  # the first producer id of a fresh data dir


class CrashBroker:
    def __init__(self, data_dir, step):
        self.proc = subprocess.Popen(
            [sys.executable, SCRIPT, str(data_dir), step, str(PRODUCER_ID), str(EPOCH),
             str(TIMEOUT_MS)], stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.port = None
        deadline = time.monotonic() + 30
        while self.port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        assert self.port is not None, "the broker did not start"
        os.set_blocking(self.proc.stderr.fileno(), False)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def killed(self, timeout=20):
        try:
            return self.proc.wait(timeout) == -9
        except subprocess.TimeoutExpired:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def _batch(values, sequence):
    return build_batch([v.encode() for v in values], producer_id=PRODUCER_ID,
                       producer_epoch=EPOCH, base_sequence=sequence, transactional=True)


def _produce(c, partition, values):
    answer = c.call(ApiKey.PRODUCE, 9, {"transactional_id": TXN, "acks": -1,
                                        "timeout_ms": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition,
                                            "records": _batch(values, 0)}]}]})
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def _add(c, partition):
    answer = c.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": PRODUCER_ID,
        "v3_and_below_producer_epoch": EPOCH,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}]})
    return answer["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"]


def _drive(broker):
    """Run the transaction until the broker dies; the steps that were answered."""
    answered = []
    c = RawClient(broker)
    steps = [
        ("create", lambda: c.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
            {"name": TOPIC, "num_partitions": 2, "replication_factor": 1, "assignments": [],
             "configs": []}], "timeout_ms": 10000, "validate_only": False})),
        ("init", lambda: c.call(ApiKey.INIT_PRODUCER_ID, 3, {
            "transactional_id": TXN, "transaction_timeout_ms": TIMEOUT_MS})),
        ("add t-0", lambda: _add(c, 0)),
        ("produce t-0", lambda: _produce(c, 0, ["a0", "a1"])),
        ("add t-1", lambda: _add(c, 1)),
        ("produce t-1", lambda: _produce(c, 1, ["b0"])),
        ("end", lambda: c.call(ApiKey.END_TXN, 1, {
            "transactional_id": TXN, "producer_id": PRODUCER_ID, "producer_epoch": EPOCH,
            "committed": True})),
    ]
    try:
        for name, step in steps:
            answer = step()
            if name == "init":
                assert (answer["producer_id"], answer["producer_epoch"]) == (PRODUCER_ID, EPOCH)
            elif name == "end":
                assert answer["error_code"] == ErrorCode.NONE
            elif name != "create":
                assert answer == ErrorCode.NONE, (name, answer)
            answered.append(name)
    except (ConnectionError, OSError, EOFError, AssertionError) as exc:
        if broker.proc.wait(10) != -9:       # not the kill the step makes: a real failure
            raise AssertionError(f"{answered}: {exc}") from exc
    c.close()
    return answered


def _state(broker):
    c = RawClient(broker)
    (entry,) = c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN]})[
        "transaction_states"]
    c.close()
    return entry["transaction_state"]


def _read(bootstrap, committed):
    ck = pytest.importorskip("confluent_kafka")
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"crash-{time.time()}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.assign([ck.TopicPartition(TOPIC, p, 0) for p in range(2)])
    got, deadline = [], time.monotonic() + 10
    while time.monotonic() < deadline:
        got += [m.value().decode() for m in c.consume(100, 0.3) if m.error() is None]
        positions = c.position([ck.TopicPartition(TOPIC, p) for p in range(2)])
        ends = [c.get_watermark_offsets(ck.TopicPartition(TOPIC, p))[1] for p in range(2)]
        if all(tp.offset >= end for tp, end in zip(positions, ends)):
            break
    c.close()
    return sorted(got)


@pytest.mark.parametrize("step,outcome", [
    ("after-add-partitions", "CompleteAbort"),
    ("after-prepare-commit", "CompleteCommit"),
    ("between-markers", "CompleteCommit"),
    ("before-complete-commit", "CompleteCommit"),
])
def test_a_commit_interrupted_by_a_kill_ends_as_its_log_says(tmp_path, step, outcome):
    data = tmp_path / "data"
    crashing = CrashBroker(data, step)
    try:
        answered = _drive(crashing)
        assert crashing.killed(), f"{step}: the broker was not killed ({answered})"
    finally:
        crashing.stop()
    broker = CrashBroker(data, "none")
    try:
        deadline = time.monotonic() + TIMEOUT_MS / 1000 + 15
        while _state(broker) != outcome and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _state(broker) == outcome, step
        written = ["a0", "a1", "b0"][:{"after-add-partitions": 2}.get(step, 3)]
        if outcome == "CompleteCommit":
            assert _read(broker.bootstrap, True) == written
        else:
            assert _read(broker.bootstrap, True) == []
        assert _read(broker.bootstrap, False) == written
    finally:
        broker.stop()
