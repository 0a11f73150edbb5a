"""DeleteGroups and OffsetDelete with Kafka's answers: only an Empty group is deleted,
offsets of topics a live consumer group subscribes to stay, and what is deleted stays
deleted after a broker restart and for the embedded API (tombstones in
``__consumer_offsets``). Real admin clients (librdkafka, kafka-python) and raw frames."""

import struct
import time

import pytest

import kqlite

from broker_process import BrokerProcess, RawClient, unique

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402

WAIT_S = 60   # a generous bound on the clients' group joins: a hang fails the test


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data")
    b.data = tmp_path / "data"
    yield b
    b.stop()


def create(c, *topics):
    reply = c.call(ApiKey.CREATE_TOPICS, 5,
                   {"topics": [{"name": t, "num_partitions": 2, "replication_factor": 1,
                                "assignments": [], "configs": []} for t in topics],
                    "timeout_ms": 10000, "validate_only": False})
    assert {t["error_code"] for t in reply["topics"]} == {ErrorCode.NONE}


def commit(c, group, offsets, generation=-1, member=""):
    topics = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                         "committed_leader_epoch": -1,
                                         "committed_metadata": "m"})
    reply = c.call(ApiKey.OFFSET_COMMIT, 8,
                   {"group_id": group, "generation_id_or_member_epoch": generation,
                    "member_id": member, "group_instance_id": None,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    assert {p["error_code"] for t in reply["topics"] for p in t["partitions"]} == {0}


def committed(c, group):
    reply = c.call(ApiKey.OFFSET_FETCH, 7,
                   {"group_id": group, "topics": None, "require_stable": False})
    return {(t["name"], p["partition_index"]): p["committed_offset"]
            for t in reply["topics"] for p in t["partitions"]}


def delete_groups(c, groups, version=2):
    reply = c.call(ApiKey.DELETE_GROUPS, version, {"groups_names": groups})
    return [(r["group_id"], r["error_code"]) for r in reply["results"]]


def offset_delete(c, group, partitions):
    topics = {}
    for t, p in partitions:
        topics.setdefault(t, []).append({"partition_index": p})
    reply = c.call(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": t, "partitions": ps} for t, ps in topics.items()]})
    return reply["error_code"], {(t["name"], p["partition_index"]): p["error_code"]
                                 for t in reply["topics"] for p in t["partitions"]}


def join(c, group, topics, protocol_type="consumer"):
    """A one-member group, Stable, whose subscription names ``topics`` (ConsumerProtocol v0
    layout)."""
    sub = struct.pack(">hi", 0, len(topics))
    for t in topics:
        sub += struct.pack(">h", len(t)) + t.encode()
    sub += struct.pack(">i", -1)
    joined = c.call(ApiKey.JOIN_GROUP, 0,
                    {"group_id": group, "session_timeout_ms": 30000, "member_id": "",
                     "protocol_type": protocol_type,
                     "protocols": [{"name": "range", "metadata": sub}]})
    assert joined["error_code"] == ErrorCode.NONE
    synced = c.call(ApiKey.SYNC_GROUP, 0,
                    {"group_id": group, "generation_id": joined["generation_id"],
                     "member_id": joined["member_id"], "assignments": [
                         {"member_id": joined["member_id"], "assignment": b""}]})
    assert synced["error_code"] == ErrorCode.NONE
    return joined["member_id"], joined["generation_id"]


def leave(c, group, member):
    assert c.call(ApiKey.LEAVE_GROUP, 0,
                  {"group_id": group, "member_id": member})["error_code"] == 0


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_groups_raw(broker, version):
    c = RawClient(broker)
    create(c, "t")
    commit(c, "offsets-only", {("t", 0): 5, ("t", 1): 6})
    member, generation = join(c, "live", ["t"])
    assert delete_groups(c, ["offsets-only", "live", "never", "offsets-only"], version) == [
        ("offsets-only", ErrorCode.NONE), ("live", ErrorCode.NON_EMPTY_GROUP),
        ("never", ErrorCode.GROUP_ID_NOT_FOUND)]
    assert committed(c, "offsets-only") == {}
    assert delete_groups(c, ["offsets-only"], version) == [
        ("offsets-only", ErrorCode.GROUP_ID_NOT_FOUND)]
    # Once its last member leaves the group is Empty, and can go with its offsets.
    commit(c, "live", {("t", 0): 1}, generation, member)
    leave(c, "live", member)
    assert delete_groups(c, ["live"], version) == [("live", ErrorCode.NONE)]
    assert committed(c, "live") == {}
    assert delete_groups(c, ["live"], version) == [("live", ErrorCode.GROUP_ID_NOT_FOUND)]
    c.close()


def test_deleted_groups_stay_deleted_after_a_restart_and_for_the_embedded_api(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data)
    try:
        c = RawClient(b)
        create(c, "t")
        commit(c, "gone", {("t", 0): 5})
        commit(c, "kept", {("t", 1): 7})
        member, generation = join(c, "was-live", ["t"])
        commit(c, "was-live", {("t", 0): 3}, generation, member)
        leave(c, "was-live", member)
        assert delete_groups(c, ["gone", "was-live"]) == [("gone", 0), ("was-live", 0)]
        c.close()
    finally:
        b.stop()
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        assert db.offsets.committed("gone") == {} == db.offsets.committed("was-live")
        assert db.offsets.committed("kept") == {("t", 1): 7}
    b = BrokerProcess(data)
    try:
        c = RawClient(b)
        assert committed(c, "gone") == {} == committed(c, "was-live")
        assert committed(c, "kept") == {("t", 1): 7}
        assert delete_groups(c, ["gone", "was-live"]) == [
            ("gone", ErrorCode.GROUP_ID_NOT_FOUND), ("was-live", ErrorCode.GROUP_ID_NOT_FOUND)]
        listed = {g["group_id"] for g in c.call(ApiKey.LIST_GROUPS, 3, {})["groups"]}
        assert "kept" in listed and not {"gone", "was-live"} & listed
        c.close()
    finally:
        b.stop()


def test_offset_delete_of_an_empty_group(broker):
    c = RawClient(broker)
    create(c, "t", "u")
    commit(c, "e", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    assert offset_delete(c, "e", [("t", 0), ("t", 7), ("nope", 0), ("u", 1)]) == (0, {
        ("t", 0): ErrorCode.NONE, ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("u", 1): ErrorCode.NONE})
    assert committed(c, "e") == {("t", 1): 2, ("u", 0): 3}
    assert offset_delete(c, "never", [("t", 0)]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
    # A group left without offsets is gone.
    assert offset_delete(c, "e", [("t", 1), ("u", 0)])[0] == ErrorCode.NONE
    assert offset_delete(c, "e", [("t", 1)]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
    assert delete_groups(c, ["e"]) == [("e", ErrorCode.GROUP_ID_NOT_FOUND)]
    c.close()
    with kqlite.open(broker.data, retention_check_interval_ms=0) as db:
        assert db.offsets.committed("e") == {}


def test_offset_delete_removes_an_emptied_group_with_its_last_offsets(broker):
    c = RawClient(broker)
    create(c, "t")
    member, generation = join(c, "left", ["t"])
    commit(c, "left", {("t", 0): 1, ("t", 1): 2}, generation, member)
    leave(c, "left", member)
    assert offset_delete(c, "left", [("t", 0)]) == (0, {("t", 0): ErrorCode.NONE})
    assert delete_groups(c, ["left"]) == [("left", ErrorCode.NONE)]     # still there
    member, generation = join(c, "left2", ["t"])
    commit(c, "left2", {("t", 0): 1}, generation, member)
    leave(c, "left2", member)
    assert offset_delete(c, "left2", [("t", 0)]) == (0, {("t", 0): ErrorCode.NONE})
    assert delete_groups(c, ["left2"]) == [("left2", ErrorCode.GROUP_ID_NOT_FOUND)]
    c.close()


def test_offset_delete_keeps_the_topics_a_live_group_subscribes_to(broker):
    c = RawClient(broker)
    create(c, "t", "u")
    member, generation = join(c, "live", ["t"])
    commit(c, "live", {("t", 0): 1, ("u", 0): 2}, generation, member)
    assert offset_delete(c, "live", [("t", 0), ("u", 0)]) == (0, {
        ("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): ErrorCode.NONE})
    assert committed(c, "live") == {("t", 0): 1}
    c.close()


def test_offset_delete_of_a_live_group_that_is_not_a_consumer_group(broker):
    c = RawClient(broker)
    create(c, "t")
    member, generation = join(c, "connect-like", ["t"], protocol_type="connect")
    commit(c, "connect-like", {("t", 0): 1}, generation, member)
    assert offset_delete(c, "connect-like", [("t", 0)]) == (ErrorCode.NON_EMPTY_GROUP, {})
    assert committed(c, "connect-like") == {("t", 0): 1}
    c.close()


def _consume_until_assigned(consumer, deadline):
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer was never assigned partitions"
        consumer.poll(0.2)


def test_confluent_kafka_delete_consumer_groups(broker):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    topic = unique("dg-ck")
    idle, busy = unique("idle"), unique("busy")
    c = RawClient(broker)
    create(c, topic)
    commit(c, idle, {(topic, 0): 4})
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": busy,
                            "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        _consume_until_assigned(consumer, time.monotonic() + WAIT_S)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.delete_consumer_groups([idle, busy, unique("none")],
                                               request_timeout=WAIT_S)
        outcome = {}
        for group, future in futures.items():
            try:
                future.result(WAIT_S)
                outcome[group] = "ok"
            except ck.KafkaException as exc:
                outcome[group] = exc.args[0].code()
        assert outcome[idle] == "ok"
        assert outcome[busy] == ck.KafkaError.NON_EMPTY_GROUP
        assert set(outcome.values()) == {"ok", ck.KafkaError.NON_EMPTY_GROUP,
                                         ck.KafkaError.GROUP_ID_NOT_FOUND}
    finally:
        consumer.close()
    assert committed(c, idle) == {}
    c.close()


def test_kafka_python_delete_groups_and_group_offsets(broker):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError
    from kafka.structs import TopicPartition
    topic = unique("dg-kp")
    c = RawClient(broker)
    create(c, topic)
    commit(c, "kp-a", {(topic, 0): 1, (topic, 1): 2})
    commit(c, "kp-b", {(topic, 0): 3})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.delete_group_offsets("kp-a", [TopicPartition(topic, 0)])
        assert {tp: err.__name__ for tp, err in result.items()} == {
            TopicPartition(topic, 0): "NoError"}
        assert committed(c, "kp-a") == {(topic, 1): 2}
        assert admin.delete_groups(["kp-b", "kp-none"]) == {
            "kp-b": "OK", "kp-none": "GroupIdNotFoundError"}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("kp-b", [TopicPartition(topic, 0)])
    finally:
        admin.close()
    assert committed(c, "kp-b") == {}
    c.close()
    del kafka
