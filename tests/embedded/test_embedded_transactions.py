"""db.transaction(): the embedded, SQLite-style transaction (kqlite/db/transaction.py).

Normal path (several topics and an offset commit, seen by read_committed readers of
another process all at once), what it logs in ``__transaction_state``, bad input with
its errors, fencing between two handles of one transactional id, and the ownership rule
of recovery (transaction_owners.py)."""

import json
import os
import subprocess
import sys
import threading

import pytest

import kqlite
from kqlite.db.transaction_owners import OwnerLock, read_owner
from kqlite.errors import (ConcurrentTransactionsError, InvalidTxnStateError, LogClosedError,
                           ProducerFencedError, UnknownTopicError)
from kqlite.format.batch import build_batch
from kqlite.format.internal_topics import OFFSETS_TOPIC, TRANSACTIONS_TOPIC
from kqlite.format.transaction_records import (TransactionLogValue, TransactionStatus as S,
                                               decode_transaction_key,
                                               decode_transaction_value)
from kqlite.format.validate import AppendOrigin
from kqlite.storage import Isolation

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

READER = """
import json, sys
import kqlite
from kqlite.storage import Isolation
db = kqlite.open(sys.argv[1], retention_check_interval_ms=0)
out = {}
for level in ("read_committed", "read_uncommitted"):
    c = db.consumer(["a", "b"], isolation_level=level)
    values = []
    while True:
        batch = c.poll(timeout_ms=50)
        if not batch:
            break
        values += [r.value.decode() for r in batch]
    out[level] = sorted(values)
    c.close()
out["log"] = [r.value.decode() for r in db.log("a", 0).read(isolation=Isolation.COMMITTED)]
out["offsets"] = {f"{t}-{p}": o for (t, p), o in db.offsets.committed("g").items()}
db.close()
print(json.dumps(out))
"""


def read_elsewhere(path):
    """What read_committed and read_uncommitted readers of another process see."""
    out = subprocess.run([sys.executable, "-c", READER, str(path)], check=True,
                         capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT),
                         timeout=60).stdout
    return json.loads(out)


@pytest.fixture
def db(tmp_path):
    d = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    d.create_topic("a", 1)
    d.create_topic("b", 2)
    yield d
    d.close()


def states(db, tid):
    """Every ``__transaction_state`` record of ``tid``, oldest first."""
    if TRANSACTIONS_TOPIC not in db.list_topics(internal=True):
        return []
    p = db.transaction_state.partition_for(tid)
    return [decode_transaction_value(r.value) for r in db.log(TRANSACTIONS_TOPIC, p).read()
            if decode_transaction_key(r.key) == tid]


def test_commit_makes_every_topic_and_the_offsets_visible_to_other_processes(db, tmp_path):
    with db.transaction() as tx:
        for i in range(5):
            tx.send("a", value=b"a%d" % i)
            tx.send("b", value=b"b%d" % i, key=b"k%d" % i)
        tx.commit_offsets("g", {("a", 0): 3, ("b", 1): 7})
    with pytest.raises(RuntimeError):
        with db.transaction(batch_bytes=1) as tx:    # written at once: the abort has markers
            tx.send("a", value=b"gone")
            tx.commit_offsets("g", {("a", 0): 99})
            raise RuntimeError("rolled back")
    seen = read_elsewhere(tmp_path / "data")
    committed = sorted(["a%d" % i for i in range(5)] + ["b%d" % i for i in range(5)])
    assert seen["read_committed"] == committed
    assert seen["read_uncommitted"] == sorted(committed + ["gone"])
    assert seen["log"] == ["a%d" % i for i in range(5)]
    assert seen["offsets"] == {"a-0": 3, "b-1": 7}
    a = db.log("a", 0)
    assert a.last_stable_offset == a.high_watermark == a.end_offset
    assert [t.producer_id for t in a.aborted_transactions()] == [tx.producer_id]


def test_nothing_is_visible_to_read_committed_before_the_commit(db):
    tx = db.transaction(batch_bytes=1)
    tx.send("a", value=b"x")
    tx.commit_offsets("g", {("a", 0): 1})
    a = db.log("a", 0)
    assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == []
    assert [r.value for r in a.read()] == [b"x"]
    assert a.last_stable_offset == 0 < a.high_watermark
    tx.commit()
    assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == [b"x"]
    assert db.offsets.committed("g") == {("a", 0): 1}


def test_send_answers_each_records_offset_once_written(db):
    with db.transaction() as tx:
        futures = [tx.send("b", value=b"v", partition=1) for _ in range(3)]
        assert not any(f.done() for f in futures)
    assert [f.result().offset for f in futures] == [0, 1, 2]
    assert {f.result().partition for f in futures} == {1}


def test_keyless_records_stick_to_a_partition_until_a_batch_is_full(db):
    with db.transaction(batch_bytes=400) as tx:
        sent = [tx.send("b", value=b"x" * 100) for _ in range(12)]
    partitions = [s.result().partition for s in sent]
    assert set(partitions) <= {0, 1} and partitions[0] == partitions[1] == partitions[2]
    assert sum(len(list(db.log("b", p).read(isolation=Isolation.COMMITTED)))
               for p in (0, 1)) == 12


def test_keys_headers_and_timestamps_are_kept(db):
    with db.transaction() as tx:
        sent = tx.send("a", value=b"v", key=b"k", headers=[("h", b"1")], timestamp=1234)
        bare = tx.send("a", value=b"w")
        with pytest.raises(InvalidTxnStateError):
            sent.result()                      # not appended before the commit
    assert sent.result().timestamp == 1234 and bare.result().timestamp > 1234
    first, second = db.log("a", 0).read(isolation=Isolation.COMMITTED)
    assert (first.key, first.value, list(first.headers), first.timestamp) == \
        (b"k", b"v", [("h", b"1")], 1234)
    assert second.timestamp == bare.result().timestamp


def test_a_commit_logs_empty_ongoing_prepare_commit_complete_commit(db):
    with db.transaction("t1") as tx:
        tx.send("a", value=b"x")
        tx.commit_offsets("g", {("a", 0): 1})
    offsets_p = db.offsets.partition_for_commit("g")
    logged = states(db, "t1")
    assert [v.status for v in logged] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT,
                                          S.COMPLETE_COMMIT]
    assert {v.producer_epoch for v in logged} == {0}
    assert logged[1].topic_partitions() == {("a", 0), (OFFSETS_TOPIC, offsets_p)}
    assert logged[2].topic_partitions() == logged[1].topic_partitions()
    assert logged[3].partitions == () and logged[0].partitions is None
    owner = read_owner(db.fs, db.path, "t1")
    assert owner.producer_id == tx.producer_id
    assert owner.partitions == logged[1].topic_partitions()


def test_each_open_bumps_the_epoch_and_keeps_the_producer_id(db):
    epochs = []
    for _ in range(3):
        with db.transaction("t2") as tx:
            tx.send("a", value=b"x")
        epochs.append((tx.producer_id, tx.producer_epoch))
    assert [e for _p, e in epochs] == [0, 1, 2] and len({p for p, _e in epochs}) == 1


def test_an_empty_transaction_writes_nothing(db):
    with db.transaction("t3"):
        pass
    assert states(db, "t3") == []


def test_generated_ids_differ_between_concurrent_transactions(db):
    first = db.transaction()
    ids = []
    thread = threading.Thread(target=lambda: ids.append(db.transaction().transactional_id))
    thread.start()
    thread.join()
    assert ids[0] != first.transactional_id
    first.abort()


def test_a_large_transaction_is_written_in_batches_within_max_message_bytes(db):
    db.create_topic("small", 1, {"max.message.bytes": 2000})
    with db.transaction() as tx:
        sent = [tx.send("small", value=b"%04d" % i + b"x" * 200) for i in range(40)]
    log = db.log("small", 0)
    assert [r.value[:4] for r in log.read(isolation=Isolation.COMMITTED)] == \
        [b"%04d" % i for i in range(40)]
    assert [s.result().offset for s in sent] == [r.offset for r in log.read()]
    sizes = [h.size for h in log.batch_headers() if not h.is_control]
    assert len(sizes) > 4 and max(sizes) <= 2000


def test_closing_the_database_abandons_an_open_transaction_to_recovery(tmp_path, db):
    tx = db.transaction("left-open", batch_bytes=1)
    tx.send("a", value=b"x")
    db.close()
    with pytest.raises(LogClosedError):
        tx.commit()
    again = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    try:
        a = again.log("a", 0)
        assert a.last_stable_offset == a.high_watermark
        assert list(a.read(isolation=Isolation.COMMITTED)) == []
        assert again.transaction_state.state("left-open").status is S.COMPLETE_ABORT
    finally:
        again.close()


def test_concurrent_transactions_on_one_partition_interleave_as_two_producers(db):
    first = db.transaction(batch_bytes=1)
    both = threading.Barrier(2)
    results = {}

    def other():
        tx = db.transaction(batch_bytes=1)
        both.wait()
        tx.send("a", value=b"other-1")
        both.wait()
        both.wait()
        tx.send("a", value=b"other-2")
        tx.abort()
        results["other"] = tx.transactional_id

    thread = threading.Thread(target=other)
    thread.start()
    both.wait()
    first.send("a", value=b"first-1")        # after other-1 or before: both are open
    both.wait()
    a = db.log("a", 0)
    assert a.last_stable_offset == 0 and len(a.ongoing_transactions()) == 2
    both.wait()
    thread.join()
    first.send("a", value=b"first-2")
    first.commit()
    assert results["other"] != first.transactional_id
    assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == [b"first-1", b"first-2"]
    assert a.last_stable_offset == a.high_watermark and a.ongoing_transactions() == []
    assert len(a.aborted_transactions()) == 1


WRITER = """
import sys, kqlite
db = kqlite.open(sys.argv[1], retention_check_interval_ms=0)
name = sys.argv[2]
for i in range(10):
    with db.transaction() as tx:
        for j in range(5):
            tx.send("a", value=f"{name}-{i}-{j}".encode())
            tx.send("b", value=f"{name}-{i}-{j}".encode(), key=b"%d" % j)
        tx.commit_offsets(name, {("a", 0): i + 1})
db.close()
"""


def test_processes_committing_at_once_each_see_their_transactions_whole(db, tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "data"), name],
                              stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT))
             for name in ("p1", "p2")]
    for p in procs:
        p.communicate(timeout=120)
    assert all(p.returncode == 0 for p in procs)
    for topic, partitions in (("a", 1), ("b", 2)):
        values = [r.value for p in range(partitions)
                  for r in db.log(topic, p).read(isolation=Isolation.COMMITTED)]
        assert sorted(values) == sorted(f"{n}-{i}-{j}".encode() for n in ("p1", "p2")
                                        for i in range(10) for j in range(5))
        for p in range(partitions):
            lg = db.log(topic, p)
            assert lg.last_stable_offset == lg.high_watermark
    assert db.offsets.committed("p1") == {("a", 0): 10} == db.offsets.committed("p2")


# -- Bad input ----------------------------------------------------------------------------

def test_send_after_commit_is_refused(db):
    tx = db.transaction()
    tx.send("a", value=b"x")
    tx.commit()
    with pytest.raises(InvalidTxnStateError):
        tx.send("a", value=b"y")
    with pytest.raises(InvalidTxnStateError):
        tx.commit()


def test_transactions_do_not_nest(db):
    with db.transaction():
        with pytest.raises(InvalidTxnStateError):
            db.transaction()


def test_a_closed_database_refuses_a_transaction(tmp_path):
    d = kqlite.open(tmp_path / "closed", retention_check_interval_ms=0)
    d.close()
    with pytest.raises(LogClosedError):
        d.transaction()


def test_an_unknown_topic_is_refused_without_auto_create(db):
    with db.transaction() as tx:
        with pytest.raises(UnknownTopicError):
            tx.send("nope", value=b"x")


def test_a_non_transactional_append_of_the_handles_producer_is_refused(db):
    tx = db.transaction(batch_bytes=1)
    tx.send("a", value=b"x")
    plain = build_batch([b"y"], producer_id=tx.producer_id,
                        producer_epoch=tx.producer_epoch, base_sequence=1)
    with pytest.raises(InvalidTxnStateError):
        db.log("a", 0).append_batches(plain, origin=AppendOrigin.CLIENT)
    tx.commit()
    assert [r.value for r in db.log("a", 0).read(isolation=Isolation.COMMITTED)] == [b"x"]


# -- Fencing ------------------------------------------------------------------------------

def test_a_second_handle_of_one_id_fences_the_first_and_aborts_its_transaction(db):
    old = db.transaction("t4", batch_bytes=1)
    old.send("a", value=b"old")
    newer = []
    thread = threading.Thread(target=lambda: newer.append(db.transaction("t4")))
    thread.start()
    thread.join()
    with pytest.raises(ProducerFencedError):
        old.send("a", value=b"more")
    with pytest.raises(ProducerFencedError):
        old.commit()       # a fenced handle stays fenced, as Kafka's fatal error
    tx = newer[0]
    assert tx.producer_id == old.producer_id and tx.producer_epoch == old.producer_epoch + 2
    tx.send("a", value=b"new")
    tx.commit()
    a = db.log("a", 0)
    assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == [b"new"]
    assert [t.producer_id for t in a.aborted_transactions()] == [old.producer_id]


def test_a_stale_handle_is_refused_by_the_partitions(db):
    old = db.transaction("t5", batch_bytes=1)
    old.send("a", value=b"old")
    old._fenced = False                   # as if it had not noticed the fence
    done = threading.Thread(target=lambda: db.transaction("t5").abort())
    done.start()
    done.join()
    old._fenced = False
    with pytest.raises(ProducerFencedError):
        old.send("a", value=b"late")       # its epoch is below the abort marker's


def test_another_live_process_holding_the_id_makes_the_open_wait_then_fail(db, tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, kqlite\n"
         "db = kqlite.open(sys.argv[1], retention_check_interval_ms=0)\n"
         "tx = db.transaction('t6')\nprint('open', flush=True)\nsys.stdin.read()\n",
         str(tmp_path / "data")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert holder.stdout.readline().strip() == b"open"
        with pytest.raises(ConcurrentTransactionsError):
            db.transaction("t6", lock_timeout_ms=200)
    finally:
        holder.kill()
        holder.wait()
    with db.transaction("t6", lock_timeout_ms=5000) as tx:
        tx.send("a", value=b"x")


# -- The ownership rule -------------------------------------------------------------------

def ongoing(db, tid, pid):
    """An Ongoing record of ``tid`` on a-0 with data there: a transaction open."""
    db.log("a", 0).append_batches(
        build_batch([b"open"], producer_id=pid, producer_epoch=0, base_sequence=0,
                    transactional=True), origin=AppendOrigin.LOCAL)
    db.transaction_state.write(tid, TransactionLogValue(pid, 0, 60000, S.ONGOING,
                                                        (("a", (0,)),), 1, 1))


def test_reopening_leaves_an_open_transaction_without_an_owner_record_alone(tmp_path, db):
    ongoing(db, "client-txn", 9001)
    db.close()
    again = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    try:
        assert again.transaction_state.state("client-txn").status is S.ONGOING
        assert again.log("a", 0).ongoing_transactions() == [(9001, 0)]
    finally:
        again.close()


def test_reopening_leaves_an_owned_transaction_whose_lock_is_held_alone(tmp_path, db):
    with db.transaction("held") as tx:
        tx.send("a", value=b"x")
    pid = tx.producer_id
    lock = OwnerLock(db.fs, db.path, "held")
    assert lock.try_take()
    try:
        db.log("a", 0).append_batches(
            build_batch([b"open"], producer_id=pid, producer_epoch=1, base_sequence=0,
                        transactional=True), origin=AppendOrigin.LOCAL)
        db.transaction_state.write("held", TransactionLogValue(pid, 1, 60000, S.ONGOING,
                                                               (("a", (0,)),), 1, 1))
        other = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
        other.close()
        assert db.transaction_state.state("held").status is S.ONGOING
    finally:
        lock.release()
    other = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    try:
        assert other.transaction_state.state("held").status is S.COMPLETE_ABORT
        a = other.log("a", 0)
        assert a.last_stable_offset == a.high_watermark
    finally:
        other.close()


def test_a_handle_fenced_by_another_writer_of_its_record_aborts_what_it_left_open(db):
    with db.transaction("t7") as first:
        first.send("a", value=b"first")
    tx = db.transaction("t7", batch_bytes=1)
    tx.send("a", value=b"x")
    # A broker that loaded the first transaction's PrepareCommit completes it late, after
    # this transaction's records: the id's latest record is no longer this handle's.
    db.transaction_state.write("t7", TransactionLogValue(
        first.producer_id, first.producer_epoch, 60000, S.COMPLETE_COMMIT, (), 1, 1))
    with pytest.raises(ProducerFencedError):
        tx.commit()
    a = db.log("a", 0)
    assert a.ongoing_transactions() == [] and a.last_stable_offset == a.high_watermark
    assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == [b"first"]


def test_recovery_passes_by_a_partition_whose_topic_was_deleted(tmp_path, db):
    db.create_topic("doomed", 1)
    tx = db.transaction("t9", batch_bytes=1)
    tx.send("doomed", value=b"x")
    tx.send("a", value=b"y")
    other = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    other.delete_topic("doomed")             # the open transaction's lock is held: left alone
    other.close()
    db.close()                               # the owner goes without ending it
    again = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    try:
        assert again.transaction_state.state("t9").status is S.COMPLETE_ABORT
        a = again.log("a", 0)
        assert a.ongoing_transactions() == [] and list(a.read(isolation=Isolation.COMMITTED)) == []
    finally:
        again.close()


def test_a_kept_coordinator_epoch_a_marker_refuses_is_read_again(db, caplog):
    with db.transaction("t-epoch") as tx:
        tx.send("a", value=b"first", partition=0)
    index = db.transaction_state.partition_for("t-epoch")
    assert db.transaction_state.coordinator_epochs[index] == 0      # read once, kept
    # A broker served the data dir meanwhile: its coordinator epoch 5 is in the state
    # partition's checkpoint and on a marker of the id's producer in "a".
    state_log = db.log(TRANSACTIONS_TOPIC, index)
    state_log.assign_epoch_start(5, state_log.end_offset)
    first = db.transaction_state.state("t-epoch")
    a = db.log("a", 0)
    a.append_marker(first.producer_id, first.producer_epoch, 5, True)
    with db.transaction("t-epoch") as tx:
        tx.send("a", value=b"second", partition=0)
    assert db.transaction_state.coordinator_epochs[index] == 5
    assert "refused" not in caplog.text
    assert a.ongoing_transactions() == [] and a.last_stable_offset == a.high_watermark
    assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == [b"first", b"second"]


def test_a_log_its_topic_deletion_closes_under_a_transaction_is_leased_again(db):
    db.create_topic("doomed", 1)
    tx = db.transaction("t10", batch_bytes=1)
    tx.send("doomed", value=b"x")                # written at once: its log is leased
    tx.send("a", value=b"y", partition=0)
    db.delete_topic("doomed")                    # closes the leased log
    with pytest.raises(UnknownTopicError):
        tx.commit()                              # the fresh lease finds no topic: aborted
    assert tx.ended
    assert db.transaction_state.state("t10").status is S.COMPLETE_ABORT
    a = db.log("a", 0)
    assert a.ongoing_transactions() == [] and list(a.read(isolation=Isolation.COMMITTED)) == []


def test_a_sync_round_with_a_closed_log_ends_the_rounds_it_began(db):
    a, b = db.log("a", 0), db.log("b", 0)
    a.append(b"x")
    b.append(b"y")
    before = a.recovery_point
    sync_round = db.sync_pool.begin()
    sync_round.add(("a", 0))
    sync_round.add(("b", 0))
    b.close()                       # after a's round began (key order), b's cannot
    with pytest.raises(LogClosedError):
        sync_round.finish()
    assert a.recovery_point == before        # a's round was cancelled: nothing synced
    a.flush()                                # and its sync lock and rendezvous are free
    assert a.recovery_point == a.end_offset
