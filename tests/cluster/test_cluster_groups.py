"""Consumer groups over three real ``kqlite serve --zookeeper`` brokers: the coordinator
of a group is the leader of its ``__consumer_offsets`` partition (replication factor 3),
so commits survive the coordinator's SIGKILL, and the other brokers answer
NOT_COORDINATOR. Driven by confluent-kafka, kafka-python and aiokafka, each group's
records produced with acks=all by the same client that consumes them; commits that
kqlite's legacy placement left in another partition reach the group's coordinator; one
cluster for the whole module."""

import asyncio
import threading
import time

import pytest

from kqlite.format.batch import build_batch, decode_batch
from kqlite.format.internal_topics import (OFFSETS_TOPIC, kafka_partition_for_key,
                                           legacy_partition_for_key)
from kqlite.format.offset_records import (decode_offset_key, encode_offset_key,
                                          encode_offset_value)
from kqlite.format.record import Record
from kqlite.protocol import ApiKey, ErrorCode

from acks_all_producers import AiokafkaProducer, ConfluentProducer, KafkaPythonProducer
from cluster_processes import QUICK_EXPIRY, request as _request, running_cluster, until

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

WAIT = 90   # seconds: liveness guards only, never a pass/fail timing
OFFSETS_PARTITIONS = 10     # fewer than Kafka's 50: the module starts faster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zk_module_hosts):
    with running_cluster(tmp_path_factory.mktemp("groups"), zk_module_hosts,
                         ["--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
                          "--default-replication-factor", "3", *QUICK_EXPIRY]) as c:
        yield c


def _coordinator_seen_by(broker, group):
    """(error, node id) of FindCoordinator v1 sent to ``broker``."""
    answer = _request(broker, ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
    return answer["error_code"], answer["node_id"]


def _coordinator(cluster, group):
    """The coordinator every live broker names (they agree), once there is one among them."""
    def agreed():
        seen = {_coordinator_seen_by(b, group) for b in cluster.brokers.values() if b.alive}
        if len(seen) == 1:
            code, node = seen.pop()
            if code == ErrorCode.NONE and cluster[node].alive:
                return node
        return None
    return until(agreed, f"one coordinator for group {group!r}")


def _committed(broker, group, topic, partitions):
    answer = _request(broker, ApiKey.OFFSET_FETCH, 5, {
        "group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}],
        "require_stable": False})
    return answer["error_code"], {p["partition_index"]: p["committed_offset"]
                                  for t in answer["topics"] for p in t["partitions"]}


def _create(cluster, topic, partitions=3):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 3,
                                            config={"min.insync.replicas": "2"})],
                                  request_timeout=60)
    futures[topic].result(timeout=WAIT)
    until(lambda: all(p.leader >= 0 for p in
                      admin.list_topics(topic, timeout=10).topics[topic].partitions.values()),
          f"leaders for {topic}")


def _produce(cluster, topic, values, client=ConfluentProducer):
    """``values`` produced with acks=all and idempotence by ``client`` (a class of
    acks_all_producers), keyed so that they spread over the partitions."""
    producer = client(cluster.bootstrap, topic)
    try:
        producer.send(values, keys=[str(i) for i in range(len(values))])
        producer.flush()
    finally:
        producer.close()
    assert producer.failed == [] and sorted(producer.acked) == sorted(values)


def _check_commits_everywhere(cluster, group, topic, partitions, total):
    """Every broker names the same coordinator; it holds commits adding up to ``total``;
    the others refuse the OffsetFetch with NOT_COORDINATOR."""
    coordinator = _coordinator(cluster, group)
    code, offsets = _committed(cluster[coordinator], group, topic, range(partitions))
    assert code == ErrorCode.NONE and sum(offsets.values()) == total, offsets
    for b, broker in cluster.brokers.items():
        if b != coordinator and broker.alive:
            assert _committed(broker, group, topic, range(partitions))[0] == \
                ErrorCode.NOT_COORDINATOR
    return coordinator


# -- confluent-kafka ---------------------------------------------------------------------------

def _confluent_member(cluster, group):
    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})


def _confluent_consume(members, expected):
    """Poll the members in turn, committing each record synchronously, until ``expected``
    records arrived; then a little longer, so that a duplicate would show."""
    values = []
    deadline = time.monotonic() + WAIT
    quiet_until = None
    while time.monotonic() < deadline:
        got = False
        for m in members:
            # A short wait: a member whose partitions are drained would otherwise cost
            # the whole timeout on each turn while the other still has records.
            msg = m.poll(0.02)
            if msg is None or msg.error():
                continue
            got = True
            values.append(msg.value().decode())
            m.commit(message=msg, asynchronous=False)
        if len(values) >= expected:
            quiet_until = quiet_until or time.monotonic() + 2
            if time.monotonic() > quiet_until and not got:
                break
    return values


def _confluent_wait_assigned(members, partitions):
    def assigned():
        for m in members:
            m.poll(0.1)
        return sum(len(m.assignment()) for m in members) == partitions \
            and all(m.assignment() for m in members)
    until(assigned, "the group's partitions spread over its members")


def test_confluent_kafka_group_consumes_each_record_once_and_commits_are_replicated(cluster):
    topic, group = "cf-orders", "cf-group"
    _create(cluster, topic)
    members = [_confluent_member(cluster, group) for _ in range(2)]
    try:
        for m in members:
            m.subscribe([topic])
        _confluent_wait_assigned(members, 3)
        values = [f"cf-{i}" for i in range(300)]
        _produce(cluster, topic, values)
        seen = _confluent_consume(members, len(values))
    finally:
        for m in members:
            m.close()
    assert sorted(seen) == sorted(values)
    _check_commits_everywhere(cluster, group, topic, 3, len(values))


# -- kafka-python ------------------------------------------------------------------------------

def test_kafka_python_group_consumes_each_record_once_and_commits_are_replicated(cluster):
    kafka = pytest.importorskip("kafka")
    topic, group = "kp-orders", "kp-group"
    _create(cluster, topic)
    values = [f"kp-{i}" for i in range(300)]
    seen, stop, assigned = [], threading.Event(), {}
    errors = []

    def member(name):
        # One thread per member: kafka-python joins inside poll(), so two members polled
        # from one thread would wait for each other's rejoin.
        m = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap.split(","),
                                group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=10000,
                                heartbeat_interval_ms=500)
        try:
            m.subscribe([topic])
            while not stop.is_set():
                batches = m.poll(timeout_ms=200)
                assigned[name] = len(m.assignment())
                for records in batches.values():
                    seen.extend(r.value.decode() for r in records)
                if batches:
                    m.commit()
        except Exception as exc:      # noqa: BLE001 -- reported by the test thread
            errors.append(exc)
        finally:
            m.close()

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in "ab"]
    for t in threads:
        t.start()
    try:
        until(lambda: len(assigned) == 2 and all(assigned.values())
              and sum(assigned.values()) == 3, "kafka-python members share the partitions")
        _produce(cluster, topic, values, KafkaPythonProducer)
        until(lambda: len(seen) >= len(values), "every record consumed")
        time.sleep(1)                     # a duplicate would show up meanwhile
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    assert sorted(seen) == sorted(values)
    _check_commits_everywhere(cluster, group, topic, 3, len(values))


# -- aiokafka ---------------------------------------------------------------------------------

def test_aiokafka_group_consumes_each_record_once_and_commits_are_replicated(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic, group = "ak-orders", "ak-group"
    _create(cluster, topic)
    values = [f"ak-{i}" for i in range(300)]

    async def main():
        members = [aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=cluster.bootstrap, group_id=group,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=10000, heartbeat_interval_ms=500) for _ in range(2)]
        seen = []
        for m in members:
            await m.start()
        try:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and not (
                    sum(len(m.assignment()) for m in members) == 3
                    and all(m.assignment() for m in members)):
                await asyncio.gather(*(m.getmany(timeout_ms=100) for m in members))
            # aiokafka's producer runs on a loop of its own (see acks_all_producers).
            await asyncio.get_running_loop().run_in_executor(None, _produce, cluster, topic,
                                                             values, AiokafkaProducer)

            async def consume(m):
                while len(seen) < len(values) and time.monotonic() < deadline:
                    batches = await m.getmany(timeout_ms=200)
                    for records in batches.values():
                        seen.extend(r.value.decode() for r in records)
                    if batches:
                        await m.commit()
            await asyncio.gather(*(consume(m) for m in members))
            for m in members:             # a duplicate would show up here
                for records in (await m.getmany(timeout_ms=1000)).values():
                    seen.extend(r.value.decode() for r in records)
        finally:
            for m in members:
                await m.stop()
        return seen

    seen = asyncio.run(main())
    assert sorted(seen) == sorted(values)
    _check_commits_everywhere(cluster, group, topic, 3, len(values))


# -- NOT_COORDINATOR ----------------------------------------------------------------------------

def test_a_broker_that_does_not_lead_the_groups_partition_answers_not_coordinator(cluster):
    group = "raw-group"
    coordinator = _coordinator(cluster, group)
    other = next(b for b in cluster.brokers.values() if b.broker_id != coordinator)
    join = _request(other, ApiKey.JOIN_GROUP, 5, {
        "group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]})
    assert join["error_code"] == ErrorCode.NOT_COORDINATOR
    beat = _request(other, ApiKey.HEARTBEAT, 3, {"group_id": group, "generation_id": 1,
                                          "member_id": "m", "group_instance_id": None})
    assert beat["error_code"] == ErrorCode.NOT_COORDINATOR
    commit = _request(other, ApiKey.OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "cf-orders", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    assert commit["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_COORDINATOR
    # The coordinator itself takes the same commit (a group without members).
    commit = _request(cluster[coordinator], ApiKey.OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "cf-orders", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    assert commit["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    assert _committed(cluster[coordinator], group, "cf-orders", [0]) == (ErrorCode.NONE, {0: 1})


# -- The coordinator dies ------------------------------------------------------------------------

def test_killing_the_coordinator_keeps_the_commits_and_the_group_goes_on(cluster):
    topic, group = "kill-orders", "kill-group"
    _create(cluster, topic)
    first = [f"a-{i}" for i in range(200)]
    _produce(cluster, topic, first)
    member = _confluent_member(cluster, group)
    try:
        member.subscribe([topic])
        _confluent_wait_assigned([member], 3)
        seen = _confluent_consume([member], len(first))
    finally:
        member.close()
    assert sorted(seen) == sorted(first)
    coordinator = _check_commits_everywhere(cluster, group, topic, 3, len(first))
    cluster[coordinator].kill()
    # Once the controller moved the offsets partition's leadership away:
    survivor = _coordinator(cluster, group)
    # The new coordinator loaded the replicated commits.
    def loaded():
        code, offsets = _committed(cluster[survivor], group, topic, range(3))
        return code == ErrorCode.NONE and sum(offsets.values()) == len(first)
    until(loaded, "the commits on the new coordinator")
    second = [f"b-{i}" for i in range(100)]
    _produce(cluster, topic, second)
    member = _confluent_member(cluster, group)
    try:
        member.subscribe([topic])
        seen = _confluent_consume([member], len(second))
    finally:
        member.close()
    # Nothing committed is read again: only the records produced after the kill.
    assert sorted(seen) == sorted(second)
    cluster[coordinator].start().wait_listening()


# -- Commits left by the legacy placement -------------------------------------------------------

def _leader(cluster, topic, index):
    """The broker that leads ``topic``-``index`` (Metadata from a live broker)."""
    def known():
        broker = next(b for b in cluster.brokers.values() if b.alive)
        answer = _request(broker, ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
        leaders = {p["partition_index"]: p["leader_id"] for t in answer["topics"]
                   for p in t["partitions"]}
        leader = leaders.get(index, -1)
        return cluster[leader] if leader > 0 and cluster[leader].alive else None
    return until(known, f"a live leader of {topic}-{index}")


def test_commits_left_by_the_legacy_placement_reach_the_groups_new_coordinator(cluster):
    topic, group = "legacy-orders", "my-group"
    kafka = kafka_partition_for_key(group, OFFSETS_PARTITIONS)
    legacy = legacy_partition_for_key(group, OFFSETS_PARTITIONS)
    assert (kafka, legacy) == (2, 6)         # its hash is negative: the two rules differ
    _create(cluster, topic, partitions=2)
    coordinator = _coordinator(cluster, group)
    # What an older kqlite wrote: commits in the partition its rule named, acks=all.
    written = _request(_leader(cluster, OFFSETS_TOPIC, legacy), ApiKey.PRODUCE, 3, {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [{
            "name": OFFSETS_TOPIC, "partition_data": [{"index": legacy, "records": build_batch(
                [Record(key=encode_offset_key(group, topic, p), value=encode_offset_value(o))
                 for p, o in ((0, 5), (1, 7))])}]}]})
    assert written["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE
    # A commit made since, under Kafka's rule, wins over the legacy one of partition 0.
    until(lambda: _request(cluster[coordinator], ApiKey.OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 9, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})["topics"][0]["partitions"][0]["error_code"] ==
          ErrorCode.NONE, "a commit once the coordinator has loaded the group's partition")
    cluster[coordinator].kill()
    survivor = _coordinator(cluster, group)
    until(lambda: _committed(cluster[survivor], group, topic, range(2)) ==
          (ErrorCode.NONE, {0: 9, 1: 7}), "the legacy commit of partition 1 on the new "
          "coordinator, beside the newer one of partition 0")
    # And tombstoned where the legacy rule had put them.
    fetched = _request(_leader(cluster, OFFSETS_TOPIC, legacy), ApiKey.FETCH, 4, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "topics": [{"topic": OFFSETS_TOPIC, "partitions": [
            {"partition": legacy, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    data, latest, pos = bytes(fetched["responses"][0]["partitions"][0]["records"]), {}, 0
    while pos < len(data):
        header, records = decode_batch(data, pos)
        latest.update((decode_offset_key(r.key), r.value) for r in records)
        pos += header.size
    assert {key: value for key, value in latest.items() if key and key[0] == group} == {
        (group, topic, 0): None, (group, topic, 1): None}
    cluster[coordinator].start().wait_listening()
