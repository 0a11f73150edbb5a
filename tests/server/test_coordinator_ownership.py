"""Which state partitions a coordinator owns as leadership moves (the pure Ownership of
kqlite/server/coordinator/ownership.py), what the group coordinator makes of a
partition's records (coordinator/group/records.py) and of append errors
(coordinator/group/append_errors.py), and the group coordinator refusing, dropping and
taking back the groups of a partition, over the coordinator runtime with an in-memory
state log."""

import asyncio

from kqlite.format.group_records import (GroupMetadataValue, MemberMetadata, encode_group_key,
                                         encode_group_value)
from kqlite.format.offset_records import (OffsetAndMetadata, encode_offset_key,
                                          encode_offset_value)
from kqlite.format.record import Record
from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.group.append_errors import (DATA_DIR_GROUP_STORE_ERRORS,
                                                           GROUP_STORE_ERRORS,
                                                           OFFSET_COMMIT_ERRORS)
from kqlite.server.coordinator.group.coordinator import GroupCoordinator
from kqlite.server.coordinator.group.events import Heartbeat, Join, Sync
from kqlite.server.coordinator.group.records import read_partition
from kqlite.server.coordinator.group.state_machine import GroupState
from kqlite.server.coordinator.ownership import Ownership, SoleOwnership

from coordinator_doubles import MemoryStateLog, leader_runtime, settle

E = ErrorCode


def test_a_partition_is_loading_then_owned_and_unloaded_by_a_newer_epoch():
    o = Ownership()
    assert o.error_for(7) == E.NOT_COORDINATOR
    assert o.elect(7, 3)
    assert o.error_for(7) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert not o.elect(7, 3)              # already loading in this epoch: no second load
    assert o.loaded(7, 3) and o.error_for(7) == E.NONE
    assert not o.elect(7, 4)              # a new epoch of a partition held: nothing to load
    assert not o.resign(7, 2)             # an older epoch changes nothing
    assert o.error_for(7) == E.NONE
    assert o.resign(7, 5) and o.error_for(7) == E.NOT_COORDINATOR
    assert not o.elect(7, 4)              # leadership from before the resignation: stale


def test_a_load_overtaken_by_a_resignation_does_not_own_the_partition():
    o = Ownership()
    assert o.elect(2, 1)
    assert o.resign(2, 2)
    assert not o.loaded(2, 1)
    assert o.error_for(2) == E.NOT_COORDINATOR
    assert o.elect(2, 3) and o.loaded(2, 3) and o.error_for(2) == E.NONE


def test_a_newer_election_during_a_load_starts_its_own_load_which_wins():
    o = Ownership()
    assert o.elect(4, 1)
    assert o.elect(4, 2)                  # the load of epoch 1 is not the latest any more
    assert not o.loaded(4, 1)             # so it owns nothing when it finishes
    assert o.error_for(4) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert not o.elect(4, 1)              # nor does a late election of the older epoch
    assert o.loaded(4, 2) and o.error_for(4) == E.NONE


def test_an_older_resignation_during_a_load_changes_nothing():
    o = Ownership()
    assert o.elect(5, 3)
    assert not o.resign(5, 2)
    assert o.error_for(5) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert o.loaded(5, 3) and o.error_for(5) == E.NONE


def test_the_single_broker_owns_every_partition_and_loads_them_at_start():
    o = SoleOwnership()
    assert o.loads_at_start and not o.loading
    assert {o.error_for(p) for p in range(50)} == {E.NONE}
    assert not Ownership.loads_at_start


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
               Record(key=b"\x00\x01\x00", value=b"broken"),
               Record(key=encode_group_key("bad"), value=b"\x00\x03\x00\x05abc")]
    offsets, groups = read_partition(iter(records))
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(9, 2, "m", 1000),
                             ("t", 1): OffsetAndMetadata(3, -1, "m", 1000)}}
    assert groups == {"g": value}
    # A data dir shared with embedded processes keeps no offsets: only the groups.
    assert read_partition(iter(records), with_offsets=False) == ({}, {"g": value})


def test_append_errors_map_as_kafkas_group_metadata_manager():
    assert GROUP_STORE_ERRORS[E.NOT_ENOUGH_REPLICAS] == E.COORDINATOR_NOT_AVAILABLE
    assert GROUP_STORE_ERRORS[E.NOT_LEADER_OR_FOLLOWER] == E.NOT_COORDINATOR
    assert GROUP_STORE_ERRORS[E.REQUEST_TIMED_OUT] == E.REBALANCE_IN_PROGRESS
    assert GROUP_STORE_ERRORS[E.RECORD_LIST_TOO_LARGE] == E.UNKNOWN_SERVER_ERROR
    assert OFFSET_COMMIT_ERRORS[E.NOT_ENOUGH_REPLICAS_AFTER_APPEND] == E.COORDINATOR_NOT_AVAILABLE
    assert OFFSET_COMMIT_ERRORS[E.KAFKA_STORAGE_ERROR] == E.NOT_COORDINATOR
    assert OFFSET_COMMIT_ERRORS[E.RECORD_LIST_TOO_LARGE] == E.INVALID_COMMIT_OFFSET_SIZE
    assert OFFSET_COMMIT_ERRORS[E.NETWORK_EXCEPTION] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert E.REQUEST_TIMED_OUT not in OFFSET_COMMIT_ERRORS     # a commit timeout stays one
    # The single broker's data dir: a group record too large to store is let go.
    assert DATA_DIR_GROUP_STORE_ERRORS[E.MESSAGE_TOO_LARGE] == E.NONE
    assert DATA_DIR_GROUP_STORE_ERRORS[E.NOT_LEADER_OR_FOLLOWER] == E.NOT_COORDINATOR


# -- The group coordinator over a runtime whose partitions move ----------------------------

OWNED, LOADING, ELSEWHERE = "a-group", "b-group", "x"


def _runtime(state_log=None):
    """``OWNED``'s partition is owned, ``LOADING``'s is loading, ``ELSEWHERE``'s led by
    another broker."""
    rt = leader_runtime(state_log or MemoryStateLog())
    assert len({rt.partition_for(g) for g in (OWNED, LOADING, ELSEWHERE)}) == 3
    o = rt.ownership
    o.elect(rt.partition_for(OWNED), 1)
    o.loaded(rt.partition_for(OWNED), 1)
    o.elect(rt.partition_for(LOADING), 1)
    return rt


def _join(member_id=""):
    return Join(member_id, "c", "/h", 10_000, 30_000, "consumer", (("range", b"R"),))


def test_requests_for_groups_coordinated_elsewhere_or_loading_are_refused():
    async def main():
        c = GroupCoordinator(_runtime(), 0.0, clock=lambda: 10.0)
        c.start()
        assert (await c.join(ELSEWHERE, _join())).error == E.NOT_COORDINATOR
        assert (await c.sync(ELSEWHERE, Sync("m", 1))).error == E.NOT_COORDINATOR
        assert c.heartbeat(ELSEWHERE, Heartbeat("m", 1)) == E.NOT_COORDINATOR
        assert c.leave(ELSEWHERE, []) == (E.NOT_COORDINATOR, [])
        assert await c.delete(ELSEWHERE) == E.NOT_COORDINATOR
        assert (await c.join(LOADING, _join())).error == E.COORDINATOR_LOAD_IN_PROGRESS
        assert c.heartbeat(LOADING, Heartbeat("m", 1)) == E.NONE    # blindly, as Kafka
        assert ELSEWHERE not in c.groups and LOADING not in c.groups
        await c.stop()
    asyncio.run(main())


def test_unloading_answers_the_waiting_joins_and_a_restore_brings_the_group_back():
    async def main():
        log = MemoryStateLog()
        rt = _runtime(log)
        c = GroupCoordinator(rt, 0.0, clock=lambda: 10.0, member_ids=lambda client: f"{client}-1")
        c.start()
        first = await c.join(OWNED, _join())
        assert first.error == E.NONE and first.generation == 1
        assert (await c.sync(OWNED, Sync(first.member_id, 1, ((first.member_id, b"A"),)))
                ).assignment == b"A"
        index = rt.partition_for(OWNED)
        (stored,) = log.records[index]
        # A second member waits in JoinGroup for the first to rejoin: then the partition
        # moves away.
        waiting = asyncio.create_task(c.join(OWNED, _join()))
        await settle()
        rejoin = asyncio.create_task(c.join(OWNED, _join(first.member_id)))
        await settle()
        rt.resign(index, 2)
        assert OWNED not in c.groups
        results = [await waiting, await rejoin]
        assert E.NOT_COORDINATOR in [r.error for r in results]
        # Leading the partition again: the group as its last record left it.
        rt.elect(index, 3)
        await settle()
        assert rt.owner_error(OWNED) == E.NONE
        g = c.group(OWNED)
        assert (g.state, g.generation, [m.member_id for m in g.members()]) == \
            (GroupState.STABLE, 1, [first.member_id])
        assert c.heartbeat(OWNED, Heartbeat(first.member_id, 1)) == E.NONE
        assert read_partition([stored])[1][OWNED].generation == 1
        await c.stop()
    asyncio.run(main())


def test_a_generation_that_cannot_be_stored_answers_the_sync_with_kafkas_error():
    async def main():
        log = MemoryStateLog()
        c = GroupCoordinator(_runtime(log), 0.0, clock=lambda: 10.0)
        c.start()
        joined = await c.join(OWNED, _join())
        log.append_error = E.NOT_LEADER_OR_FOLLOWER
        sync = await c.sync(OWNED, Sync(joined.member_id, 1, ((joined.member_id, b"A"),)))
        assert sync.error == E.NOT_COORDINATOR and sync.assignment == b""
        log.append_error = E.REQUEST_TIMED_OUT
        joined = await c.join(OWNED, _join(joined.member_id))
        sync = await c.sync(OWNED, Sync(joined.member_id, joined.generation,
                                        ((joined.member_id, b"A"),)))
        assert sync.error == E.REBALANCE_IN_PROGRESS
        await c.stop()
    asyncio.run(main())
