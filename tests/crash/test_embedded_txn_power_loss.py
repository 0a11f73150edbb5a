"""Power loss at every fsync of embedded transactions' commit paths (db.transaction(),
kqlite/db/transaction.py), through FaultyFS (the loop of test_txn_power_loss.py, for a
whole data dir).

The workload: three transactions over two topics with an offset commit each; the second
is rolled back by an exception. At its k-th fsync the power goes; the disk is damaged in
one of FaultyFS's modes, the data dir is reopened with ``kqlite.open`` (whose recovery
decides what the dead owner left), and:

- a transaction whose commit returned is there whole (records in both topics, its
  offset commit) for read_committed readers: its PrepareCommit was durable, and so was
  its data before it;
- the transaction the power cut is there whole or not at all; the rolled-back one never;
- the last stable offset is the high watermark everywhere, nothing is open, the id's
  state is decided, and every ``.txnindex`` holds what a replay of the data computes;
- a second power cut right after the recovery (which fsyncs nothing of its own) and a
  second reopen give the same answer.
"""

import random
import shutil

import pytest

import kqlite
from faultyfs import MODES, FaultyFS, PowerLoss
from kqlite.errors import LogFailedError
from kqlite.format.internal_topics import OFFSETS_TOPIC
from kqlite.format.transaction_records import TransactionStatus as S
from kqlite.storage import Isolation
from kqlite.storage.verify import TransactionReplay, find_segments, verify_segment

RECORDS = 3
PLAN = [True, False, True]      # commit, roll back, commit


class RolledBack(Exception):
    pass


def setup(fs, path):
    db = kqlite.open(path, fs=fs, retention_check_interval_ms=0)
    db.create_topic("a", 1)
    db.create_topic("b", 2)
    db.close()


def workload(fs, path, committed):
    db = kqlite.open(path, fs=fs, retention_check_interval_ms=0)
    for i, commit in enumerate(PLAN):
        try:
            # The rolled-back one writes each record at once: its abort has markers to write.
            with db.transaction("pl", batch_bytes=1 << 20 if commit else 1) as tx:
                for j in range(RECORDS):
                    tx.send("a", value=b"%d-%d" % (i, j))
                    tx.send("b", value=b"%d-%d" % (i, j), key=b"%d" % j)
                tx.commit_offsets("g", {("a", 0): i + 1})
                if not commit:
                    raise RolledBack()
        except RolledBack:
            pass
        else:
            committed.append(i)
    db.close()


def outcome(fs, path):
    """(transactions visible, offset of g, problems) after a reopen."""
    db = kqlite.open(path, fs=fs, retention_check_interval_ms=0)
    bad = []
    try:
        seen = {}
        for t, p in (("a", 0), ("b", 0), ("b", 1)):
            for rec in db.log(t, p).read(isolation=Isolation.COMMITTED):
                i = int(rec.value.split(b"-")[0])
                seen.setdefault(i, []).append(t)
        for i, topics in seen.items():
            if sorted(topics) != ["a"] * RECORDS + ["b"] * RECORDS:
                bad.append(f"transaction {i} is partly visible: {topics}")
        offset = db.offsets.committed("g").get(("a", 0))
        partitions = [("a", 0), ("b", 0), ("b", 1)]
        if OFFSETS_TOPIC in db.list_topics(internal=True):
            partitions.append((OFFSETS_TOPIC, db.offsets.partition_for_commit("g")))
        for t, p in partitions:
            lg = db.log(t, p)
            if lg.last_stable_offset != lg.high_watermark or lg.ongoing_transactions():
                bad.append(f"{t}-{p}: LSO {lg.last_stable_offset}, HW {lg.high_watermark}, "
                           f"open {lg.ongoing_transactions()}")
            # Every .txnindex as a replay of the data computes it (kqlite check's rule).
            replay = TransactionReplay(lg.path)
            bad += [f"{t}-{p}: {problem.message}" for seg in find_segments(fs, lg.path)
                    for problem in verify_segment(fs, seg, replay=replay).problems]
        state = db.transaction_state.state("pl") if "__transaction_state" in \
            db.list_topics(internal=True) else None
        if state is not None and state.status in (S.ONGOING, S.PREPARE_COMMIT,
                                                  S.PREPARE_ABORT):
            bad.append(f"the id is left {state.status.state_name}")
        return sorted(seen), offset, bad
    finally:
        db.close()


def violations(fs, path, committed):
    visible, offset, bad = outcome(fs, path)
    cut = len(committed) + (1 if len(committed) >= 1 else 0)   # the rolled-back one is 1
    if not set(committed) <= set(visible):
        bad.append(f"LOST: committed {committed}, visible {visible}")
    if 1 in visible:
        bad.append("the rolled-back transaction is visible")
    if not set(visible) <= set(committed) | {cut}:
        bad.append(f"visible {visible}, committed {committed}")
    expected = max(visible) + 1 if visible else None
    if offset != expected:
        bad.append(f"offset {offset}, expected {expected} for {visible}")
    if bad:
        return bad
    fs.crash(random.Random(7), "drop")
    again = outcome(fs, path)
    if again[:2] != (visible, offset) or again[2]:
        bad.append(f"after a second power cut: {again}, first {(visible, offset)}")
    return bad


def test_embedded_transactions_survive_power_loss_at_every_fsync(disk, soak):
    counter = FaultyFS(str(disk / "count"))
    setup(counter, str(disk / "count" / "data"))
    counter.reset_faults()
    workload(counter, str(disk / "count" / "data"), [])
    total = counter.counts["fsync"]
    assert total >= 6
    seeds = 4 if soak else 1
    found, states = [], 0
    for k in range(1, total + 1):
        for s in range(seeds):
            root = disk / f"k{k}-s{s}"
            fs = FaultyFS(str(root))
            path = str(root / "data")
            setup(fs, path)
            fs.reset_faults()
            fs.crash_at = ("fsync", k)
            committed = []
            try:
                workload(fs, path, committed)
            except PowerLoss:
                pass
            fs.crash_at = None
            mode = MODES[(k + s) % len(MODES)]
            fs.crash(random.Random(k * 100 + s), mode)
            bad = violations(fs, path, committed)
            states += 1
            if bad:
                found.append(f"fsync #{k}, mode {mode}: {bad[:3]}")
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(str(root) + ".inodes", ignore_errors=True)
    print(f"embedded transactions, power loss: {states} crash states at {total} fsyncs")
    assert not found, f"{len(found)} of {states} crash states:\n" + "\n".join(found[:10])


def test_a_failed_fsync_of_the_commit_round_fails_the_commit_and_ends_every_round(disk):
    fs = FaultyFS(str(disk / "eio"))
    path = str(disk / "eio" / "data")
    setup(fs, path)
    fs.reset_faults()
    fs.inject("sync", 1, match="b-0/00000000000000000000.log")
    db = kqlite.open(path, fs=fs, retention_check_interval_ms=0)
    try:
        tx = db.transaction("eio")
        tx.send("a", value=b"lost")
        tx.send("b", value=b"lost", partition=0)
        tx.commit_offsets("g", {("a", 0): 1})
        with pytest.raises(LogFailedError):
            tx.commit()              # before the commit point: never committed
        assert fs.fault_hit and tx.ended
        # The round of every other log ended (its sync lock is free, its rounds go on).
        a = db.log("a", 0)
        a.append(b"after")
        a.flush()
        assert [r.value for r in a.read(isolation=Isolation.COMMITTED)] == [b"after"]
    finally:
        db.close()
    fs.clear_faults()
    db = kqlite.open(path, fs=fs, retention_check_interval_ms=0)   # recovery decides it
    try:
        for t, p in (("a", 0), ("b", 0)):
            lg = db.log(t, p)
            assert b"lost" not in [r.value for r in lg.read(isolation=Isolation.COMMITTED)]
            assert lg.ongoing_transactions() == [] and lg.last_stable_offset == lg.high_watermark
        assert db.transaction_state.state("eio").status is S.COMPLETE_ABORT
    finally:
        db.close()
