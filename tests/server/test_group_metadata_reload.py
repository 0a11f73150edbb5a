"""Group metadata in ``__consumer_offsets``: Kafka's GroupMetadata records, byte for byte,
written when a generation completes or the group empties, and read back by a restarted
broker so that its members carry on without rejoining.

The expected bytes are packed here field by field from Kafka's GroupMetadataKey.json and
GroupMetadataValue.json (version 3, which Kafka 3.9's GroupMetadataManager writes), not
produced by kqlite's encoder; the codec's own tests are tests/format/test_group_records.py.
"""

import asyncio
import itertools
import signal
import struct
import time

import pytest

import kqlite
from kqlite.format.group_records import (GroupMetadataValue, MemberMetadata, decode_group_key,
                                         decode_group_value, encode_group_key)
from kqlite.format.internal_topics import (OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                           kafka_partition_for_key, legacy_partition_for_key)
from kqlite.format.offset_records import OffsetAndMetadata
from kqlite.format.record import Record
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.coordinator.group.coordinator import GroupCoordinator
from kqlite.server.coordinator.group.events import Heartbeat, Join, Sync
from kqlite.server.coordinator.group.records import (commit_records, group_record,
                                                     read_partition)
from kqlite.server.coordinator.state_log import DataDirStateLog
from kqlite.server.coordinator.state_topic import OFFSETS_STATE

from broker_process import BrokerProcess, RawClient, free_port, unique
from broker_thread import BrokerThread
from coordinator_doubles import MemoryStateLog, runtime


# -- Kafka's layout, packed by hand ----------------------------------------------------------

def s16(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def ns16(text):
    return struct.pack(">h", -1) if text is None else s16(text)


def b32(data):
    return struct.pack(">i", len(data)) + data


def kafka_v3(protocol_type, generation, protocol, leader, timestamp, members):
    """GroupMetadataValue v3: members are (member id, instance id, client id, client host,
    rebalance timeout, session timeout, subscription, assignment)."""
    out = struct.pack(">h", 3) + s16(protocol_type) + struct.pack(">i", generation) \
        + ns16(protocol) + ns16(leader) + struct.pack(">qi", timestamp, len(members))
    for mid, instance, client, host, rebalance, session, sub, assignment in members:
        out += s16(mid) + ns16(instance) + s16(client) + s16(host) \
            + struct.pack(">ii", rebalance, session) + b32(sub) + b32(assignment)
    return out


def test_the_data_dir_reads_back_the_latest_record_of_each_group(tmp_path):
    """What the single broker's coordinator loads when it starts."""
    async def run(fn, *args):
        return fn(*args)

    async def main():
        db = kqlite.open(str(tmp_path / "data"))
        log = DataDirStateLog(OFFSETS_STATE, db, run)

        async def load():
            loaded = {}
            stored = await log.read(range(OFFSETS_PARTITIONS), read_partition)
            for _offsets, groups in stored.values():
                loaded.update(groups)
            return loaded

        async def store(group, value):
            index = kafka_partition_for_key(group, OFFSETS_PARTITIONS)
            assert await log.append(index, [group_record(group, value)], acks=-1,
                                    timeout_ms=0) == ErrorCode.NONE

        assert await load() == {}                # no __consumer_offsets: nothing to load
        assert db.topics.get(OFFSETS_TOPIC) is None    # and loading did not create it
        first = GroupMetadataValue("consumer", 1, "range", "m", 5, (
            MemberMetadata("m", None, "c", "h", 1, 2, b"s", b"a"),))
        await store("g1", first)
        await store("g1", GroupMetadataValue("consumer", 2, None, None, 6, ()))
        await store("g2", first)
        await store("gone", first)
        await store("gone", None)
        # Records this reader must not trip over: a commit, and a damaged group record.
        db.offsets.commit("g1", {("t", 0): 5})
        with db.leased_log(OFFSETS_TOPIC, kafka_partition_for_key("g2", OFFSETS_PARTITIONS)) as lg:
            lg.append([Record(key=encode_group_key("bad"), value=b"\x00\x03\x00\x05abc")])
        assert await load() == {"g1": GroupMetadataValue("consumer", 2, None, None, 6, ()),
                                "g2": first}
        assert db.offsets.committed("g1") == {("t", 0): 5}
        db.close()
    asyncio.run(main())


def test_a_broker_finds_the_groups_and_commits_written_under_the_legacy_placement(tmp_path):
    """A data dir of an older kqlite: "my-group" under the legacy rule (partition 36, Kafka
    places it in 12). The broker moves it before it loads its groups, and the embedded API
    reads the same."""
    data, group = tmp_path / "data", "my-group"
    with kqlite.open(data) as db:
        db.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG)
        with db.leased_log(OFFSETS_TOPIC, legacy_partition_for_key(group, OFFSETS_PARTITIONS)) \
                as log:
            log.append([group_record(group, GroupMetadataValue("consumer", 4, None, None, 5,
                                                               ())),
                        *commit_records(group, {("t", 0): OffsetAndMetadata(42, -1, "m", 5)},
                                        5)])
    with BrokerThread(data) as broker:
        c = RawClient(broker)
        try:
            fetched = c.call(ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": None,
                                                      "require_stable": False})
            described = c.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"][0]
        finally:
            c.close()
    assert [(t["name"], p["partition_index"], p["committed_offset"], p["metadata"])
            for t in fetched["topics"] for p in t["partitions"]] == [("t", 0, 42, "m")]
    assert (described["error_code"], described["group_state"]) == (ErrorCode.NONE, "Empty")
    with kqlite.open(data) as db:
        assert db.offsets.committed(group) == {("t", 0): 42}


# -- The coordinator: replies wait for the record --------------------------------------------

def coordinator(state_log):
    """No initial rebalance delay, the single broker's ownership over ``state_log``."""
    ids = itertools.count()
    return GroupCoordinator(runtime(state_log), 0.0, clock=lambda: 100.0,
                            member_ids=lambda p: f"{p}-{next(ids)}", wall_clock=lambda: 1234.5)


def written(state_log):
    """``[(group, GroupMetadataValue or None)]`` of the group records appended to
    ``state_log``, in order."""
    return [(decode_group_key(r.key), r.value and decode_group_value(r.value))
            for _index, records, _acks, _timeout in state_log.appends for r in records]


def join(member_id="", client="c"):
    return Join(member_id, client, "/h", 10_000, 30_000, "consumer", (("range", b"R"),))


def test_the_leaders_sync_is_answered_once_the_generation_is_stored():
    async def main():
        gate = asyncio.Event()
        gate.set()
        store = MemoryStateLog(gate=gate)
        c = coordinator(store)
        c.start()
        await c.loaded()
        assert (await c.join("g", join(client="a"))).generation == 1
        gate.clear()
        sync = asyncio.create_task(c.sync("g", Sync("a-0", 1, (("a-0", b"A"),))))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not sync.done() and store.records == {}
        gate.set()
        assert (await sync).assignment == b"A"
        ((group, value),) = written(store)
        assert (group, value.generation, value.leader, value.current_state_timestamp) == \
            ("g", 1, "a-0", 1234500)
        assert [(m.member_id, m.assignment) for m in value.members] == [("a-0", b"A")]
        await c.stop()
    asyncio.run(main())


def test_loaded_groups_accept_their_members_at_once_and_wait_for_nothing_else():
    async def main():
        stored = group_record("g", GroupMetadataValue("consumer", 4, "range", "a-9", 1, (
            MemberMetadata("a-9", None, "a", "/h", 30000, 10000, b"R", b"A"),)))
        gate = asyncio.Event()
        c = coordinator(MemoryStateLog({kafka_partition_for_key("g", 50): [stored]}, gate))
        c.start()
        # While loading: heartbeats are accepted blindly (Kafka), joins wait.
        assert c.loading and c.heartbeat("g", Heartbeat("a-9", 4)) == ErrorCode.NONE
        assert c.leave("g", []) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])
        joining = asyncio.create_task(c.join("h", join(client="b")))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not joining.done()
        gate.set()
        await c.loaded()
        assert c.heartbeat("g", Heartbeat("a-9", 4)) == ErrorCode.NONE
        assert c.heartbeat("g", Heartbeat("a-9", 3)) == ErrorCode.ILLEGAL_GENERATION
        assert (await c.sync("g", Sync("a-9", 4))).assignment == b"A"
        assert c.group("g").state.value == "Stable" and c.group("g").leader == "a-9"
        assert (await joining).generation == 1
        await c.stop()
    asyncio.run(main())


# -- A broker restart ------------------------------------------------------------------------

def restartable(data_dir, port):
    return BrokerProcess(data_dir, extra=("--listen", f"127.0.0.1:{port}"))


def raw_group(broker, group):
    """Members of generation 1 joined with metadata b"sa" and b"sb"; whichever the
    coordinator makes leader gets assignment b"A", the other b"B". Returns
    ((leader id, its metadata), (follower id, its metadata))."""
    a, b = RawClient(broker, timeout=30), RawClient(broker, timeout=30)
    body = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "protocol_type": "consumer", "member_id": ""}
    a.send(ApiKey.JOIN_GROUP, 3, dict(body, protocols=[{"name": "range", "metadata": b"sa"}]))
    jb = b.call(ApiKey.JOIN_GROUP, 3, dict(body, protocols=[{"name": "range", "metadata": b"sb"}]))
    ja = a.receive(ApiKey.JOIN_GROUP, 3)
    assert ja["error_code"] == jb["error_code"] == 0 and ja["generation_id"] == 1
    leader = ja if ja["leader"] == ja["member_id"] else jb
    lc = a if leader is ja else b
    other = jb if leader is ja else ja
    sync = lc.call(ApiKey.SYNC_GROUP, 3,
                   {"group_id": group, "generation_id": 1,
                    "member_id": leader["member_id"], "assignments": [
                        {"member_id": leader["member_id"], "assignment": b"A"},
                        {"member_id": other["member_id"], "assignment": b"B"}]})
    assert sync["assignment"] == b"A"
    a.close()
    b.close()
    metadata = {ja["member_id"]: b"sa", jb["member_id"]: b"sb"}
    return ((leader["member_id"], metadata[leader["member_id"]]),
            (other["member_id"], metadata[other["member_id"]]))


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL])
def test_after_a_restart_members_carry_on_with_their_generation(tmp_path, stop_signal):
    data, port = tmp_path / "data", free_port()
    group = unique("reload")
    broker = restartable(data, port)
    try:
        (leader, leader_meta), (follower, follower_meta) = raw_group(broker, group)
    finally:
        broker.stop(stop_signal)
    broker = restartable(data, port)
    try:
        c = RawClient(broker, timeout=30)
        for member in (leader, follower):
            assert c.call(ApiKey.HEARTBEAT, 3, {"group_id": group, "generation_id": 1,
                                                "member_id": member})["error_code"] == 0
        sync = c.call(ApiKey.SYNC_GROUP, 3,
                      {"group_id": group, "generation_id": 1, "member_id": follower,
                       "assignments": []})
        assert (sync["error_code"], sync["assignment"]) == (0, b"B")
        (g,) = c.call(ApiKey.DESCRIBE_GROUPS, 5,
                      {"groups": [group], "include_authorized_operations": False}
                      )["groups"]
        assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == \
            ("Stable", "consumer", "range")
        assert sorted((m["member_id"], m["member_metadata"], m["member_assignment"])
                      for m in g["members"]) == sorted([(leader, leader_meta, b"A"),
                                                        (follower, follower_meta, b"B")])
        listed = c.call(ApiKey.LIST_GROUPS, 4, {"states_filter": ["stable"]})["groups"]
        assert {"group_id": group, "protocol_type": "consumer",
                "group_state": "Stable"} in listed
        # Both leave: the Empty group, with its generation, survives the next restart too.
        c.call(ApiKey.LEAVE_GROUP, 3, {"group_id": group, "members": [
            {"member_id": leader, "group_instance_id": None},
            {"member_id": follower, "group_instance_id": None}]})
        c.close()
    finally:
        # LeaveGroup is answered before the Empty record is written (as in Kafka); a
        # clean stop writes what is queued.
        broker.stop()
    broker = restartable(data, port)
    try:
        c = RawClient(broker, timeout=30)
        (g,) = c.call(ApiKey.DESCRIBE_GROUPS, 5,
                      {"groups": [group], "include_authorized_operations": False}
                      )["groups"]
        assert (g["group_state"], g["members"]) == ("Empty", [])
        joined = c.call(ApiKey.JOIN_GROUP, 3, {"group_id": group, "session_timeout_ms": 30000,
                                               "rebalance_timeout_ms": 30000, "member_id": "",
                                               "protocol_type": "consumer",
                                               "protocols": [{"name": "range", "metadata": b"x"}]})
        assert joined["generation_id"] == 3        # 1, then 2 when it emptied, then 3
        c.close()
    finally:
        broker.stop()
    # Generation 3 never got its assignments: Kafka stores a generation only once it has.
    (generation_1, stamp_1), (emptied, stamp_2) = group_records(data, group)
    described = {leader: (leader_meta, b"A"), follower: (follower_meta, b"B")}
    in_join_order = [m.member_id for m in decode_group_value(generation_1).members]
    assert sorted(in_join_order) == sorted(described)
    assert generation_1 == kafka_v3("consumer", 1, "range", leader, stamp_1, [
        (m, None, "raw", "127.0.0.1", 30000, 30000, *described[m]) for m in in_join_order])
    assert emptied == kafka_v3("consumer", 2, None, None, stamp_2, [])


def group_records(data_dir, group):
    """(value bytes, current state timestamp) of the group's metadata records, in order."""
    db = kqlite.open(str(data_dir))
    try:
        with db.leased_log(OFFSETS_TOPIC,
                           kafka_partition_for_key(group, OFFSETS_PARTITIONS)) as log:
            found = [r.value for r in log.read(log.start_offset)
                     if decode_group_key(r.key) == group and r.value is not None]
    finally:
        db.close()
    now = time.time() * 1000
    out = []
    for value in found:
        stamp = decode_group_value(value).current_state_timestamp
        assert now - 600_000 < stamp <= now
        out.append((value, stamp))
    return out


def test_a_librdkafka_consumer_keeps_its_membership_across_a_broker_restart(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    data, port = tmp_path / "data", free_port()
    topic, group = unique("reload-ck"), unique("reload-ck-g")
    broker = restartable(data, port)
    assigns = []
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group,
                            "session.timeout.ms": 30000, "heartbeat.interval.ms": 500,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "reconnect.backoff.max.ms": 200})
    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{port}"})

    def consume_one():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                return msg
        raise AssertionError("no message")

    try:
        producer.produce(topic, b"before")
        assert producer.flush(30) == 0
        consumer.subscribe([topic], on_assign=lambda c, ps: assigns.append(len(ps)))
        assert consume_one().value() == b"before"
        consumer.commit(asynchronous=False)
        (member,) = describe_members(broker, group)
        broker.stop()
        broker = restartable(data, port)
        producer.produce(topic, b"after")
        assert producer.flush(30) == 0
        assert consume_one().value() == b"after"
        # A commit with the old generation is accepted: the broker knows the member.
        consumer.commit(asynchronous=False)
        assert describe_members(broker, group) == [member]
        assert assigns == [3]            # one assignment of the three partitions, ever
    finally:
        consumer.close()
        broker.stop()


def describe_members(broker, group):
    c = RawClient(broker)
    try:
        (g,) = c.call(ApiKey.DESCRIBE_GROUPS, 5,
                      {"groups": [group], "include_authorized_operations": False}
                      )["groups"]
        return [m["member_id"] for m in g["members"]]
    finally:
        c.close()
