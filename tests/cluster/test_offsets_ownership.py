"""The pure parts of the cluster's group placement (kqlite.cluster.coordinators.groups): which
offsets partitions a broker owns as leadership moves, what a partition's records load
into, and the coordinator dropping and taking back the groups of a partition."""

import asyncio

from kqlite.cluster.coordinators.groups import (GROUP_STORE_ERRORS, OFFSET_COMMIT_ERRORS,
                                                OffsetsOwnership, read_offsets_partition)
from kqlite.format.group_records import (GroupMetadataValue, MemberMetadata, encode_group_key,
                                         encode_group_value)
from kqlite.format.offset_records import (OffsetAndMetadata, encode_offset_key,
                                          encode_offset_value)
from kqlite.format.record import Record
from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.group.coordinator import GroupCoordinator
from kqlite.server.coordinator.group.events import Heartbeat, Join, Sync
from kqlite.server.group_placement import GroupPlacement
from kqlite.server.coordinator.group.state_machine import GroupState

E = ErrorCode


def test_a_partition_is_loading_then_owned_and_unloaded_by_a_newer_epoch():
    o = OffsetsOwnership()
    assert o.error_for(7) == E.NOT_COORDINATOR
    assert o.elect(7, 3)
    assert o.error_for(7) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert not o.elect(7, 3)              # already loading: no second load
    assert o.loaded(7, 3) and o.error_for(7) == E.NONE
    assert not o.elect(7, 4)              # a new epoch of a partition held: nothing to load
    assert not o.resign(7, 2)             # an older epoch changes nothing
    assert o.error_for(7) == E.NONE
    assert o.resign(7, 5) and o.error_for(7) == E.NOT_COORDINATOR
    assert not o.elect(7, 4)              # leadership from before the resignation: stale


def test_a_load_overtaken_by_a_resignation_does_not_own_the_partition():
    o = OffsetsOwnership()
    assert o.elect(2, 1)
    assert o.resign(2, 2)
    assert not o.loaded(2, 1)
    assert o.error_for(2) == E.NOT_COORDINATOR
    assert o.elect(2, 3) and o.loaded(2, 3) and o.error_for(2) == E.NONE


def _commit(group, topic, index, offset, epoch=-1):
    return Record(key=encode_offset_key(group, topic, index),
                  value=encode_offset_value(offset, "m", 1000, epoch))


def test_loading_keeps_the_latest_record_of_each_key_and_honours_tombstones():
    value = GroupMetadataValue("consumer", 4, "range", "a", 1, (
        MemberMetadata("a", None, "c", "/h", 30000, 10000, b"S", b"A"),))
    records = [_commit("g", "t", 0, 5), _commit("g", "t", 0, 9, epoch=2), _commit("g", "t", 1, 3),
               _commit("gone", "t", 0, 1),
               Record(key=encode_offset_key("gone", "t", 0), value=None),
               Record(key=encode_group_key("g"), value=encode_group_value(value)),
               Record(key=encode_group_key("old"), value=encode_group_value(value)),
               Record(key=encode_group_key("old"), value=None),
               Record(key=b"\x00\x01\x00", value=b"broken")]
    offsets, groups = read_offsets_partition(records)
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(9, 2, "m", 1000),
                             ("t", 1): OffsetAndMetadata(3, -1, "m", 1000)}}
    assert groups == {"g": value}


def test_append_errors_map_as_kafkas_group_metadata_manager():
    assert GROUP_STORE_ERRORS[E.NOT_ENOUGH_REPLICAS] == E.COORDINATOR_NOT_AVAILABLE
    assert GROUP_STORE_ERRORS[E.NOT_LEADER_OR_FOLLOWER] == E.NOT_COORDINATOR
    assert GROUP_STORE_ERRORS[E.REQUEST_TIMED_OUT] == E.REBALANCE_IN_PROGRESS
    assert GROUP_STORE_ERRORS[E.RECORD_LIST_TOO_LARGE] == E.UNKNOWN_SERVER_ERROR
    assert OFFSET_COMMIT_ERRORS[E.NOT_ENOUGH_REPLICAS_AFTER_APPEND] == E.COORDINATOR_NOT_AVAILABLE
    assert OFFSET_COMMIT_ERRORS[E.KAFKA_STORAGE_ERROR] == E.NOT_COORDINATOR
    assert OFFSET_COMMIT_ERRORS[E.RECORD_LIST_TOO_LARGE] == E.INVALID_COMMIT_OFFSET_SIZE
    assert E.REQUEST_TIMED_OUT not in OFFSET_COMMIT_ERRORS     # a commit timeout stays one


class PartitionedPlacement(GroupPlacement):
    """Groups "a..." live in a partition this broker owns, "b..." in one it is loading,
    the rest elsewhere; group records are stored, failing with ``store_error``."""

    def __init__(self):
        self.store_error = E.NONE
        self.stored = []

    def owner_error(self, group_id):
        return {"a": E.NONE, "b": E.COORDINATOR_LOAD_IN_PROGRESS}.get(group_id[:1],
                                                                       E.NOT_COORDINATOR)

    async def coordinator_for(self, group_id):
        return E.NONE, 1, "h", 1

    async def load_groups(self):
        return {}

    async def store_group(self, group_id, value):
        self.stored.append((group_id, value))
        return self.store_error

    async def commit(self, group_id, offsets, timestamp):
        return {tp: E.NONE for tp in offsets}

    async def offsets(self, group_id, require_stable=False):
        return {}, set()

    async def delete_offsets(self, group_id, partitions=None):
        return {}, []

    async def groups_with_offsets(self):
        return []


def _join(member_id=""):
    return Join(member_id, "c", "/h", 10_000, 30_000, "consumer", (("range", b"R"),))


async def _settle():
    for _ in range(20):
        await asyncio.sleep(0)


def test_requests_for_groups_coordinated_elsewhere_or_loading_are_refused():
    async def main():
        c = GroupCoordinator(None, 0.0, clock=lambda: 10.0, placement=PartitionedPlacement())
        c.start()
        assert (await c.join("x-group", _join())).error == E.NOT_COORDINATOR
        assert (await c.sync("x-group", Sync("m", 1))).error == E.NOT_COORDINATOR
        assert c.heartbeat("x-group", Heartbeat("m", 1)) == E.NOT_COORDINATOR
        assert c.leave("x-group", []) == (E.NOT_COORDINATOR, [])
        assert await c.delete("x-group") == E.NOT_COORDINATOR
        assert (await c.join("b-group", _join())).error == E.COORDINATOR_LOAD_IN_PROGRESS
        assert c.heartbeat("b-group", Heartbeat("m", 1)) == E.NONE    # blindly, as Kafka
        assert "x-group" not in c.groups and "b-group" not in c.groups
        await c.stop()
    asyncio.run(main())


def test_unloading_answers_the_waiting_joins_and_a_restore_brings_the_group_back():
    async def main():
        placement = PartitionedPlacement()
        c = GroupCoordinator(None, 0.0, clock=lambda: 10.0, placement=placement,
                             member_ids=lambda client: f"{client}-1")
        c.start()
        first = await c.join("a-group", _join())
        assert first.error == E.NONE and first.generation == 1
        assert (await c.sync("a-group", Sync(first.member_id, 1, ((first.member_id, b"A"),)))
                ).assignment == b"A"
        ((_, stored),) = placement.stored
        # A second member waits in JoinGroup for the first to rejoin: then the partition
        # moves away.
        waiting = asyncio.create_task(c.join("a-group", _join()))
        await _settle()
        rejoin = asyncio.create_task(c.join("a-group", _join(first.member_id)))
        await _settle()
        c.unload_groups(lambda g: g.startswith("a"))
        assert "a-group" not in c.groups
        results = [await waiting, await rejoin]
        assert E.NOT_COORDINATOR in [r.error for r in results]
        # Leading the partition again: the group as its last record left it.
        assert c.restore_groups({"a-group": stored}) == 1
        g = c.group("a-group")
        assert (g.state, g.generation, [m.member_id for m in g.members()]) == \
            (GroupState.STABLE, 1, [first.member_id])
        assert c.heartbeat("a-group", Heartbeat(first.member_id, 1)) == E.NONE
        await c.stop()
    asyncio.run(main())


def test_a_generation_that_cannot_be_stored_answers_the_sync_with_kafkas_error():
    async def main():
        placement = PartitionedPlacement()
        c = GroupCoordinator(None, 0.0, clock=lambda: 10.0, placement=placement)
        c.start()
        joined = await c.join("a-group", _join())
        placement.store_error = E.NOT_COORDINATOR
        sync = await c.sync("a-group", Sync(joined.member_id, 1, ((joined.member_id, b"A"),)))
        assert sync.error == E.NOT_COORDINATOR and sync.assignment == b""
        await c.stop()
    asyncio.run(main())
