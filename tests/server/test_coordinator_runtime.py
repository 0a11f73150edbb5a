"""The coordinator runtime (kqlite/server/coordinator/runtime.py) without sockets: loads on
election and unloads on resignation with the epoch rules, appends through a state log
with acks, timeouts and an error mapping, the answers NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS; a relocation run before each load; the two state logs over
a fake partition seam and a real data dir; the group coordinator's committed offsets over
both, and its load leaving out the groups another partition holds."""

import asyncio
import logging
import types

import pytest

import kqlite
from kqlite.errors import KqliteError
from kqlite.format.batch import build_batch, decode_batch
from kqlite.format.group_records import GroupMetadataValue
from kqlite.format.internal_topics import OFFSETS_TOPIC, legacy_partition_for_key
from kqlite.format.offset_records import OffsetAndMetadata, decode_offset_key
from kqlite.format.record import Record
from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.group.append_errors import OFFSET_COMMIT_ERRORS
from kqlite.server.coordinator.group.coordinator import GroupCoordinator
from kqlite.server.coordinator.group.events import Join, Sync
from kqlite.server.coordinator.group.offsets import GroupOffsets
from kqlite.server.coordinator.group.records import commit_records, group_record
from kqlite.server.coordinator.relocation import DataDirRelocation, Relocation
from kqlite.server.coordinator.runtime import CoordinatorState, sole_broker_runtime
from kqlite.server.coordinator.state_log import (DataDirStateLog, PartitionStateLog,
                                                 data_records)
from kqlite.server.coordinator.state_topic import OFFSETS_STATE, StateTopic
from kqlite.server.partition import AppendResult, PartitionError
from kqlite.storage import Isolation

from coordinator_doubles import (TOPIC, FixedPlacement, MemoryStateLog, leader_runtime,
                                 runtime, settle)

E = ErrorCode


class RecordingState(CoordinatorState):
    """Replays a partition to the values of its records; records every load and unload."""

    def __init__(self):
        self.loads = []
        self.unloads = []

    def replay(self, batches):
        return [r.value for r in data_records(batches)]

    def load(self, index, replayed):
        self.loads.append((index, replayed))

    def unload(self, index):
        self.unloads.append(index)


def _attached(rt):
    state = RecordingState()
    rt.attach(state)
    return state


def _key_of(rt, index):
    """A key whose partition is ``index``."""
    return next(k for k in (f"k{i}" for i in range(10_000)) if rt.partition_for(k) == index)


# -- Loading and unloading --------------------------------------------------------------------

def test_an_election_loads_the_partition_to_its_end_and_then_owns_it():
    async def main():
        gate = asyncio.Event()
        rt = leader_runtime(MemoryStateLog({3: [Record(key=b"k", value=b"v1"),
                                                Record(key=b"k", value=b"v2")]}, gate))
        state = _attached(rt)
        key = _key_of(rt, 3)
        assert rt.owner_error(key) == E.NOT_COORDINATOR and not rt.loading
        rt.elect(3, 7)
        await settle()
        assert rt.owner_error(key) == E.COORDINATOR_LOAD_IN_PROGRESS and rt.loading
        assert state.loads == []
        gate.set()
        await settle()
        assert state.loads == [(3, [b"v1", b"v2"])]
        assert rt.owner_error(key) == E.NONE and not rt.loading
        rt.elect(3, 7)                        # the same leadership again: nothing reloads
        await settle()
        assert rt.state_log.reads == [[3]]
    asyncio.run(main())


def test_a_resignation_unloads_and_an_older_one_changes_nothing():
    async def main():
        rt = leader_runtime()
        state = _attached(rt)
        key = _key_of(rt, 1)
        rt.elect(1, 4)
        await settle()
        rt.resign(1, 3)                       # a StopReplica overtaken by the election
        assert state.unloads == [] and rt.owner_error(key) == E.NONE
        rt.resign(1, 5)
        assert state.unloads == [1] and rt.owner_error(key) == E.NOT_COORDINATOR
    asyncio.run(main())


def test_a_load_finished_after_a_resignation_is_dropped():
    async def main():
        gate = asyncio.Event()
        rt = leader_runtime(MemoryStateLog({2: [Record(key=b"k", value=b"v")]}, gate))
        state = _attached(rt)
        rt.elect(2, 1)
        await settle()
        rt.resign(2, 2)
        gate.set()
        await settle()
        assert state.loads == [] and state.unloads == [2]
        assert rt.owner_error(_key_of(rt, 2)) == E.NOT_COORDINATOR and not rt.loading
    asyncio.run(main())


def test_a_newer_election_during_a_load_wins():
    async def main():
        gate = asyncio.Event()
        log = MemoryStateLog({6: [Record(key=b"k", value=b"v")]}, gate)
        rt = leader_runtime(log)
        state = _attached(rt)
        rt.elect(6, 1)
        await settle()
        rt.elect(6, 2)                        # LeaderAndIsr of a newer epoch meanwhile
        await settle()
        assert log.reads == [[6], [6]]
        gate.set()
        await settle()
        assert state.loads == [(6, [b"v"])]   # once: the load of epoch 2
        assert rt.ownership.epochs[6] == 2 and rt.owner_error(_key_of(rt, 6)) == E.NONE
    asyncio.run(main())


def test_a_failed_load_is_logged_and_the_partition_owned_empty(caplog):
    class Failing(MemoryStateLog):
        async def read(self, indexes, replay):
            raise KqliteError("unreadable segment")

    async def main():
        rt = leader_runtime(Failing())
        state = _attached(rt)
        with caplog.at_level(logging.ERROR, logger="kqlite.server"):
            rt.elect(0, 1)
            await settle()
        assert state.loads == [(0, [])] and rt.owner_error(_key_of(rt, 0)) == E.NONE
        assert f"loading {OFFSETS_TOPIC}-0 failed" in caplog.text
    asyncio.run(main())


def test_stopping_cancels_the_loads_under_way():
    async def main():
        rt = leader_runtime(MemoryStateLog(gate=asyncio.Event()))
        state = _attached(rt)
        rt.elect(9, 1)
        await settle()
        await rt.stop()
        await settle()
        assert state.loads == [] and rt.owner_error(_key_of(rt, 9)) == \
            E.COORDINATOR_LOAD_IN_PROGRESS
    asyncio.run(main())


def test_the_single_broker_loads_every_partition_at_start_or_none_of_them():
    async def main():
        log = MemoryStateLog({0: [Record(key=b"k", value=b"a")],
                              49: [Record(key=b"k", value=b"b")]})
        rt = runtime(log)
        state = _attached(rt)
        await rt.load_at_start()
        assert log.reads == [list(range(50))]       # in one storage call
        assert [(i, v) for i, v in state.loads if v] == [(0, [b"a"]), (49, [b"b"])]
        assert len(state.loads) == 50

        class FailingLast(MemoryStateLog):
            async def read(self, indexes, replay):
                replayed = await super().read(indexes, replay)
                if 49 in replayed:
                    raise KqliteError("unreadable segment")
                return replayed

        rt = runtime(FailingLast({0: [Record(key=b"k", value=b"a")]}))
        state = _attached(rt)
        with pytest.raises(KqliteError):
            await rt.load_at_start()
        assert state.loads == []
        # A cluster broker's partitions come with their elections only.
        rt = leader_runtime(log)
        state = _attached(rt)
        await rt.load_at_start()
        assert state.loads == []
    asyncio.run(main())


# -- Relocation before a load ------------------------------------------------------------

class GatedRelocation(Relocation):
    """Records each call's partitions in ``events`` (shared with the state log's reads),
    and holds it until ``gate`` is set; ``error`` is raised instead."""

    def __init__(self, events, gate=None, error=None):
        self.events = events
        self.gate = gate
        self.error = error
        self.cancelled = False

    async def relocate(self, indexes):
        self.events.append(("relocate", list(indexes)))
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error


class OrderedLog(MemoryStateLog):
    def __init__(self, events, records=None):
        super().__init__(records)
        self.events = events

    async def read(self, indexes, replay):
        self.events.append(("read", list(indexes)))
        return await super().read(indexes, replay)


def test_a_load_relocates_first_and_a_resignation_cancels_the_relocation():
    async def main():
        events, gate = [], asyncio.Event()
        relocation = GatedRelocation(events, gate)
        rt = leader_runtime(OrderedLog(events, {3: [Record(key=b"k", value=b"v")]}),
                            relocation)
        state = _attached(rt)
        rt.elect(3, 1)
        await settle()
        assert events == [("relocate", [3])]
        assert rt.owner_error(_key_of(rt, 3)) == E.COORDINATOR_LOAD_IN_PROGRESS
        gate.set()
        await settle()
        assert events == [("relocate", [3]), ("read", [3])]
        assert state.loads == [(3, [b"v"])] and rt.owner_error(_key_of(rt, 3)) == E.NONE
        gate.clear()
        rt.elect(4, 1)
        await settle()
        rt.resign(4, 2)
        await settle()
        assert relocation.cancelled and events[-1] == ("relocate", [4])
        assert [i for i, _ in state.loads] == [3]
        assert rt.owner_error(_key_of(rt, 4)) == E.NOT_COORDINATOR
    asyncio.run(main())


def test_a_failed_relocation_is_logged_and_the_partition_loads_its_own_records(caplog):
    async def main():
        events = []
        rt = leader_runtime(OrderedLog(events, {5: [Record(key=b"k", value=b"v")]}),
                            GatedRelocation(events, error=KqliteError("no leader")))
        state = _attached(rt)
        with caplog.at_level(logging.ERROR, logger="kqlite.server"):
            rt.elect(5, 1)
            await settle()
        assert events == [("relocate", [5]), ("read", [5])]
        assert state.loads == [(5, [b"v"])] and rt.owner_error(_key_of(rt, 5)) == E.NONE
        assert f"moving the records of {OFFSETS_TOPIC}-5's keys" in caplog.text
    asyncio.run(main())


def test_the_single_broker_relocates_every_partition_before_it_loads_them(tmp_path):
    async def main():
        events = []
        rt = runtime(OrderedLog(events), relocation=GatedRelocation(events))
        _attached(rt)
        await rt.load_at_start()
        assert events == [("relocate", list(range(50))), ("read", list(range(50)))]
        rt = runtime(OrderedLog(events), relocation=GatedRelocation(events, error=KqliteError(
            "disk")))
        state = _attached(rt)
        with pytest.raises(KqliteError):
            await rt.load_at_start()
        assert state.loads == []
    asyncio.run(main())


def test_the_single_brokers_offsets_runtime_moves_the_data_dir_and_no_other_does(tmp_path):
    with kqlite.open(tmp_path / "data") as db:
        broker = types.SimpleNamespace(db=db, io=types.SimpleNamespace(run=_in_thread))
        relocation = sole_broker_runtime(broker, OFFSETS_STATE).relocation
        assert isinstance(relocation, DataDirRelocation)
        assert relocation.move == db.offsets.ensure_kafka_placement
        other = StateTopic("__transaction_state", 50, {}, append_timeout_ms=1)
        assert sole_broker_runtime(broker, other).relocation is None


def test_the_group_coordinator_leaves_out_the_groups_another_partition_holds():
    """A stray of the legacy placement, tombstoned there once moved or not moved yet,
    belongs to its own partition's coordinator."""
    async def main():
        stray = "my-group"                                    # Kafka's 12, legacy 36
        legacy = legacy_partition_for_key(stray, 50)
        rt = leader_runtime(MemoryStateLog())
        native = _key_of(rt, legacy)
        value = GroupMetadataValue("consumer", 3, "range", "m", 5, ())
        rt.state_log.records[legacy] = [
            group_record(stray, value), group_record(native, value),
            *commit_records(stray, {("t", 0): OffsetAndMetadata(7)}, 1),
            *commit_records(native, {("t", 0): OffsetAndMetadata(8)}, 1)]
        c = GroupCoordinator(rt, 0.0, clock=lambda: 1.0)
        rt.elect(legacy, 1)
        await settle()
        assert rt.partition_for(stray) == 12 != legacy
        assert c.group(stray) is None and await c.offsets.fetch(stray) == ({}, set())
        assert c.group(native).generation == 3
        assert await c.offsets.fetch(native) == ({("t", 0): OffsetAndMetadata(8)}, set())
    asyncio.run(main())


def test_find_coordinator_asks_the_placement_for_the_leader_of_the_keys_partition():
    class Recording(FixedPlacement):
        async def coordinator_for(self, index):
            return E.NONE, index, "h", 1

    async def main():
        rt = runtime()
        rt.placement = Recording()
        assert await rt.coordinator_for("my-group") == (E.NONE, rt.partition_for("my-group"),
                                                        "h", 1)
    asyncio.run(main())


# -- Appends -----------------------------------------------------------------------------

def test_appends_go_to_the_keys_partition_with_acks_and_a_timeout_and_map_their_errors():
    async def main():
        log = MemoryStateLog()
        rt = leader_runtime(log)
        _attached(rt)
        key = "g"
        index = rt.partition_for(key)
        record = Record(key=b"k", value=b"v")
        # Not owned, then loading: nothing is written.
        assert await rt.append(key, [record]) == E.NOT_LEADER_OR_FOLLOWER
        assert await rt.append(key, [record], errors=OFFSET_COMMIT_ERRORS) == \
            E.NOT_COORDINATOR
        log.gate = asyncio.Event()
        rt.elect(index, 1)
        await settle()
        assert await rt.append(key, [record], errors=OFFSET_COMMIT_ERRORS) == \
            E.NOT_COORDINATOR
        assert log.appends == []
        log.gate.set()
        await settle()
        # Owned: acks=-1 and the state topic's timeout unless named.
        assert await rt.append(key, [record]) == E.NONE
        assert await rt.append(key, [record], acks=1, timeout_ms=7) == E.NONE
        assert [(i, a, t) for i, _r, a, t in log.appends] == [
            (index, -1, TOPIC.append_timeout_ms), (index, 1, 7)]
        assert log.records[index] == [record, record]
        log.append_error = E.NOT_ENOUGH_REPLICAS
        assert await rt.append(key, [record]) == E.NOT_ENOUGH_REPLICAS
        assert await rt.append(key, [record], errors=OFFSET_COMMIT_ERRORS) == \
            E.COORDINATOR_NOT_AVAILABLE
        log.append_error = E.REQUEST_TIMED_OUT       # not in the table: answered as it is
        assert await rt.append(key, [record], errors=OFFSET_COMMIT_ERRORS) == \
            E.REQUEST_TIMED_OUT
    asyncio.run(main())


# -- The state logs ----------------------------------------------------------------------

class FakePartition:
    """The partition seam's append, recorded; answers ``code``."""

    def __init__(self, code=E.NONE):
        self.code = code
        self.appended = []

    async def append(self, records, *, acks, timeout_ms, verification_guard=None):
        self.appended.append((records, acks, timeout_ms))
        return AppendResult(self.code)


class FakeReplicas:
    def __init__(self, partitions):
        self.partitions = partitions

    async def get(self, topic, index):
        if (topic, index) not in self.partitions:
            raise PartitionError(E.NOT_LEADER_OR_FOLLOWER)
        return self.partitions[(topic, index)]


class FakeLog:
    def __init__(self, records, start_offset=0):
        self.records = records
        self.start_offset = start_offset
        self.isolation = None

    def read_batches(self, start, max_bytes, isolation=None):
        self.isolation = isolation
        return b"".join(build_batch([r], base_offset=r.offset) for r in self.records
                        if r.offset >= start)


class FakeLease:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        return self.log

    def __exit__(self, *exc):
        return False


class FakeBroker:
    def __init__(self, partitions=(), logs=None):
        self.replicas = FakeReplicas(dict(partitions))
        self.logs = logs or {}
        self.db = self
        self.io = self

    async def run(self, fn, *args):
        return fn(*args)

    def leased_log(self, topic, index):
        return FakeLease(self.logs[(topic, index)])


def test_the_partition_state_log_appends_one_batch_through_the_partition_seam():
    async def main():
        partition = FakePartition()
        log = PartitionStateLog(TOPIC, FakeBroker({(OFFSETS_TOPIC, 4): partition}))
        records = [Record(key=b"a", value=b"1", timestamp=5), Record(key=b"b", value=None,
                                                                      timestamp=5)]
        assert await log.append(4, records, acks=-1, timeout_ms=5000) == E.NONE
        ((data, acks, timeout),) = partition.appended
        assert (acks, timeout) == (-1, 5000)
        header, decoded = decode_batch(data)
        assert header.size == len(data)                              # one batch
        assert [(r.key, r.value) for r in decoded] == [(b"a", b"1"), (b"b", None)]
        partition.code = E.NOT_ENOUGH_REPLICAS
        assert await log.append(4, records, acks=-1, timeout_ms=1) == E.NOT_ENOUGH_REPLICAS
        # A partition this broker does not serve: the seam's refusal.
        assert await log.append(5, records, acks=-1, timeout_ms=1) == E.NOT_LEADER_OR_FOLLOWER
    asyncio.run(main())


def test_the_partition_state_log_reads_from_the_log_start_to_the_log_end():
    async def main():
        stored = [Record(key=b"k", value=b"v", offset=o) for o in range(5)]
        fake = FakeLog(stored, start_offset=2)
        log = PartitionStateLog(TOPIC, FakeBroker(logs={(OFFSETS_TOPIC, 1): fake}))
        assert await log.read([1], lambda batches: [r.offset for _h, rs in batches
                                                     for r in rs]) == {1: [2, 3, 4]}
        assert fake.isolation is Isolation.LOG_END
    asyncio.run(main())


async def _in_thread(fn, *args):
    return fn(*args)


def test_the_data_dir_state_log_writes_as_the_embedded_api_and_refuses_what_is_too_large(
        tmp_path, caplog):
    async def main():
        with kqlite.open(tmp_path / "data") as db:
            log = DataDirStateLog(OFFSETS_STATE, db, _in_thread)
            assert log.shared_database is db
            assert await log.append(3, [Record(key=b"k", value=b"v")], acks=-1,
                                    timeout_ms=0) == E.NONE
            assert db.topics.get(OFFSETS_TOPIC) is not None          # created on first write
            assert db.partitions_for(OFFSETS_TOPIC) == OFFSETS_STATE.partitions
            with db.leased_log(OFFSETS_TOPIC, 3) as lg:
                (batch,) = list(lg.batch_headers())
            assert batch.partition_leader_epoch == -1                # as the embedded API
            huge = Record(key=b"k", value=b"x" * (2 << 20))
            with caplog.at_level(logging.WARNING, logger="kqlite.server"):
                assert await log.append(3, [huge], acks=-1, timeout_ms=0) == \
                    E.MESSAGE_TOO_LARGE
            assert f"{OFFSETS_TOPIC}-3: 1 record(s) not written" in caplog.text
            assert await log.read([3, 4], lambda bs: [r.value for r in data_records(bs)]) == {
                3: [b"v"], 4: []}
    asyncio.run(main())


# -- Committed offsets over the runtime ------------------------------------------------

def test_a_commit_being_written_is_pending_and_visible_once_acknowledged():
    """What OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT for."""
    async def main():
        log = MemoryStateLog()
        rt = runtime(log)
        offsets = GroupOffsets(rt)
        first = OffsetAndMetadata(1, -1, "", 10)
        assert await offsets.commit("p", {("t", 0): first}, 10) == {("t", 0): E.NONE}
        log.gate = asyncio.Event()
        second = {("t", 0): OffsetAndMetadata(2, -1, "", 11),
                  ("t", 3): OffsetAndMetadata(4, -1, "", 11)}
        writing = asyncio.create_task(offsets.commit("p", second, 11))
        await settle()
        assert await offsets.fetch("p", require_stable=True) == (
            {("t", 0): first}, {("t", 0), ("t", 3)})
        assert await offsets.fetch("p") == ({("t", 0): first}, set())
        assert await offsets.fetch("other", require_stable=True) == ({}, set())
        log.gate.set()
        assert await writing == {("t", 0): E.NONE, ("t", 3): E.NONE}
        assert await offsets.fetch("p", require_stable=True) == (second, set())
        assert await offsets.groups() == ["p"]
        (_i, records, acks, _t) = log.appends[-1]
        assert acks == -1 and [decode_offset_key(r.key) for r in records] == [
            ("p", "t", 0), ("p", "t", 3)]
    asyncio.run(main())


def test_a_failed_commit_answers_kafkas_error_and_keeps_nothing():
    async def main():
        log = MemoryStateLog()
        offsets = GroupOffsets(runtime(log))
        log.append_error = E.NOT_ENOUGH_REPLICAS
        assert await offsets.commit("p", {("t", 0): OffsetAndMetadata(1)}, 10) == {
            ("t", 0): E.COORDINATOR_NOT_AVAILABLE}
        assert await offsets.fetch("p") == ({}, set())
    asyncio.run(main())


def test_a_commit_acknowledged_after_the_partition_moved_away_is_left_to_the_log():
    async def main():
        log = MemoryStateLog()
        rt = leader_runtime(log)
        c = GroupCoordinator(rt, 0.0, clock=lambda: 1.0)
        index = rt.partition_for("g")
        rt.elect(index, 1)
        await settle()
        log.gate = asyncio.Event()
        writing = asyncio.create_task(c.offsets.commit("g", {("t", 0): OffsetAndMetadata(5)}, 1))
        await settle()
        rt.resign(index, 2)
        log.gate.set()
        assert await writing == {("t", 0): E.NONE}
        rt.elect(index, 3)                       # back: the commit comes from the log
        await settle()
        assert await c.offsets.fetch("g") == ({("t", 0): OffsetAndMetadata(5)}, set())
    asyncio.run(main())


def test_deleting_offsets_drops_them_first_and_writes_tombstones_with_acks_1(caplog):
    async def main():
        log = MemoryStateLog()
        offsets = GroupOffsets(runtime(log))
        kept, gone = OffsetAndMetadata(1), OffsetAndMetadata(2)
        await offsets.commit("g", {("t", 0): kept, ("t", 1): gone}, 1)
        assert await offsets.delete("g", [("t", 1), ("u", 0)]) == (
            {("t", 0): kept, ("t", 1): gone}, [("t", 1)])
        (_i, records, acks, _t) = log.appends[-1]
        assert acks == 1 and [(decode_offset_key(r.key), r.value) for r in records] == [
            (("g", "t", 1), None)]
        assert await offsets.fetch("g") == ({("t", 0): kept}, set())
        assert await offsets.delete("g", [("u", 0)]) == ({("t", 0): kept}, [])
        log.append_error = E.NOT_LEADER_OR_FOLLOWER      # only logged: the cache went first
        with caplog.at_level(logging.WARNING, logger="kqlite.server"):
            assert await offsets.delete("g") == ({("t", 0): kept}, [("t", 0)])
        assert await offsets.fetch("g") == ({}, set()) and await offsets.groups() == []
        assert "tombstones of 1 offset(s) were not written" in caplog.text
    asyncio.run(main())


def test_on_a_shared_data_dir_every_read_sees_the_other_processes_commits(tmp_path):
    """The single broker's offsets: an embedded process's commit is the broker's next
    answer, and the broker's commit the embedded process's, with nothing cached between."""
    async def main():
        with kqlite.open(tmp_path / "data") as broker_db, \
                kqlite.open(tmp_path / "data") as embedded:
            offsets = GroupOffsets(runtime(DataDirStateLog(OFFSETS_STATE, broker_db,
                                                           _in_thread)))
            embedded.offsets.commit("g", {("t", 0): OffsetAndMetadata(3, -1, "e", 9)})
            assert await offsets.fetch("g") == ({("t", 0): OffsetAndMetadata(3, -1, "e", 9)},
                                                set())
            assert await offsets.commit("g", {("t", 0): OffsetAndMetadata(4, 2, "b", 10)},
                                        10) == {("t", 0): E.NONE}
            assert embedded.offsets.committed_details("g") == {
                ("t", 0): OffsetAndMetadata(4, 2, "b", 10)}
            embedded.offsets.commit("g", {("t", 0): 5})
            assert (await offsets.fetch("g"))[0][("t", 0)].offset == 5
            assert await offsets.groups() == ["g"]
            had = embedded.offsets.committed_details("g")
            assert await offsets.delete("g") == (had, [("t", 0)])
            assert embedded.offsets.committed("g") == {}
    asyncio.run(main())


def test_on_a_shared_data_dir_a_group_record_too_large_lets_the_group_go_on(tmp_path):
    """As the single broker always did: not stored, and the sync succeeds."""
    async def main():
        with kqlite.open(tmp_path / "data") as db:
            rt = runtime(DataDirStateLog(OFFSETS_STATE, db, _in_thread))
            c = GroupCoordinator(rt, 0.0, clock=lambda: 1.0)
            c.start()
            await c.loaded()
            join = await c.join("big", Join("", "c", "/h", 10_000, 30_000, "consumer",
                                            (("range", b"R"),)))
            sync = await c.sync("big", Sync(join.member_id, 1,
                                            ((join.member_id, b"A" * (2 << 20)),)))
            assert sync.error == E.NONE and len(sync.assignment) == 2 << 20
            await c.stop()
    asyncio.run(main())
