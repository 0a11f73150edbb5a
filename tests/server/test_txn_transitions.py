"""The transaction coordinator's state table and request algorithms
(kqlite/server/coordinator/txn/metadata.py, transitions.py), pure: one test per branch of
Kafka 3.9's TransactionCoordinator, in the spirit of its TransactionCoordinatorTest --
every InitProducerId branch, AddPartitions and verification, every EndTxn state/result
pair, the completion after a Prepare*, the timeout abort and the id expiration."""

import dataclasses
import itertools

import pytest

from kqlite.format.transaction_records import TransactionStatus
from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.txn.metadata import (VALID_PREVIOUS_STATES, IllegalTransition,
                                                    TxnMetadata, epoch_exhausted)
from kqlite.server.coordinator.txn.transitions import (NEED_PRODUCER_ID, ExpectedProducer,
                                                       abort_timed_out, add_partitions,
                                                       end_txn, expire, init_producer_id,
                                                       prepare_complete, timed_out,
                                                       verify_partitions)

E = ErrorCode
S = TransactionStatus
TID = "txn"
MAX = 900000
NOW = 1_000_000
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def meta(state=S.EMPTY, pid=10, epoch=3, partitions=(), start=-1, last_pid=-1, last_epoch=-1,
         timeout=60000, updated=NOW - 100, **more):
    return TxnMetadata(TID, pid, last_pid, epoch, last_epoch, timeout, state,
                       frozenset(partitions), start, updated, **more)


def init(m, timeout=60000, expected=None, new_pid=None, tid=TID):
    return init_producer_id(m, tid, timeout, expected, NOW, max_timeout_ms=MAX,
                            new_producer_id=new_pid)


def logged(decision):
    """The metadata held once the decision's transit is written."""
    return decision.hold.complete(decision.transit)


# -- The state table -----------------------------------------------------------------------

def test_the_table_is_kafkas_valid_previous_states():
    assert {s.state_name: sorted(p.state_name for p in prev)
            for s, prev in VALID_PREVIOUS_STATES.items()} == {
        "Empty": ["CompleteAbort", "CompleteCommit", "Empty"],
        "Ongoing": ["CompleteAbort", "CompleteCommit", "Empty", "Ongoing"],
        "PrepareCommit": ["Ongoing"],
        "PrepareAbort": ["Ongoing", "PrepareEpochFence"],
        "CompleteCommit": ["PrepareCommit"],
        "CompleteAbort": ["PrepareAbort"],
        "Dead": ["CompleteAbort", "CompleteCommit", "Empty"],
        "PrepareEpochFence": ["Ongoing"],
    }


@pytest.mark.parametrize("state,target", [(s, t) for s in S for t in S
                                          if s not in VALID_PREVIOUS_STATES[t]])
def test_a_move_the_table_forbids_is_refused(state, target):
    with pytest.raises(IllegalTransition):
        meta(state).prepare(target)


def test_nothing_is_prepared_while_a_change_is_pending():
    hold, _ = meta(S.ONGOING, partitions=[A0], start=1).prepare(S.PREPARE_COMMIT)
    with pytest.raises(IllegalTransition, match="pending"):
        hold.prepare(S.PREPARE_ABORT)


def test_completion_checks_what_each_state_may_change():
    ongoing = meta(S.ONGOING, partitions=[A0, A1], start=5)
    hold, transit = ongoing.prepare(S.PREPARE_COMMIT)
    with pytest.raises(IllegalTransition):   # the partitions of a Prepare* are the same
        hold.complete(transit._replace(partitions=frozenset([A0])))
    with pytest.raises(IllegalTransition):   # the producer does not change
        hold.complete(transit._replace(producer_epoch=4))
    with pytest.raises(IllegalTransition):   # not the pending change
        hold.complete(transit._replace(state=S.PREPARE_ABORT))
    hold, transit = ongoing.prepare(S.ONGOING, partitions=frozenset([A0]))
    with pytest.raises(IllegalTransition):   # Ongoing's partitions only grow
        hold.complete(transit)
    hold, transit = meta().prepare(S.EMPTY, producer_epoch=5)
    with pytest.raises(IllegalTransition):   # Empty: +1, or a new producer id at 0
        hold.complete(transit)
    hold, transit = meta().prepare(S.EMPTY, producer_id=11, producer_epoch=0)
    assert hold.complete(transit).producer_id == 11
    hold, _ = meta().prepare(S.DEAD)
    with pytest.raises(IllegalTransition):   # Dead is never completed: the id goes
        hold.complete(meta().transit(state=S.DEAD))


def test_a_loaded_id_has_no_last_producer():
    m = meta(S.COMPLETE_COMMIT, last_pid=9, last_epoch=2, start=7)
    loaded = TxnMetadata.from_value(TID, m.to_value())
    assert (loaded.last_producer_id, loaded.last_producer_epoch) == (-1, -1)
    assert dataclasses.replace(loaded, last_producer_id=9, last_producer_epoch=2) == m


# -- InitProducerId ------------------------------------------------------------------------

def test_init_an_empty_id_is_an_invalid_request():
    assert init(None, tid="").error == E.INVALID_REQUEST


@pytest.mark.parametrize("timeout", [0, -1, MAX + 1, 2 ** 31 - 1])
def test_init_with_a_timeout_out_of_range(timeout):
    assert init(meta(), timeout=timeout).error == E.INVALID_TRANSACTION_TIMEOUT


def test_init_a_new_id_allocates_a_producer_id_at_epoch_0():
    assert init(None) is NEED_PRODUCER_ID
    d = init(None, new_pid=77)
    assert d.error == E.NONE and d.transit.state is S.EMPTY
    done = logged(d)
    assert (done.producer_id, done.producer_epoch, done.last_producer_epoch) == (77, 0, -1)
    assert done.state is S.EMPTY and done.partitions == frozenset() and done.start_ms == -1


def test_init_a_new_id_with_an_expected_producer_is_not_fenced():
    # KIP-360: a producer recovering from UNKNOWN_PRODUCER_ID finds its id gone.
    d = init(None, expected=ExpectedProducer(5, 9), new_pid=77)
    assert d.error == E.NONE and logged(d).producer_epoch == 0


def test_init_while_a_change_is_pending():
    hold, _ = meta(S.ONGOING, partitions=[A0], start=1).prepare(S.PREPARE_COMMIT)
    assert init(hold).error == E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_while_a_decision_is_being_written(state):
    assert init(meta(state, partitions=[A0], start=1)).error == E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_init_bumps_the_epoch(state):
    d = init(meta(state, start=1 if state is not S.EMPTY else -1))
    done = logged(d)
    assert (done.producer_id, done.producer_epoch, done.last_producer_epoch) == (10, 4, -1)
    assert done.state is S.EMPTY and done.timeout_ms == 60000


def test_init_takes_the_new_timeout():
    assert logged(init(meta(), timeout=5000)).timeout_ms == 5000


def test_init_with_the_current_epoch_expected_records_it_as_last():
    done = logged(init(meta(), expected=ExpectedProducer(10, 3)))
    assert (done.producer_epoch, done.last_producer_epoch) == (4, 3)


def test_init_retried_after_a_lost_answer_gets_the_same_epoch():
    bumped = logged(init(meta(), expected=ExpectedProducer(10, 3)))
    again = logged(init(bumped, expected=ExpectedProducer(10, 3)))
    assert (again.producer_id, again.producer_epoch) == (10, 4)


def test_init_with_a_stale_expected_epoch_is_fenced():
    assert init(meta(last_epoch=1), expected=ExpectedProducer(10, 2)).error == E.PRODUCER_FENCED


def test_init_with_a_foreign_expected_producer_is_fenced():
    assert init(meta(), expected=ExpectedProducer(99, 3)).error == E.PRODUCER_FENCED


def test_init_with_an_exhausted_epoch_rotates_the_producer_id():
    m = meta(epoch=32766)
    assert epoch_exhausted(32766) and not epoch_exhausted(32765)
    assert init(m) is NEED_PRODUCER_ID
    done = logged(init(m, new_pid=11))
    assert (done.producer_id, done.producer_epoch, done.last_producer_id,
            done.last_producer_epoch) == (11, 0, 10, -1)
    # With the current epoch expected, the old one is remembered for a retry.
    done = logged(init(m, expected=ExpectedProducer(10, 32766), new_pid=11))
    assert (done.producer_id, done.producer_epoch, done.last_producer_epoch) == (11, 0, 32766)


def test_init_retried_after_a_rotation_is_not_fenced():
    rotated = logged(init(meta(epoch=32766), expected=ExpectedProducer(10, 32766), new_pid=11))
    # The producer did not get the answer and asks again with its old producer id.
    again = logged(init(rotated, expected=ExpectedProducer(10, 32766)))
    assert (again.producer_id, again.producer_epoch) == (11, 0)


def test_init_with_an_exhausted_epoch_but_another_expected_epoch_bumps_nothing():
    # Not the current epoch: no rotation, and the epoch cannot be bumped either.
    with pytest.raises(IllegalTransition):
        init(meta(epoch=32766, last_epoch=32765), expected=ExpectedProducer(10, 32765))


def test_init_fences_an_open_transaction_and_answers_concurrent_transactions():
    m = meta(S.ONGOING, partitions=[A0], start=NOW - 10)
    d = init(m)
    assert d.error == E.CONCURRENT_TRANSACTIONS
    assert d.transit.state is S.PREPARE_ABORT and d.transit.producer_epoch == 4
    assert d.transit.partitions == {A0}
    done = logged(d)
    assert (done.producer_epoch, done.last_producer_epoch) == (4, -1)
    # Its markers carry epoch 4; once CompleteAbort is logged the retry bumps again: two
    # epochs per fence.
    c = prepare_complete(done, 10, 4, False, NOW)
    complete = logged(c)
    assert complete.state is S.COMPLETE_ABORT and complete.partitions == frozenset()
    assert logged(init(complete)).producer_epoch == 5


def test_no_double_bump_after_a_failed_fence():
    d = init(meta(S.ONGOING, partitions=[A0], start=NOW - 10))
    failed = d.failed()
    assert failed.failed_epoch_fence and failed.pending is None
    assert (failed.state, failed.producer_epoch) == (S.ONGOING, 4)
    again = init(failed)
    assert again.transit.producer_epoch == 4     # not 5
    # A successful completion clears the mark.
    done = logged(prepare_complete(logged(again), 10, 4, False, NOW))
    assert not done.failed_epoch_fence


def test_a_failed_init_keeps_a_created_id():
    d = init(None, new_pid=77)
    kept = d.failed()
    assert (kept.producer_id, kept.producer_epoch, kept.pending) == (77, -1, None)


# -- AddPartitionsToTxn and verification --------------------------------------------------

def add(m, pid=10, epoch=3, parts=(A0,), tid=TID):
    return add_partitions(m, tid, pid, epoch, set(parts), NOW)


def test_add_partitions_branches():
    assert add(meta(), tid="").error == E.INVALID_REQUEST
    assert add(None).error == E.INVALID_PRODUCER_ID_MAPPING
    assert add(meta(), pid=11).error == E.INVALID_PRODUCER_ID_MAPPING
    assert add(meta(), epoch=2).error == E.PRODUCER_FENCED
    assert add(meta(), epoch=4).error == E.PRODUCER_FENCED
    hold, _ = meta().prepare(S.EMPTY, producer_epoch=4)
    assert add(hold).error == E.CONCURRENT_TRANSACTIONS
    for state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        assert add(meta(state, partitions=[A0], start=1)).error == E.CONCURRENT_TRANSACTIONS


def test_add_partitions_already_in_the_transaction_logs_nothing():
    d = add(meta(S.ONGOING, partitions=[A0, A1], start=5), parts=[A1])
    assert d.error == E.NONE and d.transit is None and d.hold is None


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_the_first_partition_starts_a_transaction(state):
    done = logged(add(meta(state, start=-1 if state is S.EMPTY else 3), parts=[A0, B0]))
    assert done.state is S.ONGOING and done.partitions == {A0, B0} and done.start_ms == NOW


def test_more_partitions_join_the_open_transaction():
    done = logged(add(meta(S.ONGOING, partitions=[A0], start=5), parts=[B0]))
    assert done.partitions == {A0, B0} and done.start_ms == 5 and done.last_update_ms == NOW


def test_verification_branches():
    ongoing = meta(S.ONGOING, partitions=[A0], start=5)
    assert verify_partitions(ongoing, TID, 10, 3, [A0, B0]) == \
        {A0: E.NONE, B0: E.TRANSACTION_ABORTABLE}
    assert verify_partitions(ongoing, "", 10, 3, [A0]) == {A0: E.INVALID_REQUEST}
    assert verify_partitions(None, TID, 10, 3, [A0]) == {A0: E.INVALID_PRODUCER_ID_MAPPING}
    assert verify_partitions(ongoing, TID, 10, 4, [A0]) == {A0: E.PRODUCER_FENCED}
    prepared = meta(S.PREPARE_COMMIT, partitions=[A0], start=5)
    assert verify_partitions(prepared, TID, 10, 3, [A0]) == {A0: E.CONCURRENT_TRANSACTIONS}
    # A pending change is not looked at: the append's guard is the final check.
    hold, _ = ongoing.prepare(S.ONGOING, partitions=frozenset([A0, B0]))
    assert verify_partitions(hold, TID, 10, 3, [A0]) == {A0: E.NONE}


# -- EndTxn --------------------------------------------------------------------------------

END_CASES = {
    # (state, commit): (answer, state logged or None)
    (S.ONGOING, True): (E.NONE, S.PREPARE_COMMIT),
    (S.ONGOING, False): (E.NONE, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, True): (E.NONE, None),
    (S.COMPLETE_COMMIT, False): (E.INVALID_TXN_STATE, None),
    (S.COMPLETE_ABORT, False): (E.NONE, None),
    (S.COMPLETE_ABORT, True): (E.INVALID_TXN_STATE, None),
    (S.PREPARE_COMMIT, True): (E.CONCURRENT_TRANSACTIONS, None),
    (S.PREPARE_COMMIT, False): (E.INVALID_TXN_STATE, None),
    (S.PREPARE_ABORT, False): (E.CONCURRENT_TRANSACTIONS, None),
    (S.PREPARE_ABORT, True): (E.INVALID_TXN_STATE, None),
    (S.EMPTY, True): (E.INVALID_TXN_STATE, None),
    (S.EMPTY, False): (E.INVALID_TXN_STATE, None),
}


@pytest.mark.parametrize("state,commit", sorted(END_CASES, key=lambda k: (k[0], k[1])))
def test_end_txn_in_every_state(state, commit):
    m = meta(state, partitions=[A0] if state in (S.ONGOING, S.PREPARE_COMMIT,
                                                 S.PREPARE_ABORT) else (),
             start=-1 if state is S.EMPTY else 5)
    d = end_txn(m, TID, 10, 3, commit, NOW)
    answer, logged_state = END_CASES[(state, commit)]
    assert d.error == answer
    assert (d.transit.state if d.transit else None) == logged_state
    if logged_state is not None:
        assert d.transit.partitions == {A0} and d.transit.last_update_ms == NOW


def test_end_txn_checks_before_the_state():
    ongoing = meta(S.ONGOING, partitions=[A0], start=5)
    assert end_txn(ongoing, "", 10, 3, True, NOW).error == E.INVALID_REQUEST
    assert end_txn(None, TID, 10, 3, True, NOW).error == E.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(ongoing, TID, 11, 3, True, NOW).error == E.INVALID_PRODUCER_ID_MAPPING
    # A client must name the current epoch exactly, a higher one too.
    assert end_txn(ongoing, TID, 10, 2, True, NOW).error == E.PRODUCER_FENCED
    assert end_txn(ongoing, TID, 10, 4, True, NOW).error == E.PRODUCER_FENCED
    hold, _ = ongoing.prepare(S.ONGOING, partitions=frozenset([A0, B0]))
    assert end_txn(hold, TID, 10, 3, True, NOW).error == E.CONCURRENT_TRANSACTIONS


def test_the_coordinators_own_abort_may_name_a_higher_epoch():
    ongoing = meta(S.ONGOING, partitions=[A0], start=5)
    assert end_txn(ongoing, TID, 10, 2, False, NOW, from_client=False).error == \
        E.PRODUCER_FENCED
    fencing, _ = ongoing.prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=4)
    d = end_txn(fencing, TID, 10, 4, False, NOW, from_client=False)
    assert d.error == E.NONE and d.transit.state is S.PREPARE_ABORT
    assert d.hold.producer_epoch == 4 and d.on_failure.failed_epoch_fence


def test_completion_after_a_prepare():
    prepared = meta(S.PREPARE_COMMIT, partitions=[A0, B0], start=5)
    d = prepare_complete(prepared, 10, 3, True, NOW)
    assert d.error == E.NONE and d.transit.state is S.COMPLETE_COMMIT
    assert d.hold.pending is S.COMPLETE_COMMIT and d.hold.partitions == {A0, B0}
    done = logged(d)
    assert done.state is S.COMPLETE_COMMIT and done.partitions == frozenset()
    assert done.start_ms == 5
    assert prepare_complete(prepared, 11, 3, True, NOW).error == E.INVALID_PRODUCER_ID_MAPPING
    assert prepare_complete(prepared, 10, 4, True, NOW).error == E.PRODUCER_FENCED
    assert prepare_complete(prepared, 10, 3, False, NOW).error == E.INVALID_TXN_STATE
    assert prepare_complete(d.hold, 10, 3, True, NOW).error == E.CONCURRENT_TRANSACTIONS
    assert prepare_complete(meta(S.ONGOING, partitions=[A0], start=5), 10, 3, True,
                            NOW).error == E.INVALID_TXN_STATE


# -- A whole transaction, as the shell runs it --------------------------------------------------

def test_a_transaction_commits_and_the_next_one_starts():
    m = logged(init(None, new_pid=7))
    m = logged(add_partitions(m, TID, 7, 0, {A0}, NOW))
    m = logged(add_partitions(m, TID, 7, 0, {B0}, NOW + 1))
    m = logged(end_txn(m, TID, 7, 0, True, NOW + 2))
    assert m.state is S.PREPARE_COMMIT and m.partitions == {A0, B0}
    m = logged(prepare_complete(m, 7, 0, True, NOW + 3))
    assert (m.state, m.partitions, m.start_ms) == (S.COMPLETE_COMMIT, frozenset(), NOW)
    m = logged(add_partitions(m, TID, 7, 0, {A1}, NOW + 4))
    assert (m.state, m.partitions, m.start_ms) == (S.ONGOING, {A1}, NOW + 4)


# -- Timeouts and expiration ------------------------------------------------------------------

def test_a_transaction_past_its_timeout_is_fenced_and_aborted():
    m = meta(S.ONGOING, partitions=[A0], start=NOW - 60001, timeout=60000)
    assert timed_out(m, NOW)
    d = abort_timed_out(m, NOW)
    assert d.transit.state is S.PREPARE_ABORT and d.transit.producer_epoch == 4
    assert not timed_out(meta(S.ONGOING, partitions=[A0], start=NOW - 60000), NOW)


@pytest.mark.parametrize("state", [s for s in S if s is not S.ONGOING
                                   and s is not S.DEAD and s is not S.PREPARE_EPOCH_FENCE])
def test_only_an_open_transaction_times_out(state):
    m = meta(state, partitions=[A0] if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) else (),
             start=1)
    assert not timed_out(m, NOW) and abort_timed_out(m, NOW) is None


def test_the_timeout_skips_a_pending_change():
    m = meta(S.ONGOING, partitions=[A0], start=1)
    hold, _ = m.prepare(S.PREPARE_COMMIT)
    assert abort_timed_out(hold, NOW) is None


@pytest.mark.parametrize("state,expires", [(S.EMPTY, True), (S.COMPLETE_COMMIT, True),
                                           (S.COMPLETE_ABORT, True), (S.ONGOING, False),
                                           (S.PREPARE_COMMIT, False), (S.PREPARE_ABORT, False)])
def test_expiration_takes_idle_ids_without_an_open_transaction(state, expires):
    m = meta(state, partitions=[A0] if state not in (S.EMPTY, S.COMPLETE_COMMIT,
                                                     S.COMPLETE_ABORT) else (),
             start=1, updated=NOW - 1000)
    hold = expire(m, NOW, 1000)
    assert (hold is not None) == expires
    if expires:
        assert hold.pending is S.DEAD
    assert expire(m, NOW, 1001) is None             # not idle long enough


def test_expiration_skips_a_pending_change():
    hold, _ = meta(updated=0).prepare(S.EMPTY, producer_epoch=4)
    assert expire(hold, NOW, 1) is None


def test_every_decision_leaves_a_legal_state():
    """Random walks over the requests: every transit that is logged completes, and a
    completed id is always in a state the table allows after the one before."""
    requests = [
        lambda m, t: init(m, new_pid=50 + t) if init(m) is NEED_PRODUCER_ID else init(m),
        lambda m, t: add_partitions(m, TID, m.producer_id, m.producer_epoch, {A0}, NOW + t),
        lambda m, t: end_txn(m, TID, m.producer_id, m.producer_epoch, True, NOW + t),
        lambda m, t: end_txn(m, TID, m.producer_id, m.producer_epoch, False, NOW + t),
        lambda m, t: prepare_complete(m, m.producer_id, m.producer_epoch,
                                      m.state is S.PREPARE_COMMIT, NOW + t),
        lambda m, t: abort_timed_out(m, NOW + 10 ** 9 + t),
    ]
    for walk in itertools.product(range(len(requests)), repeat=5):
        m = logged(init(None, new_pid=1))
        for t, r in enumerate(walk):
            d = requests[r](m, t)
            if d is None or d.transit is None:
                continue
            before = m.state
            m = logged(d)
            assert before in VALID_PREVIOUS_STATES[m.state] or (
                m.state is S.PREPARE_ABORT and before is S.ONGOING)
