"""OffsetCommit v0-9 and OffsetFetch v0-9 with raw frames, each version with what Kafka
3.9's KafkaApis does with it: v0 commits ignore the group (Kafka stored them in
ZooKeeper), v1 carries a commit timestamp per partition, leader epochs from v6 (commit) and
v5 (fetch), null topics for every partition from v2, several groups from v8, and
``require_stable`` (v7+) answering UNSTABLE_OFFSET_COMMIT for a commit still being
written."""

import asyncio
import struct
import threading

import pytest

from broker_process import RawClient
from broker_thread import GATE_LIMIT, BrokerThread

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402
from kqlite.server.coordinator.state_log import StateLog  # noqa: E402


@pytest.fixture
def broker(tmp_path):
    b = BrokerThread(tmp_path / "data", group_initial_rebalance_delay_ms=0)
    b.broker.db.create_topic("t", 3)
    yield b
    b.stop()


def commit_body(group, partitions, generation=-1, member="", timestamp=-1, epoch=-1):
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": epoch,
                 "commit_timestamp": timestamp, "committed_metadata": m}
                for p, o, m in partitions]}]}


def codes(reply):
    return [p["error_code"] for t in reply["topics"] for p in t["partitions"]]


def fetch_v(c, version, group, partitions, require_stable=False):
    """{partition: (offset, epoch or None, metadata, error)} of a single-group fetch."""
    topics = None if partitions is None else [{"name": "t", "partition_indexes": partitions}]
    if version >= 8:
        reply = c.call(ApiKey.OFFSET_FETCH, version,
                       {"groups": [{"group_id": group, "member_id": None,
                                    "member_epoch": -1, "topics": topics}],
                        "require_stable": require_stable})
        (g,) = reply["groups"]
        assert (g["group_id"], g["error_code"]) == (group, ErrorCode.NONE)
        topics = g["topics"]
    else:
        reply = c.call(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": topics,
                                                      "require_stable": require_stable})
        assert reply.get("error_code", 0) == ErrorCode.NONE
        topics = reply["topics"]
    return {p["partition_index"]: (p["committed_offset"], p.get("committed_leader_epoch"),
                                   p["metadata"], p["error_code"])
            for t in topics for p in t["partitions"]}


def join_stable_group(c, group):
    """A one-member consumer group (JoinGroup v0 and SyncGroup v0); (member id,
    generation)."""
    subscription = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)
    joined = c.call(ApiKey.JOIN_GROUP, 0,
                    {"group_id": group, "session_timeout_ms": 30000, "member_id": "",
                     "protocol_type": "consumer",
                     "protocols": [{"name": "range", "metadata": subscription}]})
    assert joined["error_code"] == ErrorCode.NONE
    member, generation = joined["member_id"], joined["generation_id"]
    synced = c.call(ApiKey.SYNC_GROUP, 0,
                    {"group_id": group, "generation_id": generation, "member_id": member,
                     "assignments": [{"member_id": member, "assignment": b""}]})
    assert synced["error_code"] == ErrorCode.NONE
    return member, generation


@pytest.mark.parametrize("version", range(0, 10))
def test_every_commit_version_stores_what_it_carries(broker, version):
    c = RawClient(broker)
    group = f"g{version}"
    reply = c.call(ApiKey.OFFSET_COMMIT, version,
                   commit_body(group, [(0, 100 + version, f"meta{version}")],
                               timestamp=1234567, epoch=6))
    assert codes(reply) == [ErrorCode.NONE]
    (stored,) = broker.broker.db.offsets.committed_details(group).values()
    assert stored.offset == 100 + version and stored.metadata == f"meta{version}"
    assert stored.leader_epoch == (6 if version >= 6 else -1)
    if version == 1:
        assert stored.commit_timestamp == 1234567     # the client's, in v1 only
    else:
        assert stored.commit_timestamp > 1234567
    c.close()


def test_v0_commit_ignores_the_group_v1_and_later_do_not(broker):
    c = RawClient(broker)
    member, generation = join_stable_group(c, "live")
    assert codes(c.call(ApiKey.OFFSET_COMMIT, 0,
                        commit_body("live", [(0, 5, "zk-era")]))) == [ErrorCode.NONE]
    # From v1 a commit is checked against the group: a stale generation, then no member.
    assert codes(c.call(ApiKey.OFFSET_COMMIT, 1,
                        commit_body("live", [(0, 6, "")], generation + 1, member))) == [
        ErrorCode.ILLEGAL_GENERATION]
    refused = codes(c.call(ApiKey.OFFSET_COMMIT, 2, commit_body("live", [(0, 6, "")])))
    assert refused[0] in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION)
    assert codes(c.call(ApiKey.OFFSET_COMMIT, 5,
                        commit_body("live", [(0, 7, "ok")], generation, member))) == [
        ErrorCode.NONE]
    assert broker.broker.db.offsets.committed("live") == {("t", 0): 7}
    c.close()


def test_fetch_versions_answer_what_each_version_has(broker):
    c = RawClient(broker)
    c.call(ApiKey.OFFSET_COMMIT, 8, commit_body("f", [(0, 10, "m0"), (1, 11, None)], epoch=4))
    # v0 read ZooKeeper in Kafka: no metadata, and -1 for partitions that do not exist.
    assert fetch_v(c, 0, "f", [0, 1, 2, 9]) == {
        0: (10, None, "", 0), 1: (11, None, "", 0), 2: (-1, None, "", 0), 9: (-1, None, "", 0)}
    for version in range(1, 10):
        got = fetch_v(c, version, "f", [0, 1, 2])
        epoch = (lambda e: e if version >= 5 else None)
        assert got == {0: (10, epoch(4), "m0", 0), 1: (11, epoch(4), "", 0),
                       2: (-1, epoch(-1), "", 0)}, version
        if version >= 2:      # null topics: every committed partition
            assert fetch_v(c, version, "f", None) == {0: got[0], 1: got[1]}, version
    c.close()


@pytest.mark.parametrize("version", [8, 9])
def test_several_groups_in_one_fetch(broker, version):
    c = RawClient(broker)
    c.call(ApiKey.OFFSET_COMMIT, 9, commit_body("a", [(0, 1, "x")]))
    c.call(ApiKey.OFFSET_COMMIT, 9, commit_body("b", [(2, 3, "y")], epoch=2))
    reply = c.call(ApiKey.OFFSET_FETCH, version, {"groups": [
        {"group_id": "a", "member_id": None, "member_epoch": -1, "topics": None},
        {"group_id": "b", "member_id": None, "member_epoch": -1,
         "topics": [{"name": "t", "partition_indexes": [1, 2]}]},
        {"group_id": "none", "member_id": None, "member_epoch": -1, "topics": None},
    ], "require_stable": True})
    got = {g["group_id"]: (g["error_code"], [
        (t["name"], p["partition_index"], p["committed_offset"], p["committed_leader_epoch"],
         p["metadata"], p["error_code"]) for t in g["topics"] for p in t["partitions"]])
        for g in reply["groups"]}
    assert got == {"a": (0, [("t", 0, 1, -1, "x", 0)]),
                   "b": (0, [("t", 1, -1, -1, "", 0), ("t", 2, 3, 2, "y", 0)]),
                   "none": (0, [])}
    c.close()


class HeldCommit(StateLog):
    """Holds the next append to ``__consumer_offsets`` (the group coordinator runtime's
    state log, replaced by this one) before it writes: a commit accepted and still being
    written."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.real = runtime.state_log
        self.shared_database = self.real.shared_database
        self.entered = threading.Event()
        self.released = threading.Event()
        self.armed = True
        runtime.state_log = self

    async def append(self, index, records, *, acks, timeout_ms, producer=None, guard=None):
        if self.armed:
            self.armed = False
            self.entered.set()
            released = await asyncio.get_running_loop().run_in_executor(
                None, self.released.wait, GATE_LIMIT)
            assert released
        return await self.real.append(index, records, acks=acks, timeout_ms=timeout_ms,
                                      producer=producer, guard=guard)

    async def begin_verification(self, index, producer):
        return await self.real.begin_verification(index, producer)

    async def read(self, indexes, replay):
        return await self.real.read(indexes, replay)

    def release(self):
        self.released.set()
        self.runtime.state_log = self.real


@pytest.mark.parametrize("version", [7, 8, 9])
def test_require_stable_reports_a_commit_still_being_written(broker, version):
    c, other = RawClient(broker), RawClient(broker)
    c.call(ApiKey.OFFSET_COMMIT, 8, commit_body("s", [(0, 1, "first")]))
    held = HeldCommit(broker.broker.coordinator.runtime)
    try:
        c.send(ApiKey.OFFSET_COMMIT, 8, commit_body("s", [(0, 2, "second")]))
        assert held.entered.wait(GATE_LIMIT)
        assert fetch_v(other, version, "s", [0, 1], require_stable=True) == {
            0: (-1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (-1, -1, "", 0)}
        assert fetch_v(other, version, "s", [0], require_stable=False) == {
            0: (1, -1, "first", 0)}
    finally:
        held.release()
    assert codes(c.receive(ApiKey.OFFSET_COMMIT, 8)) == [ErrorCode.NONE]
    assert fetch_v(other, version, "s", [0], require_stable=True) == {0: (2, -1, "second", 0)}
    c.close()
    other.close()
