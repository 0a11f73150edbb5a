"""The offset-preserving mirror into a kqlite cluster: a single kqlite broker as the source,
a 3-broker cluster (RF 3) as the target, every process a child on the C helpers. The mode
is chosen by the cluster's controller; the source's batches are on all three target
replicas byte for byte at their offsets, apart from the leader epoch the target's leader
stamps; producers are refused by every broker that leads a partition of the mirror topic,
and so are DeleteRecords, CreatePartitions and config changes from clients that are not
the mirror; group offsets reach the cluster's coordinator unchanged; the target's leader
SIGKILLed in the middle of a copy leaves every source record at its offset once; and
``kqlite mirror promote`` makes the topic writable through ZooKeeper's config. Default
run: about 25 s."""

import asyncio
import glob
import os
import struct
import sys
import threading
import time

import pytest

pytest.importorskip("kazoo.client")
from confluent_kafka import Producer  # noqa: E402

from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewPartitions, NewTopic  # noqa: E402

from kqlite.format.batch import build_batch  # noqa: E402
from kqlite.mirror import PreservingMirror  # noqa: E402
from kqlite.mirror.client import ClusterClient, MirrorClientError  # noqa: E402
from kqlite.mirror.preserve import whole_batches  # noqa: E402
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402

from mirror_helpers import kqlite_broker, wait_for  # noqa: E402
from test_mirror_preserve import _log, _mode, _produce, _promote, _settings  # noqa: E402

_CLUSTER_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster")
sys.path.insert(0, _CLUSTER_TESTS)
from cluster_processes import request, running_cluster  # noqa: E402

PARTITIONS = 3
WAIT = 90


def _batches(data):
    out, pos = [], 0
    while pos + 61 <= len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        out.append(bytes(data[pos:pos + size]))
        pos += size
    return out


def _apart_from_epoch(data):
    """Each batch without its partitionLeaderEpoch (bytes 12-15, outside the CRC)."""
    return [b[:12] + b[16:] for b in _batches(data)]


def _producer_ids(data):
    return {struct.unpack_from(">q", b, 43)[0] for b in _batches(data)}


def _epochs(data):
    return [struct.unpack_from(">i", b, 12)[0] for b in _batches(data)]


def _replica_bytes(broker, partition):
    """The batches a target broker holds on disk for ``orders-partition``, from its first
    segment (no test here moves a log start before reading them)."""
    files = sorted(glob.glob(os.path.join(broker.data_dir, f"orders-{partition}", "*.log")))
    data = b""
    for name in files:
        with open(name, "rb") as f:
            data += f.read()
    return whole_batches(data)[0]


def _same_apart_from_epoch(source, target, partition):
    try:
        s, t = _log(source, "orders", partition), _log(target, "orders", partition)
    except MirrorClientError:      # the target's metadata still names a killed leader
        return False
    return t is not None and s[0] == t[0] and _apart_from_epoch(s[1]) == _apart_from_epoch(t[1])


async def _ask(bootstrap, fn, client_id="an-admin"):
    """``fn(client)`` with a client of the target that is not the mirror."""
    client = ClusterClient(bootstrap, client_id=client_id)
    try:
        await client.refresh(["orders"])
        return await fn(client)
    finally:
        await client.close()


def _code(bootstrap, fn, client_id="an-admin"):
    try:
        asyncio.run(_ask(bootstrap, fn, client_id))
    except MirrorClientError as exc:
        return exc.code
    return ErrorCode.NONE


async def _alter_retention(client):
    body = await client.any_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": 2, "resource_name": "orders", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}],
        "validate_only": False}, (0, 1))
    (r,) = body["responses"]
    if r["error_code"]:
        raise MirrorClientError(r["error_message"], r["error_code"])


def _produce_raw(broker, partition):
    """A producer's Produce to one target broker: (error code, message)."""
    body = request(broker, ApiKey.PRODUCE, 8, {
        "transactional_id": None, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": "orders", "partition_data": [
            {"index": partition, "records": build_batch([b"forbidden"])}]}]})
    p = body["responses"][0]["partition_responses"][0]
    return p["error_code"], p["error_message"]


def _leaders_of(bootstrap, partitions):
    async def leaders(client):
        return {p: client.leaders[("orders", p)] for p in range(partitions)}
    return wait_for(lambda: (lambda found: found if min(found.values()) > 0 else None)(
        asyncio.run(_ask(bootstrap, leaders))), "the leaders known", WAIT)


def _leaders(bootstrap):
    return _leaders_of(bootstrap, PARTITIONS)


_ROUND = 100


class _Rounds(threading.Thread):
    """An idempotent producer writing rounds of records to one source partition."""

    def __init__(self, bootstrap, partition, rounds=25):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True})
        self.partition, self.rounds, self.failures = partition, rounds, []

    def run(self):
        for r in range(self.rounds):
            for i in range(_ROUND):
                self.producer.produce("orders", b"late-%02d-%03d" % (r, i),
                                      partition=self.partition,
                                      callback=lambda err, _m: err and self.failures.append(err))
            self.producer.flush(WAIT)
            time.sleep(0.05)


def _end(bootstrap, partition):
    async def end(client):
        tp = ("orders", partition)
        return (await client.list_offsets([tp], -1))[tp]
    try:
        return asyncio.run(_ask(bootstrap, end))
    except MirrorClientError:
        return -1


def _partitions(bootstrap):
    async def count(client):
        return client.partitions.get("orders", 0)
    return asyncio.run(_ask(bootstrap, count))


def _committed(bootstrap, group):
    try:
        return asyncio.run(_ask(bootstrap, lambda c: c.committed(group)))
    except MirrorClientError as exc:    # the offsets topic is still being created
        assert exc.retriable, exc
        return None


def test_preserve_into_a_three_broker_cluster(tmp_path, zk_hosts, run_mirror):
    source = kqlite_broker(tmp_path / "source")
    a = source.bootstrap
    try:
        # A short ZooKeeper session: the killed leader's is over, and its partitions led
        # elsewhere, within seconds.
        with running_cluster(tmp_path, zk_hosts,
                             ["--zookeeper-session-timeout-ms", "2000"]) as cluster:
            b = cluster.bootstrap
            assert _mode(a, b) == "preserve"
            KafkaAdminClient(bootstrap_servers=a).create_topics(
                [NewTopic("orders", PARTITIONS, 1)])
            for p in range(PARTITIONS):
                assert not _produce(a, "orders", [b"p%d-%04d" % (p, i) for i in range(200)],
                                    **{"enable.idempotence": True})
            asyncio.run(_ask(a, lambda c: c.commit("billing", {("orders", 0): (42, "m")})))
            running = run_mirror(PreservingMirror(_settings(a, b, topics="orders",
                                                            replication_factor=3)))
            for p in range(PARTITIONS):
                wait_for(lambda: _same_apart_from_epoch(a, b, p), f"orders-{p} copied", WAIT)
            # Byte for byte on every replica, apart from the epoch the target stamped.
            for p in range(PARTITIONS):
                source_batches = _apart_from_epoch(_log(a, "orders", p)[1])
                for broker in cluster.brokers.values():
                    wait_for(lambda: _apart_from_epoch(_replica_bytes(broker, p))
                             == source_batches,
                             f"orders-{p} on broker {broker.broker_id}", WAIT)
            # Group offsets reach the cluster's coordinator as they are.
            wait_for(lambda: _committed(b, "billing") == {("orders", 0): (42, "m")},
                     "billing's offsets on the target", WAIT)

            # Every broker leads a partition, and every leader refuses a producer.
            leaders = _leaders(b)
            assert sorted(leaders.values()) == [1, 2, 3]
            for p, leader in leaders.items():
                code, message = _produce_raw(cluster[leader], p)
                assert code == ErrorCode.INVALID_REQUEST and "mirror of A" in message
            # DeleteRecords, CreatePartitions and config changes: the mirror's only.
            tp = ("orders", 0)
            assert _code(b, lambda c: c.delete_records(tp, 10)) == ErrorCode.POLICY_VIOLATION
            assert _code(b, lambda c: c.grow_topic("orders", 4)) == ErrorCode.POLICY_VIOLATION
            assert _code(b, _alter_retention) == ErrorCode.POLICY_VIOLATION
            # The mirror's own DeleteRecords is taken: the source's log start is followed.
            asyncio.run(_ask(a, lambda c: c.delete_records(tp, 10)))
            wait_for(lambda: _log(b, "orders", 0)[0] == 10, "the log start followed", WAIT)
            # ... and so is its CreatePartitions, when the source grew.
            KafkaAdminClient(bootstrap_servers=a).create_partitions(
                {"orders": NewPartitions(PARTITIONS + 1)})
            wait_for(lambda: _partitions(b) == PARTITIONS + 1, "the target grown", WAIT)

            # The leader of orders-1 SIGKILLed while records are produced and copied.
            producer = _Rounds(a, partition=1)
            producer.start()
            wait_for(lambda: _end(b, 1) >= 200 + 3 * _ROUND, "copying under way", WAIT)
            cluster[leaders[1]].kill()
            producer.join(WAIT)
            assert producer.failures == []
            b = cluster.bootstrap       # the survivors
            for p in range(PARTITIONS):
                wait_for(lambda: _same_apart_from_epoch(a, b, p),
                         f"orders-{p} copied after the kill", WAIT)
            survivors = [x for x in cluster.brokers.values() if x.alive]
            for p in range(PARTITIONS):
                source_batches = _apart_from_epoch(_log(a, "orders", p)[1])
                for broker in survivors:
                    if p == 0:
                        continue      # its log start moved: the disk holds more
                    wait_for(lambda: _apart_from_epoch(_replica_bytes(broker, p))
                             == source_batches,
                             f"orders-{p} on broker {broker.broker_id} after the kill", WAIT)
            # Epochs are the target's, and never go back along the log.
            epochs = _epochs(_log(b, "orders", 1)[1])
            assert epochs == sorted(epochs) and epochs[-1] >= 1
            # The new leader holds the mark too: it came with ZooKeeper's config.
            moved = _leaders_of(b, PARTITIONS)[1]
            assert moved != leaders[1]
            assert _produce_raw(cluster[moved], 1)[0] == ErrorCode.INVALID_REQUEST
            running.stop()

            promoted = _promote(a, b, "orders")
            assert promoted.returncode == 0, promoted.stderr
            assert not _produce(b, "orders", [b"after"])
            assert _code(b, _alter_retention) == ErrorCode.NONE
            # No broker hands out a producer id a mirrored batch carries.
            copied = max(set().union(*(_producer_ids(_log(a, "orders", p)[1])
                                       for p in range(PARTITIONS))))
            for broker in survivors:
                answer = request(broker, ApiKey.INIT_PRODUCER_ID, 1, {
                    "transactional_id": None, "transaction_timeout_ms": 60000})
                assert answer["error_code"] == 0 and answer["producer_id"] > copied
    finally:
        source.stop()


@pytest.mark.soak
def test_preserve_into_a_cluster_through_repeated_leader_kills(tmp_path, zk_hosts, run_mirror):
    """Five rounds: the target's leader of the partition being written SIGKILLed, the one
    killed before started again (it comes back as a follower, truncating what it had that
    the new leader did not); at the end every replica, the restarted ones included, holds
    the source's batches at their offsets, apart from the target's epochs."""
    from test_mirror_faults import _restart
    source = kqlite_broker(tmp_path / "source")
    a = source.bootstrap
    try:
        with running_cluster(tmp_path, zk_hosts,
                             ["--zookeeper-session-timeout-ms", "2000"]) as cluster:
            b = cluster.bootstrap
            KafkaAdminClient(bootstrap_servers=a).create_topics([NewTopic("orders", 1, 1)])
            running = run_mirror(PreservingMirror(_settings(a, b, topics="orders",
                                                            replication_factor=3)))
            producer = _Rounds(a, partition=0, rounds=150)
            producer.start()
            killed = None
            for _ in range(5):
                if killed is not None:
                    _restart(killed)
                wait_for(lambda: _end(cluster.bootstrap, 0) > 0, "copying under way", WAIT)
                leader = _leaders_of(cluster.bootstrap, 1)[0]
                killed = cluster[leader]
                killed.kill()
                time.sleep(1.0)
            _restart(killed)
            producer.join(WAIT)
            assert producer.failures == []
            b = cluster.bootstrap
            wait_for(lambda: _same_apart_from_epoch(a, b, 0), "orders-0 copied", WAIT)
            source_batches = _apart_from_epoch(_log(a, "orders", 0)[1])
            for broker in cluster.brokers.values():
                wait_for(lambda: _apart_from_epoch(_replica_bytes(broker, 0)) == source_batches,
                         f"orders-0 on broker {broker.broker_id}", WAIT)
            epochs = _epochs(_log(b, "orders", 0)[1])
            # How many of the five kills land while batches are still being copied
            # depends on the machine's speed; at least the first does (copying is under
            # way when it comes), so the log carries two epochs or more, never going back.
            assert epochs == sorted(epochs) and len(set(epochs)) >= 2
            running.stop()
    finally:
        source.stop()


# -- The mirror's side of a cluster target, against stand-ins (no process) ---------------

class _Target:
    """A target answering the probe with ``codes`` in turn; a topic whose log ends it
    cannot give until ``known`` refreshes have gone by."""

    timeout = 1.0

    def __init__(self, codes=(), known=0):
        self.codes, self.known, self.refreshes = list(codes), known, 0
        self.partitions = {"orders": 1}

    async def refresh(self, topics=None):
        self.refreshes += 1

    async def controller_request(self, api_key, body, versions, code_of=None):
        marked, unknown = (t["name"] for t in body["topics"])
        code = self.codes.pop(0)
        return {"topics": [{"name": marked, "error_code": code},
                           {"name": unknown, "error_code": ErrorCode.INVALID_CONFIG}]}

    async def topic_configs(self, topic):
        return [{"name": "kqlite.mirror.source", "value": "A"}]

    async def list_offsets(self, tps, timestamp):
        if self.refreshes <= self.known:
            raise MirrorClientError("orders-0 has no leader now", ErrorCode.LEADER_NOT_AVAILABLE)
        return {tp: 5 for tp in tps}


def test_the_probe_reads_the_answer_of_the_mark_and_of_an_unknown_config():
    from kqlite.mirror import preserve
    assert asyncio.run(preserve.knows_mirror_topics(_Target([ErrorCode.NONE])))
    assert not asyncio.run(preserve.knows_mirror_topics(_Target([ErrorCode.INVALID_CONFIG])))


class _MovingController(ClusterClient):
    """Broker 1 is named controller but answers NOT_CONTROLLER; the next Metadata names
    broker 2, which answers."""

    def __init__(self):
        super().__init__("127.0.0.1:1", name="target")
        self.brokers, self.controller = {1: ("b1", 1), 2: ("b2", 2)}, 1
        self.asked = []

    async def request(self, address, api_key, body, versions=None):
        self.asked.append(address)
        code = ErrorCode.NOT_CONTROLLER if address == ("b1", 1) else ErrorCode.NONE
        return {"topics": [{"name": "t", "error_code": code}]}

    async def refresh(self, topics=None):
        self.controller = 2


def test_a_controller_request_asks_again_when_the_controller_moved():
    client = _MovingController()
    answer = asyncio.run(client.controller_request(
        ApiKey.CREATE_TOPICS, {}, code_of=lambda a: a["topics"][0]["error_code"]))
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE
    assert client.asked == [("b1", 1), ("b2", 2)]


def test_a_topic_without_known_leaders_is_taken_at_the_next_refresh():
    async def scenario():
        mirror = PreservingMirror(_settings("127.0.0.1:1", "127.0.0.1:1", topics="orders"))
        mirror.source, mirror.target = _Target(), _Target(known=2)
        await mirror._refresh()          # the target's metadata has no leader yet
        assert mirror.positions == {} and "orders" not in mirror.mirrored
        await mirror._refresh()
        return mirror.positions
    assert asyncio.run(scenario()) == {("orders", 0): 5}
