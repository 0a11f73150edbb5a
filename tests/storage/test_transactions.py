"""Transactions in a Log: transactional batches and markers judged and learnt as Kafka's
ProducerStateManager and UnifiedLog do, the last stable offset, the ``.txnindex``
written on ABORT, rebuilt by recovery, replicated alike, shared between processes.

Kafka's unit cases copied in spirit (ProducerStateManagerTest, UnifiedLogTest), each
under Kafka's name turned into Python's."""

import os

import pytest

import kqlite
from kqlite.errors import (InvalidProducerEpochError, InvalidRecordError, InvalidTxnStateError,
                           LogFailedError, OutOfOrderSequenceError,
                           TransactionCoordinatorFencedError)
from kqlite.format import parse_header
from kqlite.format.batch import build_batch
from kqlite.format.control_records import build_control_batch
from kqlite.format.rewrite import empty_batch
from kqlite.format.validate import AppendOrigin
from kqlite.storage.log import NO_VERIFICATION, ProducerSummary
from kqlite.storage.producer_state import ProducerStateManager, decode_snapshot
from kqlite.storage.txn_index import AbortedTxn, TransactionIndex

from txn_workload import KAFKA_ABORTED, Producers, all_aborted, kafka_interleaving


def crash(path):
    """The next open treats the last shutdown as unclean (as after kill -9)."""
    os.remove(os.path.join(path, ".kqlite-state"))


# -- UnifiedLogTest ---------------------------------------------------------------------------

def test_transaction_index_updated(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=128 * 5) as log:
        kafka_interleaving(Producers(log))
        assert len(log.segments) > 2
        assert all_aborted(log) == KAFKA_ABORTED
        assert log.last_stable_offset == log.end_offset == 90
        # Each entry lies in the segment holding its marker.
        for seg in log._segments:
            for entry in seg.txnindex.entries():
                assert seg.base_offset <= entry.last_offset < seg.next_offset


@pytest.mark.parametrize("damage", ["all", "last", "last_without_snapshots"])
def test_transaction_index_recovery(tmp_path, damage):
    """testFullTransactionIndexRecovery, testRecoverOnlyLastSegment,
    testRecoverLastSegmentWithNoSnapshots: every .index and .txnindex deleted, or the
    last segment's only (with or without the producer snapshots), after an unclean
    shutdown: recovery writes the same entries again."""
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=128 * 5) as log:
        kafka_interleaving(Producers(log))
        segments = list(log._segments)
    doomed = segments if damage == "all" else segments[-1:]
    for seg in doomed:
        for name in (seg.index.path, seg.txnindex.path):
            if os.path.exists(name):
                os.remove(name)
    if damage == "last_without_snapshots":
        for name in os.listdir(path):
            if name.endswith(".snapshot"):
                os.remove(path / name)
    crash(path)
    with kqlite.Log.open(path, segment_bytes=1024 * 5) as log:
        assert all_aborted(log) == KAFKA_ABORTED
        assert log.last_stable_offset == 90


def test_missing_offset_index_rebuilds_the_transaction_index_after_a_clean_shutdown(tmp_path):
    # Kafka recovers a segment whose .index is missing (LogLoader.loadSegmentFiles).
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=128 * 5) as log:
        kafka_interleaving(Producers(log))
        holder = next(s for s in log._segments if s.txnindex.entries())
    os.remove(holder.index.path)
    os.remove(holder.txnindex.path)
    with kqlite.Log.open(path, segment_bytes=128 * 5) as log:
        assert all_aborted(log) == KAFKA_ABORTED


def test_an_insane_transaction_index_is_rebuilt(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=128 * 5) as log:
        kafka_interleaving(Producers(log))
        holder = next(s for s in log._segments if s.txnindex.entries())
    with open(holder.txnindex.path, "ab") as f:
        f.write(b"\x00" * 10)            # a partial entry: the sanity check fails
    with kqlite.Log.open(path, segment_bytes=128 * 5) as log:
        assert all_aborted(log) == KAFKA_ABORTED
        assert os.path.getsize(holder.txnindex.path) % 34 == 0


def test_transaction_index_updated_through_replication(tmp_path):
    with kqlite.Log.open(tmp_path / "leader-0", segment_bytes=128 * 5) as leader, \
            kqlite.Log.open(tmp_path / "follower-0", segment_bytes=128 * 5) as follower:
        kafka_interleaving(Producers(leader))
        offset = 0
        while offset < leader.end_offset:
            data = leader.read_batches(offset, 300)
            follower.append_batches(data, assign_offsets=False, leader_epoch=0)
            offset = follower.end_offset
        assert all_aborted(follower) == all_aborted(leader) == KAFKA_ABORTED
        assert follower.last_stable_offset == leader.last_stable_offset == 90
        assert follower.active_producers() == leader.active_producers()


def test_last_stable_offset_with_mixed_producer_data(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        first = p.txn(137, 3, epoch=5)
        assert log.last_stable_offset == first
        p.plain(3)
        second = p.txn(983, 3, epoch=5)
        assert log.last_stable_offset == first            # the oldest one holds it
        p.end(137, False, epoch=5)
        assert log.last_stable_offset == second
        p.end(983, True, epoch=5)
        assert log.last_stable_offset == log.end_offset == log.high_watermark


def test_unreplicated_transactions_hold_the_lso_until_the_high_watermark_passes(tmp_path):
    """A decided transaction still holds the LSO while its marker is at or above the high
    watermark (ProducerStateManager's unreplicatedTxns, onHighWatermarkUpdated)."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.set_high_watermark(0)
        p = Producers(log)
        p.plain(2)
        first = p.txn(1, 3)
        marker = p.end(1, True)
        log.advance_high_watermark(marker)               # the marker itself not yet below
        assert log.last_stable_offset == first
        assert log.offset_snapshot().last_stable_offset == first
        log.advance_high_watermark(marker + 1)
        assert log.last_stable_offset == marker + 1
        log.advance_high_watermark(0)                    # never back
        assert log.last_stable_offset == marker + 1


def test_lso_is_clamped_to_the_log_start(tmp_path):
    """testFirstUnstableOffsetDoesNotExceedLogStartOffsetAfterSegmentDeletion: retention
    deletes segments below an open transaction's start; the LSO is the new log start."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 5)
        p.plain(3)
        log.roll()
        p.txn(1, 5)
        assert log.last_stable_offset == 0
        log.delete_records(8)
        assert log.segments == [8]
        assert log.last_stable_offset == 8 == log.start_offset


def test_aborted_transaction_spanning_multiple_segments(tmp_path):
    records = build_batch([b"a", b"b", b"c"], producer_id=137, producer_epoch=5,
                          base_sequence=0, transactional=True)
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=len(records)) as log:
        p = Producers(log)
        first = p.txn(137, 3, epoch=5)
        p.txn(137, 3, epoch=5)                   # spills into the second segment
        assert log.segments == [0, 3]
        assert log.last_stable_offset == first
        marker = p.end(137, False, epoch=5)
        assert log.last_stable_offset == marker + 1
        assert all_aborted(log) == [AbortedTxn(137, 0, marker, marker + 1)]


def test_zombie_coordinator_fenced(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 10)
        p.end(1, False, coordinator_epoch=1)
        p.txn(1, 5)
        p.end(1, True, coordinator_epoch=2)
        end = log.end_offset
        with pytest.raises(TransactionCoordinatorFencedError, match="zombie") as err:
            p.end(1, False, coordinator_epoch=1)
        assert (err.value.coordinator_epoch, err.value.current_coordinator_epoch) == (1, 2)
        assert log.end_offset == end             # nothing stored


def test_zombie_coordinator_fenced_empty_transaction(tmp_path):
    """A follower learns coordinator epoch 1 from replicated batches; as leader, markers of
    epoch 2 without an open transaction are legal; epoch 1 is then fenced."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        data = build_batch([b"x"] * 10, producer_id=1, producer_epoch=0, base_sequence=0,
                           transactional=True)
        marker = build_control_batch(1, 0, 1, True, 5, base_offset=10)
        log.append_batches(data + bytes(marker), assign_offsets=False, leader_epoch=1)
        assert log.active_producers()[0].coordinator_epoch == 1
        log.append_marker(1, 0, 2, False, leader_epoch=1)
        log.append_marker(1, 0, 2, False, leader_epoch=1)
        with pytest.raises(TransactionCoordinatorFencedError):
            log.append_marker(1, 0, 1, False, leader_epoch=1)
        assert all_aborted(log) == []            # empty transactions leave no entry


# -- ProducerStateManagerTest, at the log ------------------------------------------------------

def test_old_epoch_for_control_record(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 2, epoch=3)
        end = log.end_offset
        with pytest.raises(InvalidProducerEpochError) as err:
            p.end(1, True, epoch=2)
        assert (err.value.epoch, err.value.current_epoch) == (2, 3)
        assert log.end_offset == end
        # A follower only logs it: its leader judged the marker (notes 4.5).
        log.append_batches(build_control_batch(1, 2, 0, True, 5, base_offset=end),
                           assign_offsets=False)
        assert log.end_offset == end + 1
        assert log.ongoing_transactions() == []


def test_control_record_bumps_producer_epoch(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.idempotent(1, 5)
        p.end(1, False, epoch=3)                 # the coordinator bumped it (a fence)
        assert log.active_producers()[0].producer_epoch == 3
        with pytest.raises(OutOfOrderSequenceError, match="sequence 5"):
            log.append_as_leader(build_batch([b"x"], producer_id=1, producer_epoch=3,
                                             base_sequence=5), leader_epoch=0)
        with pytest.raises(InvalidProducerEpochError):
            p.idempotent(1, 1, epoch=0)
        log.append_as_leader(build_batch([b"x"], producer_id=1, producer_epoch=3,
                                         base_sequence=0), leader_epoch=0)


def test_skip_empty_transactions(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.end(1, True, coordinator_epoch=3)       # nothing was open: only the epochs move
        p.end(1, False, epoch=1, coordinator_epoch=4)
        first = p.txn(2, 2)
        p.end(1, False, epoch=1, coordinator_epoch=4)
        assert all_aborted(log) == []
        assert log.last_stable_offset == first   # producer 2's transaction is still open
        (one,) = [s for s in log.active_producers() if s.producer_id == 1]
        assert (one.producer_epoch, one.coordinator_epoch, one.current_txn_start_offset) == \
            (1, 4, -1)


def test_last_stable_offset_completed_txn(tmp_path):
    """The LSO recorded with an abort: the first offset of the earliest *other* ongoing
    transaction, else the marker's offset + 1."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 2)                  # 0-1
        later = p.txn(2, 2)          # 2-3
        p.txn(1, 1)                  # 4
        marker = p.end(1, False)     # 5
        marker2 = p.end(2, False)    # 6
        assert all_aborted(log) == [AbortedTxn(1, 0, marker, later),
                                    AbortedTxn(2, later, marker2, marker2 + 1)]


def test_first_unstable_offset(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        assert log.last_stable_offset == 0 == log.end_offset
        p.plain(2)
        assert log.last_stable_offset == 2
        a = p.txn(1, 2)
        b = p.txn(2, 2)
        assert log.last_stable_offset == a
        p.end(2, True)
        assert log.last_stable_offset == a
        p.end(1, True)
        assert log.last_stable_offset == log.end_offset
        assert b > a


def test_recover_from_snapshot_unfinished_transaction(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        p = Producers(log)
        p.plain(3)
        first = p.txn(7, 2, epoch=1)
    snapshot = max(n for n in os.listdir(path) if n.endswith(".snapshot"))
    entries = decode_snapshot((path / snapshot).read_bytes())
    assert entries[7].current_txn_first_offset == first
    with kqlite.Log.open(path) as log:
        assert log.last_stable_offset == first
        assert log.ongoing_transactions() == [(7, first)]
        Producers(log).end(7, True, epoch=1)
        assert log.last_stable_offset == log.end_offset


def test_recover_from_snapshot_finished_transaction(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        p = Producers(log)
        p.txn(7, 2)
        p.end(7, False, coordinator_epoch=6)
    with kqlite.Log.open(path) as log:
        assert log.last_stable_offset == log.end_offset
        assert log.ongoing_transactions() == []
        assert log.active_producers() == [ProducerSummary(7, 0, 1, log.active_producers()[0]
                                                          .last_timestamp, 6, -1)]


def test_producers_with_ongoing_transactions_dont_expire(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 1)
        p.idempotent(2, 1)
        ps = log._producer_state
        far = max(e.last_timestamp for e in ps.producers.values()) + 10 ** 9
        assert ps.remove_expired(far, 1000) == 1
        assert set(ps.producers) == {1}


def test_non_transactional_append_with_ongoing_transaction(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 2)
        end = log.end_offset
        with pytest.raises(InvalidTxnStateError, match="non-transactional"):
            p.idempotent(1, 1)
        assert log.end_offset == end


def test_append_empty_control_batch(tmp_path):
    """A control batch compaction emptied changes nothing (ProducerAppendInfo.append)."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        first = p.txn(1, 2)
        emptied = empty_batch(parse_header(build_control_batch(1, 0, 0, False, 5)))
        log.append_batches(emptied)
        assert log.ongoing_transactions() == [(1, first)]
        assert log.last_stable_offset == first


def test_a_control_batch_holding_no_marker_is_refused(tmp_path):
    bogus = bytearray(build_control_batch(1, 0, 0, True, 5))
    with kqlite.Log.open(tmp_path / "t-0") as log:
        # A LEADER_CHANGE (2) record where a marker belongs.
        from kqlite.format.control_records import control_key
        from kqlite.format.batch import build_batch as build
        from kqlite.format.record import Record
        leader_change = build([Record(key=control_key(2), value=b"\x00\x00\x00\x00\x00\x00")],
                              producer_id=1, producer_epoch=0, transactional=True,
                              control=True)
        with pytest.raises(InvalidRecordError, match="not a transaction marker"):
            log.append_batches(leader_change)
        assert log.end_offset == 0
        log.append_batches(bogus)                # a real marker is fine
        assert log.end_offset == 1


# -- KIP-890 part 1: the verification guard ----------------------------------------------------

def test_a_first_transactional_batch_needs_a_current_guard(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log, guard=None)
        with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
            p.txn(1, 2)
        assert log.end_offset == 0
        guard = log.begin_verification(1, 0, 0)
        assert guard is not None and log.begin_verification(1, 0, 0) is guard
        p.guard = guard
        first = p.txn(1, 2)
        # The transaction is open: nothing to verify, and later batches need no guard.
        assert log.begin_verification(1, 2, 0) is None
        p.guard = None
        p.txn(1, 1)
        assert log.ongoing_transactions() == [(1, first)]


def test_a_stale_guard_is_refused_after_an_abort(tmp_path):
    """The ABA race KIP-890's unique guard defeats: verified, then an abort marker lands
    (it clears the guard), then the verified append arrives."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 1)
        p.guard = log.begin_verification(1, 1, 0)    # the transaction is open: None
        assert p.guard is None
        p.end(1, False)
        stale = log.begin_verification(1, 1, 0)
        Producers(log).end(1, False)                 # a timeout abort, say
        p.guard = stale
        with pytest.raises(InvalidTxnStateError):
            p.txn(1, 1)
        p.guard = log.begin_verification(1, 1, 0)
        assert p.guard is not stale
        p.txn(1, 1)


def test_a_newer_epoch_needs_its_own_verification(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 1, epoch=0)
        assert log.begin_verification(1, 0, 1) is not None   # epoch 1's txn is not open


def test_coordinator_appends_are_verified_too(tmp_path):
    """A group coordinator's transactional offset commit (origin COORDINATOR) passes the
    same guard (UnifiedLog: CLIENT or COORDINATOR), without sequence checks."""
    commit = build_batch([b"offsets"], producer_id=4, producer_epoch=0, base_sequence=0,
                         transactional=True)
    with kqlite.Log.open(tmp_path / "t-0") as log:
        with pytest.raises(InvalidTxnStateError):
            log.append_batches(commit, origin=AppendOrigin.COORDINATOR)
        guard = log.begin_verification(4, -1, 0)
        log.append_batches(commit, origin=AppendOrigin.COORDINATOR, verification_guard=guard)
        log.append_batches(commit, origin=AppendOrigin.COORDINATOR)   # open now; seq unchecked
        assert log.end_offset == 2 and log.ongoing_transactions() == [(4, 0)]


def test_a_sequence_above_the_lowest_verified_is_out_of_order(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        guard = log.begin_verification(1, 0, 0)
        assert log.begin_verification(1, 3, 0) is guard
        late = build_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=3,
                           transactional=True)
        with pytest.raises(OutOfOrderSequenceError, match="lowest sequence 0"):
            log.append_as_leader(late, leader_epoch=0, verification_guard=guard)


def test_local_appends_copy_transactions_without_a_guard(tmp_path):
    """LOCAL (the application's own append_batches) is not verified, as Kafka verifies
    CLIENT and COORDINATOR appends only."""
    data = build_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=0,
                       transactional=True)
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append_batches(data)
        assert log.ongoing_transactions() == [(1, 0)]


# -- failures, processes, truncation -----------------------------------------------------------

@pytest.mark.parametrize("written_after", [False, True])
def test_append_to_transaction_index_failure(tmp_path, monkeypatch, written_after):
    """UnifiedLogTest.testAppendToTransactionIndexFailure: the marker is in the segment
    but its entry could not be written: the log fails and the transaction stays
    undecided. Reopened (unclean), recovery writes the entry. The marker was never
    acknowledged, though: a write attempted after the failure cuts it as a dead writer's
    tail (sharing.py), and the transaction is still open for the coordinator's retry."""
    path = tmp_path / "t-0"
    log = kqlite.Log.open(path)
    p = Producers(log)
    p.txn(1, 10)

    def broken(index, entry):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(TransactionIndex, "append", broken)
    with pytest.raises(LogFailedError):
        p.end(1, False)
    assert log.last_stable_offset == 0
    if written_after:
        with pytest.raises(LogFailedError):
            p.plain(1)                           # refused until reopened
    log.close()                                  # no clean mark: the next open recovers
    monkeypatch.undo()
    with kqlite.Log.open(path) as log:
        if written_after:
            assert log.end_offset == 10 and all_aborted(log) == []
            assert log.ongoing_transactions() == [(1, 0)]
            Producers(log).end(1, False)
        assert log.end_offset == 11
        assert all_aborted(log) == [AbortedTxn(1, 0, 10, 11)]
        assert log.last_stable_offset == 11


def test_another_process_sees_the_transaction_and_its_abort(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as writer, kqlite.Log.open(path) as reader:
        p = Producers(writer)
        p.plain(2)
        first = p.txn(1, 3)
        assert reader.last_stable_offset == first
        assert reader.high_watermark == writer.end_offset
        marker = p.end(1, False)
        assert reader.last_stable_offset == marker + 1
        assert reader.aborted_transactions() == [AbortedTxn(1, first, marker, marker + 1)]
        # The reader appends too: its producer state catches up with the writer's.
        Producers(reader).txn(2, 1)
        assert writer.last_stable_offset == marker + 1
        assert writer.ongoing_transactions() == [(2, marker + 1)]


def test_truncation_cuts_markers_entries_and_reopens_transactions(tmp_path):
    """testRebuildTransactionalState: truncating below a marker makes its transaction
    undecided again; below the transaction's first offset, it is gone."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        first = p.txn(1, 3)
        marker = p.end(1, False)
        p.plain(2)
        assert all_aborted(log) == [AbortedTxn(1, first, marker, marker + 1)]
        log.truncate_to(marker)
        assert all_aborted(log) == []
        assert log.last_stable_offset == first
        assert log.ongoing_transactions() == [(1, first)]
        log.truncate_to(first)
        assert log.ongoing_transactions() == []
        assert log.last_stable_offset == log.end_offset == first


def test_truncate_fully_forgets_transactions(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 3)
        p.end(1, False)
        log.truncate_fully_and_start_at(50)
        assert all_aborted(log) == [] and log.ongoing_transactions() == []
        assert log.last_stable_offset == 50
        assert not [n for n in os.listdir(log.path) if n.endswith(".txnindex")]


def test_retention_deletes_transaction_indexes_with_their_segments(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 3)
        p.end(1, False)
        log.roll()
        p.plain(1)
        assert [n for n in os.listdir(log.path) if n.endswith(".txnindex")]
        log.delete_records(log.end_offset)
        log.enforce_retention()
        assert not [n for n in os.listdir(log.path) if n.endswith(".txnindex")]


def test_a_reader_handle_with_a_stale_producer_state_uses_the_published_lso(tmp_path):
    """A handle whose producer state was loaded (it wrote once) but is behind another
    process's appends takes the first unstable offset the last writer published."""
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as a, kqlite.Log.open(path) as b:
        Producers(a).idempotent(9, 1)            # a's producer state is loaded
        first = Producers(b).txn(1, 2)
        assert a.last_stable_offset == first
        Producers(b).end(1, True)
        assert a.last_stable_offset == a.end_offset
