"""kafkajs (Node.js, from npm) against `kqlite serve`: topic, config, record and group
administration, idempotent produce, a group of three with a member leaving, a committed
offset the log no longer has, commits resumed after a broker restart.

The client runs as ``node tests/server/node/kafkajs_tool.js COMMAND ...`` child processes
(scripts/test installs the pinned kafkajs with ``npm ci``); each prints JSON lines. Every
child has a timeout, so a client that hangs fails the test instead of stalling the suite.
"""

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import kqlite
from kqlite.format.constants import CODEC_GZIP, CODEC_MASK, CODEC_NONE
from broker_process import BrokerProcess, unique

NODE_DIR = Path(__file__).parent / "node"
TOOL = NODE_DIR / "kafkajs_tool.js"
TIMEOUT = 120  # seconds a single kafkajs command may take before the test fails

if shutil.which("node") is None:
    pytest.skip("node is not installed (needed for the kafkajs tests)", allow_module_level=True)
if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
    pytest.skip("kafkajs is not installed: run scripts/test, or `npm ci` in tests/server/node",
                allow_module_level=True)

ENV = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")


def kafkajs(command, bootstrap, *args):
    """Run one command to completion; its JSON lines."""
    proc = subprocess.run(["node", str(TOOL), command, bootstrap, *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0, \
        f"kafkajs {command} failed: {lines[-1:]}\nstderr:\n{proc.stderr[-6000:]}"
    return lines


class Member:
    """A kafkajs group member in its own process; it leaves the group when stdin closes."""

    def __init__(self, bootstrap, topic, group):
        self.proc = subprocess.Popen(
            ["node", str(TOOL), "member", bootstrap, topic, group], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        self.events = []
        self.lock = threading.Lock()
        self.stderr = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr),
                         daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip():
                with self.lock:
                    self.events.append(json.loads(line))

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def values(self):
        return {e["value"] for e in self.snapshot() if e["event"] == "record"}

    def joins(self):
        return [e for e in self.snapshot() if e["event"] == "join"]

    def leave(self):
        self.proc.stdin.close()
        assert self.proc.wait(TIMEOUT) == 0, "".join(self.stderr)[-6000:]
        # The process has exited; its last lines are in events once the reader has
        # reached the end of its stdout.
        self._reader.join(TIMEOUT)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def crashes(self):
        return [e for e in self.snapshot() if e["event"] == "crash"]


def wait_until(condition, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_admin_create_list_describe_offsets_delete(broker):
    topic = unique("kjs-admin")
    steps = {line["step"]: line for line in kafkajs("admin", broker.bootstrap, topic, 4, 20)}
    assert steps["create"]["created"] is True
    assert steps["create-again"]["created"] is False  # TOPIC_ALREADY_EXISTS, as from Kafka
    assert topic in steps["list"]["topics"]
    (described,) = steps["describe"]["topics"]
    assert described["name"] == topic
    assert described["partitions"] == [
        {"id": p, "leader": 0, "replicas": [0], "isr": [0], "error": 0} for p in range(4)]
    # 20 records sent round-robin to 4 partitions: five each, from offset 0
    assert steps["offsets"]["offsets"] == [
        {"partition": p, "low": 0, "high": 5, "offset": 5} for p in range(4)]
    assert topic not in steps["list-after-delete"]["topics"]


def test_admin_configs_partitions_records_and_groups(broker):
    topic, group = unique("kjs-tools"), unique("kjs-tools-g")
    base = 1_700_000_000_000
    steps = {line["step"]: line for line in
             kafkajs("admin-tools", broker.bootstrap, topic, group, base)}
    assert steps["configs"]["configs"] == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    assert steps["configs-altered"]["configs"]["retention.ms"] == "7200000"
    assert steps["partitions"]["count"] == 4
    # ten records per partition stamped base, base+1s, ...: the first at or after base+5s
    # is the sixth
    assert steps["offsets-by-time"]["offsets"] == [
        {"partition": p, "offset": 5} for p in range(4)]
    assert steps["records-deleted"]["low"] == [
        {"partition": p, "low": 3 if p == 0 else 0} for p in range(4)]
    assert steps["group-offsets"]["offsets"] == [
        {"partition": p, "offset": 5 + p} for p in range(4)]
    assert group in steps["groups"]["groups"]
    assert steps["describe-group"]["groups"] == [
        {"groupId": group, "state": "Empty", "members": 0, "errorCode": 0}]
    assert steps["delete-group"]["results"] == [{"groupId": group, "errorCode": 0}]
    assert group not in steps["groups-after-delete"]["groups"]
    assert steps["group-offsets-after-delete"]["offsets"] == [
        {"partition": p, "offset": -1} for p in range(4)]
    assert steps["cluster"] == {"step": "cluster", "controller": 0,
                                "brokers": [{"nodeId": 0, "port": broker.port}]}


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_idempotent_producer_every_record_once(broker, codec):
    topic = unique(f"kjs-idem-{codec}")
    count = 240
    sends = kafkajs("produce-idempotent", broker.bootstrap, topic, count, codec)
    produced = [v for s in sends for v in s["values"]]
    assert produced == [f"idem-{i}" for i in range(count)]
    assert all(m["error"] == 0 for s in sends for m in s["metadata"])

    records = kafkajs("consume-commit", broker.bootstrap, topic, unique("kjs-idem-g"), count)
    assert Counter(r["value"] for r in records) == Counter(produced)
    by_partition = defaultdict(list)
    for r in records:
        by_partition[r["partition"]].append(r["offset"])
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))  # in order, no gap, no duplicate

    # The batches on disk carry the producer's id and contiguous sequences: the records
    # went through the idempotent path, and none was stored twice.
    with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
        producer_ids = set()
        stored = 0
        for p, offsets in by_partition.items():
            log = db.log(topic, p)
            assert log.end_offset == len(offsets)
            sequence = 0
            for h in log.batch_headers():
                assert h.attributes & CODEC_MASK == (CODEC_GZIP if codec == "gzip" else CODEC_NONE)
                producer_ids.add((h.producer_id, h.producer_epoch))
                assert h.base_sequence == sequence
                sequence += h.records_count
            stored += sequence
    assert stored == count
    ((producer_id, epoch),) = producer_ids
    assert producer_id >= 0 and epoch == 0


def test_group_of_three_rebalances_when_one_leaves(broker):
    topic, group = unique("kjs-group"), unique("kjs-g3")
    kafkajs("create", broker.bootstrap, topic, 6)
    everything = set(range(6))

    def settled(members):
        """Each member's latest assignment: disjoint, none empty, together every partition."""
        latest = [m.joins()[-1]["assignment"] if m.joins() else [] for m in members]
        return (all(latest) and sum(map(len, latest)) == 6
                and set().union(*map(set, latest)) == everything)

    members = [Member(broker.bootstrap, topic, group) for _ in range(3)]
    try:
        wait_until(lambda: settled(members), "three members sharing the six partitions")
        kafkajs("produce", broker.bootstrap, topic, "a", 300)
        first = {f"a-{i}" for i in range(300)}
        wait_until(lambda: set().union(*(m.values() for m in members)) >= first,
                   "the group to read the first 300 records")
        wait_until(lambda: committed_at_end(broker, topic, group),
                   "kafkajs to commit what it read")

        leaver, stay = members[0], members[1:]
        joins_before = [len(m.joins()) for m in stay]
        leaver.leave()
        assert leaver.snapshot()[-1] == {"event": "left"}
        wait_until(lambda: all(len(m.joins()) > n for m, n in zip(stay, joins_before))
                   and settled(stay), "the two remaining members to take every partition")

        kafkajs("produce", broker.bootstrap, topic, "b", 300)
        second = {f"b-{i}" for i in range(300)}
        wait_until(lambda: set().union(*(m.values() for m in stay)) >= second,
                   "the remaining two to read the next 300 records")
        for m in stay:
            m.leave()
        assert not any(m.crashes() for m in members)
    finally:
        for m in members:
            m.kill()
    delivered = Counter(e["value"] for m in members for e in m.snapshot()
                        if e["event"] == "record")
    # None lost, nothing foreign; and none twice: everything read before the departure
    # was committed, so the two that took over the leaver's partitions started at the
    # commits.
    assert delivered == Counter(first | second)
    # kafkajs commits what it processed before leaving: the group ends at the log ends.
    assert committed_at_end(broker, topic, group)


def committed_at_end(broker, topic, group):
    (committed,) = kafkajs("group-offsets", broker.bootstrap, topic, group)
    ends = kafkajs("topic-offsets", broker.bootstrap, topic)[0]["offsets"]
    return committed["offsets"] == [{"partition": e["partition"], "offset": e["high"]}
                                    for e in ends]


def test_committed_offset_below_the_log_start_resets_to_earliest(broker):
    """A committed position the log no longer has: the broker answers OFFSET_OUT_OF_RANGE
    (with empty records) and kafkajs resets to the earliest offset instead of hanging."""
    topic, group = unique("kjs-reset"), unique("kjs-reset-g")
    kafkajs("create", broker.bootstrap, topic, 1)
    kafkajs("produce", broker.bootstrap, topic, "r", 10)
    kafkajs("set-offsets", broker.bootstrap, topic, group, 3)
    kafkajs("delete-records", broker.bootstrap, topic, 6)
    records = kafkajs("consume-commit", broker.bootstrap, topic, group, 4)
    assert [(r["offset"], r["value"]) for r in records] == [(i, f"r-{i}") for i in range(6, 10)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_commits_resume_after_broker_restart(tmp_path, sig):
    topic, group = unique("kjs-resume"), unique("kjs-rg")
    b = BrokerProcess(tmp_path / "data")
    try:
        kafkajs("produce", b.bootstrap, topic, "first", 60)
        before = kafkajs("consume-commit", b.bootstrap, topic, group, 60)
        assert sorted(r["value"] for r in before) == sorted(f"first-{i}" for i in range(60))
        (committed,) = kafkajs("group-offsets", b.bootstrap, topic, group)
        ends = Counter(r["partition"] for r in before)
        assert committed["offsets"] == [{"partition": p, "offset": ends[p]} for p in range(3)]
    finally:
        b.stop(sig)
    b = BrokerProcess(tmp_path / "data")
    try:
        assert kafkajs("group-offsets", b.bootstrap, topic, group) == [committed]
        kafkajs("produce", b.bootstrap, topic, "second", 60)
        after = kafkajs("consume-commit", b.bootstrap, topic, group, 60)
        # A new consumer in the group starts at the commits: nothing of the first 60 again.
        assert sorted(r["value"] for r in after) == sorted(f"second-{i}" for i in range(60))
        for p in range(3):
            offsets = [r["offset"] for r in after if r["partition"] == p]
            assert offsets == list(range(ends[p], ends[p] + len(offsets)))
    finally:
        b.stop()


# -- Transactions -------------------------------------------------------------------------------

ABORT_CHECK_MS = 200     # the broker looks for timed-out transactions this often


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("kjs-txn") / "data", extra=(
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", str(ABORT_CHECK_MS)))
    yield b
    b.stop()


def _read(bootstrap, topic, isolation, expected):
    (line,) = kafkajs("txn-read", bootstrap, topic, isolation, expected)
    return sorted(line["values"])


def test_transactions_commit_and_abort(txn_broker):
    """A committed and an aborted transaction over two partitions: kafkajs's read_committed
    consumer (its default) sees exactly the committed records, read_uncommitted both."""
    topic = unique("kjs-txn")
    bootstrap = txn_broker.bootstrap
    kafkajs("create", bootstrap, topic, 2)
    kafkajs("txn-produce", bootstrap, topic, unique("kjs-c"), "commit", "c", 6)
    kafkajs("txn-produce", bootstrap, topic, unique("kjs-a"), "abort", "a", 6)
    committed = sorted(f"c-{i}" for i in range(6))
    assert _read(bootstrap, topic, "read_committed", 6) == committed
    assert _read(bootstrap, topic, "read_uncommitted", 12) == \
        sorted(committed + [f"a-{i}" for i in range(6)])


def test_transactions_consume_transform_produce(txn_broker):
    source, sink, group = unique("kjs-in"), unique("kjs-out"), unique("kjs-ctp")
    bootstrap = txn_broker.bootstrap
    kafkajs("create", bootstrap, source, 2)
    kafkajs("create", bootstrap, sink, 2)
    kafkajs("produce", bootstrap, source, "v", 20)
    (done,) = kafkajs("txn-transform", bootstrap, source, sink, group, unique("kjs-t"), 20)
    assert done["transformed"] == 20
    assert _read(bootstrap, sink, "read_committed", 20) == sorted(f"V-{i}" for i in range(20))
    (offsets,) = kafkajs("group-offsets", bootstrap, source, group)
    assert sum(o["offset"] for o in offsets["offsets"]) == 20


def test_transactions_a_second_producer_fences_the_first(txn_broker):
    topic = unique("kjs-fence")
    bootstrap = txn_broker.bootstrap
    kafkajs("create", bootstrap, topic, 2)
    (result,) = kafkajs("txn-fence", bootstrap, topic, unique("kjs-f"))
    assert result["committed"] is False, result
    assert result["type"] in ("INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED"), result
    assert _read(bootstrap, topic, "read_committed", 0) == []


def test_transactions_left_open_past_the_timeout_are_aborted(txn_broker):
    topic = unique("kjs-abandon")
    bootstrap = txn_broker.bootstrap
    kafkajs("create", bootstrap, topic, 2)
    kafkajs("txn-abandon", bootstrap, topic, unique("kjs-ab"), 1000)
    time.sleep(1.0 + 3 * ABORT_CHECK_MS / 1000)
    kafkajs("txn-produce", bootstrap, topic, unique("kjs-after"), "commit", "after", 2)
    assert _read(bootstrap, topic, "read_committed", 2) == ["after-0", "after-1"]
    assert _read(bootstrap, topic, "read_uncommitted", 3) == ["abandoned", "after-0", "after-1"]
