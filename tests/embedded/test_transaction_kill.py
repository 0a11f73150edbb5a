"""A process SIGKILLed inside ``db.transaction()`` at random points (txn_child.py kills
itself at a random step of its transactions: before or after any append, marker, state
record or fsync round), then the data dir reopened with ``kqlite.open``, whose recovery
decides what the dead owner left:

- every transaction whose commit returned is there whole: its records in both topics
  and its offset commit, for read_committed readers;
- the transaction cut by the kill is all there or not at all; no other is visible;
- the last stable offset is the high watermark everywhere, no transaction is open on any
  partition and the id's state is decided (no hanging transaction).

A handful of runs by default; 200 with --soak."""

import os
import random
import subprocess
import sys

import kqlite
from kqlite.format.internal_topics import OFFSETS_TOPIC
from kqlite.format.transaction_records import TransactionStatus as S
from kqlite.storage import Isolation

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RECORDS = 6


def run_child(path, kill_at):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "txn_child.py"), str(path),
                           str(kill_at), str(RECORDS)], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    return [int(line.split()[1]) for line in proc.stdout.decode().splitlines()]


def transactions_in(db, topic, partitions):
    """{transaction number: record count} of what read_committed readers see."""
    seen = {}
    for p in range(partitions):
        for rec in db.log(topic, p).read(isolation=Isolation.COMMITTED):
            i = int(rec.value.split(b"-")[0])
            seen[i] = seen.get(i, 0) + 1
    return seen


def check(path, committed):
    db = kqlite.open(path, retention_check_interval_ms=0)
    try:
        a = transactions_in(db, "a", 1)
        b = transactions_in(db, "b", 2)
        cut = len(committed)        # the transaction the kill cut, visible whole or not
        assert set(a) == set(b), (a, b)
        assert set(committed) <= set(a) <= set(committed) | {cut}, (committed, a)
        assert all(n == RECORDS for n in a.values()) and all(n == RECORDS for n in b.values())
        offsets = db.offsets.committed("g")
        assert offsets.get(("a", 0), 0) == max(a, default=-1) + 1, (offsets, a)
        partitions = [("a", 0), ("b", 0), ("b", 1),
                      (OFFSETS_TOPIC, db.offsets.partition_for_commit("g"))]
        for t, p in partitions:
            lg = db.log(t, p)
            assert lg.last_stable_offset == lg.high_watermark, (t, p)
            assert lg.ongoing_transactions() == [], (t, p)
        state = db.transaction_state.state("child")
        assert state is None or state.status not in (S.ONGOING, S.PREPARE_COMMIT,
                                                      S.PREPARE_ABORT)
    finally:
        db.close()


def test_a_process_killed_inside_a_transaction_leaves_it_whole_or_gone(tmp_path, soak):
    runs = 200 if soak else 4
    rng = random.Random(2026)
    for run in range(runs):
        path = tmp_path / f"run{run}"
        db = kqlite.open(path, retention_check_interval_ms=0)
        db.create_topic("a", 1)
        db.create_topic("b", 2)
        db.close()
        # A transaction takes about 40 steps: kills land in the first few transactions.
        committed = run_child(path, rng.randrange(1, 160))
        check(path, committed)
