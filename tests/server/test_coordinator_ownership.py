"""Which state partitions a coordinator owns as leadership moves (the pure Ownership of
kqlite/server/coordinator/ownership.py), what the group coordinator makes of a
partition's records (coordinator/group/records.py) and of append errors
(coordinator/group/append_errors.py), and the group coordinator refusing, dropping and
taking back the groups of a partition, over the coordinator runtime with an in-memory
state log."""

import asyncio

from kqlite.format.control_records import ABORT, COMMIT
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
from kqlite.server.coordinator.group.offsets import LoadedOffsets
from kqlite.server.coordinator.group.records import read_partition
from kqlite.server.coordinator.group.state_machine import GroupState
from kqlite.server.coordinator.ownership import Ownership, SoleOwnership

from coordinator_doubles import MemoryStateLog, leader_runtime, settle, stored_batch

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


def _batches(records, producer=None):
    """One StoredBatch per record, at consecutive offsets (transactional batches of
    ``producer``, (producer id, epoch), when given)."""
    return [stored_batch([r], producer, at=n) for n, r in enumerate(records)]


def _loaded(commits):
    return {g: commits.committed(g) for g in commits.groups()}


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
    commits, groups = read_partition(iter(_batches(records)))
    assert _loaded(commits) == {"g": {("t", 0): OffsetAndMetadata(9, 2, "m", 1000),
                                      ("t", 1): OffsetAndMetadata(3, -1, "m", 1000)}}
    assert groups == {"g": value}
    # A data dir shared with embedded processes keeps no offsets: only the groups.
    assert read_partition(iter(_batches(records)), with_offsets=False) == (None, {"g": value})


def test_a_transactional_commit_loads_as_its_marker_decided_it():
    """Kafka's GroupMetadataManager load: a transactional commit counts once a COMMIT marker
    of its producer follows, an ABORT drops it, and without a marker yet it is pending
    (neither committed nor forgotten)."""
    committed, aborted, open_ = (7, 0), (8, 0), (9, 0)
    batches = [stored_batch([_commit("g", "t", 0, 5)], at=0),
               stored_batch([_commit("g", "t", 0, 10)], aborted, at=1),
               stored_batch([_commit("g", "t", 1, 20)], committed, at=2),
               stored_batch([], aborted, marker=ABORT, at=3),
               stored_batch([], committed, marker=COMMIT, at=4),
               stored_batch([_commit("g", "t", 2, 30)], open_, at=5)]
    commits, _groups = read_partition(iter(batches))
    assert _loaded(commits) == {"g": {("t", 0): OffsetAndMetadata(5, -1, "m", 1000),
                                      ("t", 1): OffsetAndMetadata(20, -1, "m", 1000)}}
    assert commits.pending_partitions("g") == {("t", 2)}

    # Taken over by the group coordinator's offsets: the aborted commit is not
    # answered, the open one is pending until its marker comes.
    held = LoadedOffsets()
    assert held.load(commits, lambda group: group == "g") == 3

    async def main():
        assert await held.committed("g") == {("t", 0): OffsetAndMetadata(5, -1, "m", 1000),
                                             ("t", 1): OffsetAndMetadata(20, -1, "m", 1000)}
        assert await held.pending_transactional("g") == {("t", 2)}
        held.transaction_completed(open_[0], True, lambda group: True)
        assert (await held.committed("g"))[("t", 2)] == OffsetAndMetadata(30, -1, "m", 1000)
        assert await held.pending_transactional("g") == set()
    asyncio.run(main())


def test_a_loaded_pending_commit_gives_way_to_a_later_plain_commit():
    """Kafka's ``olderThan``: a transactional commit decided after a plain commit of the
    same partition written later in the log leaves the later commit in place."""
    producer = (4, 1)
    batches = [stored_batch([_commit("g", "t", 0, 10)], producer, at=0),
               stored_batch([_commit("g", "t", 0, 12)], at=1)]
    commits, _groups = read_partition(iter(batches))
    held = LoadedOffsets()
    held.load(commits, lambda group: True)
    held.transaction_completed(producer[0], True, lambda group: True)

    async def main():
        assert (await held.committed("g"))[("t", 0)].offset == 12
    asyncio.run(main())


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
        assert read_partition(_batches([stored]))[1][OWNED].generation == 1
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


def test_a_marker_written_while_its_partition_loads_settles_the_loaded_commit():
    """The load reads the partition before the marker lands; the marker's completion comes
    while the load is under way and is settled once the load is taken over (a pending
    commit left so would answer UNSTABLE_OFFSET_COMMIT for ever)."""
    async def main():
        gate = asyncio.Event()
        log = MemoryStateLog(gate=gate)
        rt = leader_runtime(log)
        index = rt.partition_for("g")
        log.records[index] = [_commit("g", "t", 0, 10), _commit("g", "t", 1, 20)]
        log.producers[(index, 0)] = log.producers[(index, 1)] = (5, 0)
        c = GroupCoordinator(rt, 0.0, clock=lambda: 10.0)
        c.start()
        rt.elect(index, 1)
        await settle()
        assert rt.owner_error("g") == E.COORDINATOR_LOAD_IN_PROGRESS
        await c.offsets.transaction_completed(index, 5, True)
        gate.set()
        await settle()
        assert rt.owner_error("g") == E.NONE
        committed, pending = await c.offsets.fetch("g", require_stable=True)
        assert committed == {("t", 0): OffsetAndMetadata(10, -1, "m", 1000),
                             ("t", 1): OffsetAndMetadata(20, -1, "m", 1000)}
        assert pending == set()
        # A marker of a partition that moved away settles nothing, later or now.
        rt.resign(index, 2)
        await c.offsets.transaction_completed(index, 6, True)
        await c.stop()
    asyncio.run(main())
