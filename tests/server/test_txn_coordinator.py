"""The transaction coordinator's shell (kqlite/server/coordinator/txn/coordinator.py) on the
coordinator runtime's doubles (coordinator_doubles.py) and a marker channel double,
without sockets: every change logged before it is answered, Kafka's append error table,
the coordinator epoch re-checked after an append, loading and unloading, the markers
(retried, dropped, abandoned) and the completion, markers resent for a Prepare* found at
load, the timeout abort with its epoch bump, id expiration, and a data dir's
``__transaction_state`` written by another process."""

import asyncio

import pytest

import kqlite
from kqlite.db.transaction_state import read_transaction_records, transaction_record
from kqlite.format.internal_topics import TRANSACTIONS_TOPIC, transaction_partition_for
from kqlite.format.transaction_records import (TransactionLogValue, TransactionStatus,
                                               decode_transaction_key,
                                               decode_transaction_value)
from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.ownership import Ownership, SoleOwnership
from kqlite.server.coordinator.runtime import CoordinatorRuntime
from kqlite.server.coordinator.state_log import DataDirStateLog
from kqlite.server.coordinator.state_topic import TRANSACTIONS_STATE
from kqlite.server.coordinator.txn.config import TransactionConfig
from kqlite.server.coordinator.txn.coordinator import TransactionCoordinator
from kqlite.server.coordinator.txn.markers import MarkerChannel
from kqlite.server.coordinator.txn.transitions import ExpectedProducer

from coordinator_doubles import FixedPlacement, MemoryStateLog, settle

E = ErrorCode
S = TransactionStatus
TID = "txn-1"
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)
INDEX = transaction_partition_for(TID)


class Clock:
    def __init__(self, now=1_700_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


class Markers(MarkerChannel):
    """Answers every marker from ``answers`` ({(topic, partition): [codes, then NONE]});
    records every delivery; ``gate`` holds deliveries; ``known`` the partitions that exist."""

    def __init__(self, known=(A0, A1, B0)):
        self.known = set(known)
        self.answers = {}
        self.delivered = []
        self.gate = None

    async def leaders_known(self, partitions):
        return set(partitions) & self.known

    async def deliver(self, marker):
        if self.gate is not None:
            await self.gate.wait()
        self.delivered.append(marker)
        return {tp: (self.answers.get(tp) or [E.NONE]).pop(0) if self.answers.get(tp)
                else E.NONE for tp in marker.partitions}


class Pids:
    def __init__(self, start=100):
        self.next = start

    async def __call__(self):
        self.next += 1
        return self.next - 1


def _coordinator(state_log=None, ownership=None, markers=None, clock=None, **config):
    log_ = state_log if state_log is not None else MemoryStateLog()
    rt = CoordinatorRuntime(TRANSACTIONS_STATE, placement=FixedPlacement(50),
                            ownership=ownership if ownership is not None else SoleOwnership(),
                            state_log=log_)
    config.setdefault("abort_timed_out_interval_ms", 3_600_000)
    tc = TransactionCoordinator(rt, Pids(), markers or Markers(),
                                TransactionConfig(retry_backoff_ms=1, **config),
                                clock=clock or Clock())
    return tc, log_


def _logged(state_log, tid=TID):
    """The states logged for ``tid``, in order (None: a tombstone)."""
    out = []
    for records in state_log.records.values():
        for r in records:
            if decode_transaction_key(r.key) == tid:
                v = decode_transaction_value(r.value)
                out.append(None if v is None else v.status)
    return out


async def _started(tc):
    tc.start()
    await tc.loaded()
    return tc


async def _begin(tc, parts=(A0, B0), timeout=60000):
    code, pid, epoch = await tc.init_producer_id(TID, timeout)
    assert code == E.NONE
    assert await tc.add_partitions(TID, pid, epoch, set(parts)) == E.NONE
    return pid, epoch


async def _done(tc):
    for _ in range(200):
        if not tc._completions:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("markers still being written")


def test_init_logs_empty_before_answering_and_bumps_on_each_call():
    async def main():
        tc, log_ = _coordinator()
        await _started(tc)
        assert await tc.init_producer_id(TID, 60000) == (E.NONE, 100, 0)
        assert await tc.init_producer_id(TID, 60000) == (E.NONE, 100, 1)
        assert _logged(log_) == [S.EMPTY, S.EMPTY]
        (index, records, acks, timeout), _second = log_.appends
        assert (index, acks, timeout) == (INDEX, -1, 60000)
        assert decode_transaction_value(records[0].value).producer_epoch == 0
        # KIP-360: with the current epoch expected, bumped again; a retry of that bump
        # gets the same epoch.
        assert await tc.init_producer_id(TID, 60000, ExpectedProducer(100, 1)) == (E.NONE, 100, 2)
        assert await tc.init_producer_id(TID, 60000, ExpectedProducer(100, 1)) == (E.NONE, 100, 2)
        assert await tc.init_producer_id(TID, 60000, ExpectedProducer(100, 0)) == \
            (E.PRODUCER_FENCED, -1, -1)
        assert await tc.init_producer_id("", 60000) == (E.INVALID_REQUEST, -1, -1)
        assert await tc.init_producer_id(TID, 900001) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
        await tc.stop()

        # An epoch that can no longer be bumped, expected by a producer that is not at it:
        # Kafka's IllegalStateException, an UNKNOWN_SERVER_ERROR answer.
        tc, log_ = _coordinator(MemoryStateLog({INDEX: [_stored(S.EMPTY, epoch=32766)]}))
        await _started(tc)
        assert await tc.init_producer_id(TID, 60000, ExpectedProducer(5, 32765)) == \
            (E.UNKNOWN_SERVER_ERROR, -1, -1)
        await tc.stop()
    asyncio.run(main())


def test_requests_wait_for_the_load_and_a_partition_not_owned_is_not_coordinated():
    async def main():
        gate = asyncio.Event()
        tc, log_ = _coordinator(MemoryStateLog(gate=gate))
        tc.start()
        await settle()
        assert (await tc.init_producer_id(TID, 60000))[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        code, _unknown, _found = await tc.list_transactions()
        assert code == E.COORDINATOR_LOAD_IN_PROGRESS
        gate.set()
        await tc.loaded()
        assert (await tc.init_producer_id(TID, 60000))[0] == E.NONE
        await tc.stop()
        # A stopped coordinator is not available.
        assert (await tc.init_producer_id(TID, 60000))[0] == E.COORDINATOR_NOT_AVAILABLE

        tc, log_ = _coordinator(ownership=Ownership())
        assert (await tc.init_producer_id(TID, 60000))[0] == E.NOT_COORDINATOR
        tc.runtime.elect(INDEX, 7)
        await settle()
        assert (await tc.init_producer_id(TID, 60000))[0] == E.NONE
        assert tc.runtime.coordinator_epoch(INDEX) == 7
        tc.runtime.resign(INDEX, 8)
        assert tc.metadata(TID) is None
        assert (await tc.init_producer_id(TID, 60000))[0] == E.NOT_COORDINATOR
    asyncio.run(main())


@pytest.mark.parametrize("append_error,answer", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
def test_a_failed_append_is_answered_by_kafkas_table_and_drops_the_change(append_error, answer):
    async def main():
        tc, log_ = _coordinator()
        await _started(tc)
        pid, epoch = await _begin(tc, parts=[A0])
        log_.append_error = append_error
        assert await tc.add_partitions(TID, pid, epoch, {B0}) == answer
        meta = tc.metadata(TID)
        assert meta.pending is None and meta.partitions == {A0}
        log_.append_error = E.NONE
        assert await tc.add_partitions(TID, pid, epoch, {B0}) == E.NONE
        assert tc.metadata(TID).partitions == {A0, B0}
        await tc.stop()
    asyncio.run(main())


def test_an_append_that_outlives_the_coordinator_epoch_is_not_completed():
    async def main():
        gate = asyncio.Event()
        tc, log_ = _coordinator(ownership=Ownership())
        tc.runtime.elect(INDEX, 1)
        await settle()
        pid, epoch = await _begin(tc, parts=[A0])
        log_.gate = gate
        request = asyncio.ensure_future(tc.end_txn(TID, pid, epoch, True))
        await settle()
        assert tc.metadata(TID).pending is S.PREPARE_COMMIT
        tc.runtime.resign(INDEX, 2)          # the partition moves away during the append
        tc.runtime.elect(INDEX, 3)
        gate.set()
        assert await request == E.NOT_COORDINATOR
        await settle()
        await tc.stop()
    asyncio.run(main())


def test_commit_answers_before_the_markers_then_completes():
    async def main():
        markers = Markers()
        markers.gate = asyncio.Event()
        tc, log_ = _coordinator(markers=markers, completion_wait_ms=0)
        await _started(tc)
        pid, epoch = await _begin(tc)
        assert await tc.end_txn(TID, pid, epoch, True) == E.NONE
        # Answered: PrepareCommit is logged, the markers are not written yet.
        assert _logged(log_) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT]
        meta = tc.metadata(TID)
        assert (meta.state, meta.pending, meta.partitions) == \
            (S.PREPARE_COMMIT, S.COMPLETE_COMMIT, {A0, B0})
        # Every other request waits meanwhile; a retried EndTxn too.
        assert await tc.add_partitions(TID, pid, epoch, {A1}) == E.CONCURRENT_TRANSACTIONS
        assert await tc.end_txn(TID, pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
        assert (await tc.describe(TID))[1].state is S.PREPARE_COMMIT
        markers.gate.set()
        await _done(tc)
        (marker,) = markers.delivered
        assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                marker.commit, marker.partitions) == (pid, epoch, 0, True, {A0, B0})
        assert _logged(log_)[-1] is S.COMPLETE_COMMIT
        meta = tc.metadata(TID)
        assert (meta.state, meta.pending, meta.partitions) == \
            (S.COMPLETE_COMMIT, None, frozenset())
        assert await tc.end_txn(TID, pid, epoch, True) == E.NONE          # a retry
        assert await tc.end_txn(TID, pid, epoch, False) == E.INVALID_TXN_STATE
        await tc.stop()
    asyncio.run(main())


def test_the_next_request_waits_for_the_completion_instead_of_being_refused():
    async def main():
        markers = Markers()
        markers.gate = asyncio.Event()
        tc, log_ = _coordinator(markers=markers, completion_wait_ms=5000)
        await _started(tc)
        pid, epoch = await _begin(tc)
        assert await tc.end_txn(TID, pid, epoch, True) == E.NONE   # markers held back
        assert tc.metadata(TID).state is S.PREPARE_COMMIT
        # The next transaction's AddPartitionsToTxn comes while they are written: it waits
        # for the completion and is then answered as after it.
        request = asyncio.ensure_future(tc.add_partitions(TID, pid, epoch, {A1}))
        await settle()
        assert not request.done()
        markers.gate.set()
        assert await request == E.NONE
        assert _logged(log_)[-2:] == [S.COMPLETE_COMMIT, S.ONGOING]
        assert tc.metadata(TID).partitions == {A1}
        await tc.stop()
    asyncio.run(main())


def test_without_a_completion_wait_the_next_request_is_refused_at_once_as_kafka_does():
    async def main():
        markers = Markers()
        markers.gate = asyncio.Event()
        tc, log_ = _coordinator(markers=markers, completion_wait_ms=0)
        await _started(tc)
        pid, epoch = await _begin(tc)
        assert await tc.end_txn(TID, pid, epoch, True) == E.NONE
        assert await tc.add_partitions(TID, pid, epoch, {A1}) == E.CONCURRENT_TRANSACTIONS
        assert (await tc.init_producer_id(TID, 60000))[0] == E.CONCURRENT_TRANSACTIONS
        markers.gate.set()
        await _done(tc)
        assert await tc.add_partitions(TID, pid, epoch, {A1}) == E.NONE
        await tc.stop()
    asyncio.run(main())


def test_markers_are_retried_dropped_or_abandoned_as_kafka_does():
    async def main():
        markers = Markers(known=(A0, A1))        # b-0's topic was deleted
        markers.answers = {A0: [E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT],
                           A1: [E.UNSUPPORTED_FOR_MESSAGE_FORMAT]}
        tc, log_ = _coordinator(markers=markers)
        await _started(tc)
        pid, epoch = await _begin(tc, parts=[A0, A1, B0])
        assert await tc.end_txn(TID, pid, epoch, False) == E.NONE
        await _done(tc)
        assert [m.partitions for m in markers.delivered] == [{A0, A1}, {A0}, {A0}]
        assert tc.metadata(TID).state is S.COMPLETE_ABORT

        # A fenced marker abandons the transaction: it stays PrepareCommit, pending,
        # and every request for it waits.
        markers.answers = {A0: [E.TRANSACTION_COORDINATOR_FENCED]}
        assert await tc.add_partitions(TID, pid, epoch, {A0, A1}) == E.NONE
        assert await tc.end_txn(TID, pid, epoch, True) == E.NONE
        await _done(tc)
        meta = tc.metadata(TID)
        assert (meta.state, meta.pending) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        assert (await tc.init_producer_id(TID, 60000))[0] == E.CONCURRENT_TRANSACTIONS
        await tc.stop()
    asyncio.run(main())


def test_a_completion_whose_write_fails_is_retried():
    async def main():
        markers = Markers()
        markers.gate = asyncio.Event()
        tc, log_ = _coordinator(markers=markers)
        await _started(tc)
        pid, epoch = await _begin(tc, parts=[A0])
        assert await tc.end_txn(TID, pid, epoch, True) == E.NONE
        log_.append_error = E.NOT_ENOUGH_REPLICAS
        markers.gate.set()
        for _ in range(50):
            await asyncio.sleep(0.005)
        assert tc.metadata(TID).pending is S.COMPLETE_COMMIT    # kept for the retry
        log_.append_error = E.NONE
        await _done(tc)
        assert tc.metadata(TID).state is S.COMPLETE_COMMIT
        await tc.stop()
    asyncio.run(main())


def _stored(status, partitions=(), pid=5, epoch=2, start=1000, updated=1000):
    value = TransactionLogValue(pid, epoch, 60000, status,
                                None if status is S.EMPTY else
                                tuple((t, (p,)) for t, p in partitions), updated, start)
    return transaction_record(TID, value)


@pytest.mark.parametrize("status,commit", [(S.PREPARE_COMMIT, True), (S.PREPARE_ABORT, False)])
def test_a_decision_found_at_load_gets_its_markers_and_completion(status, commit):
    async def main():
        markers = Markers()
        tc, log_ = _coordinator(MemoryStateLog({INDEX: [_stored(S.ONGOING, [A0]),
                                                       _stored(status, [A0, B0])]}),
                                markers=markers)
        await _started(tc)
        await _done(tc)
        (marker,) = markers.delivered
        assert (marker.producer_id, marker.producer_epoch, marker.commit,
                marker.partitions) == (5, 2, commit, {A0, B0})
        assert _logged(log_)[-1] is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
        # Loaded ids have no last epoch: a retry presenting the old epoch is fenced.
        assert tc.metadata(TID).last_producer_epoch == -1
        await tc.stop()
    asyncio.run(main())


def test_an_open_transaction_past_its_timeout_is_fenced_and_aborted():
    async def main():
        clock = Clock()
        markers = Markers()
        tc, log_ = _coordinator(markers=markers, clock=clock)
        await _started(tc)
        pid, epoch = await _begin(tc, timeout=1000)
        clock.now += 1.0
        assert await tc.abort_timed_out() == []          # start + timeout == now: not yet
        clock.now += 0.002
        assert await tc.abort_timed_out() == [TID]
        await _done(tc)
        (marker,) = markers.delivered
        assert (marker.producer_epoch, marker.commit) == (epoch + 1, False)
        meta = tc.metadata(TID)
        assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
        # The old producer is fenced; its next InitProducerId gets a new epoch.
        assert await tc.end_txn(TID, pid, epoch, True) == E.PRODUCER_FENCED
        assert await tc.add_partitions(TID, pid, epoch, {A0}) == E.PRODUCER_FENCED
        assert await tc.init_producer_id(TID, 60000) == (E.NONE, pid, epoch + 2)
        await tc.stop()
    asyncio.run(main())


def test_the_abort_timer_runs_on_its_interval():
    async def main():
        clock = Clock()
        tc, log_ = _coordinator(clock=clock, abort_timed_out_interval_ms=5)
        await _started(tc)
        await _begin(tc, timeout=1000)
        clock.now += 2
        for _ in range(100):
            if tc.metadata(TID).state is S.COMPLETE_ABORT:
                break
            await asyncio.sleep(0.005)
        assert tc.metadata(TID).state is S.COMPLETE_ABORT
        await tc.stop()
    asyncio.run(main())


def test_a_second_producer_fences_the_open_transaction_of_the_first():
    async def main():
        markers = Markers()
        tc, log_ = _coordinator(markers=markers)
        await _started(tc)
        pid, epoch = await _begin(tc)
        assert await tc.init_producer_id(TID, 60000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
        await _done(tc)
        assert markers.delivered[0].producer_epoch == epoch + 1
        assert not markers.delivered[0].commit
        assert await tc.init_producer_id(TID, 60000) == (E.NONE, pid, epoch + 2)
        assert await tc.end_txn(TID, pid, epoch, True) == E.PRODUCER_FENCED
        await tc.stop()
    asyncio.run(main())


def test_idle_ids_expire_and_are_forgotten():
    async def main():
        clock = Clock()
        tc, log_ = _coordinator(clock=clock, id_expiration_ms=1000)
        await _started(tc)
        code, pid, epoch = await tc.init_producer_id(TID, 60000)
        code, pid2, _ = await tc.init_producer_id("other", 60000)
        assert await tc.add_partitions("other", pid2, 0, {A0}) == E.NONE   # open: stays
        clock.now += 1.0
        assert await tc.remove_expired() == [TID]
        assert _logged(log_)[-1] is None               # its tombstone
        assert tc.metadata(TID) is None and tc.metadata("other") is not None
        assert await tc.add_partitions(TID, pid, epoch, {A0}) == E.INVALID_PRODUCER_ID_MAPPING
        assert (await tc.describe(TID))[0] == E.TRANSACTIONAL_ID_NOT_FOUND
        await tc.stop()
    asyncio.run(main())


def test_list_transactions_filters():
    async def main():
        clock = Clock()
        tc, log_ = _coordinator(clock=clock)
        await _started(tc)
        await tc.init_producer_id("idle", 60000)
        await _begin(tc)
        clock.now += 10
        code, unknown, found = await tc.list_transactions()
        assert code == E.NONE and [m.transactional_id for m in found] == ["idle", TID]
        _, unknown, found = await tc.list_transactions(["Ongoing", "Bogus"])
        assert unknown == ["Bogus"] and [m.transactional_id for m in found] == [TID]
        _, _, found = await tc.list_transactions(["Bogus"])
        assert found == []
        _, _, found = await tc.list_transactions(producer_ids=[101])
        assert [m.transactional_id for m in found] == [TID]
        # Kafka's filter keeps `now - start > duration`: TID has been open for 10 s, and an
        # id with no transaction (start -1) always passes it, as in Kafka.
        _, _, found = await tc.list_transactions(duration_ms=9_000)
        assert [m.transactional_id for m in found] == ["idle", TID]
        _, _, found = await tc.list_transactions(duration_ms=11_000)
        assert [m.transactional_id for m in found] == ["idle"]
        await tc.stop()
    asyncio.run(main())


def test_a_data_dir_shared_with_another_writer(tmp_path):
    """The single broker's __transaction_state has other writers: what another process
    logs is taken over before the next request, and what the coordinator logged itself
    changes nothing when it is read back."""
    async def main():
        db = kqlite.open(tmp_path)
        other = kqlite.open(tmp_path)

        async def run(fn, *args):
            return await asyncio.to_thread(fn, *args)
        state_log = DataDirStateLog(TRANSACTIONS_STATE, db, run)
        clock = Clock()
        tc, _ = _coordinator(state_log, clock=clock)
        await _started(tc)
        pid, epoch = await _begin(tc, parts=[A0])
        held = tc.metadata(TID)
        assert (await tc.describe(TID))[1] == held             # our own records: no change
        # Another process fences the id (as an embedded transaction with the same id would).
        value = held.to_value()._replace(producer_epoch=epoch + 1, status=S.COMPLETE_ABORT,
                                         partitions=())
        other.transaction_state.write(TID, value)
        assert await tc.add_partitions(TID, pid, epoch, {A0}) == E.PRODUCER_FENCED
        assert tc.metadata(TID).producer_epoch == epoch + 1
        # An id another process left Ongoing is aborted by the broker's timeout.
        other.transaction_state.write("embedded", TransactionLogValue(
            999, 0, 1000, S.ONGOING, (("a", (1,)),), int(clock.now * 1000),
            int(clock.now * 1000)))
        clock.now += 2
        assert "embedded" in await tc.abort_timed_out()
        # Its tombstone makes the broker forget an id.
        other.transaction_state.write(TID, None)
        assert (await tc.describe(TID))[0] == E.TRANSACTIONAL_ID_NOT_FOUND
        await tc.stop()
        stored = db.transaction_state.partition_states(INDEX)
        assert stored[TID].value is None
        other.close()
        db.close()
    asyncio.run(main())


def test_a_partition_replays_to_its_latest_records():
    records = [_stored(S.ONGOING, [A0]), transaction_record("gone", None),
               _stored(S.PREPARE_COMMIT, [A0])]
    records = [r._replace(offset=i) for i, r in enumerate(records)]
    replayed = read_transaction_records(iter(records))
    assert replayed[TID].offset == 2 and replayed[TID].value.status is S.PREPARE_COMMIT
    assert replayed["gone"].value is None
    assert TRANSACTIONS_TOPIC == TRANSACTIONS_STATE.name
