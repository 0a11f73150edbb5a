"""Power loss at every fsync of a transactional workload, through FaultyFS (the TH3 loop
of test_power_loss.py, for transactions).

The workload (fsync="always"): two transactional producers and a plain one interleave,
transactions commit and abort across segment rolls, the log is closed and reopened
mid-way. At its k-th fsync the power goes; the disk is damaged in one of FaultyFS's
modes, the log is reopened, and:

- every append and marker that returned is there at its offset (fsync="always");
- nothing is half-visible: the ``.txnindex`` of every segment holds exactly the entries
  a replay of the data left computes (``kqlite check``'s), and the reopened log's last
  stable offset, read_committed records, open transactions and aborted entries equal
  the simple model's (txn_model.py) of the batches left;
- a second power cut right after the reopen changes none of it (recovery made the
  rebuilt indexes and snapshots durable, or rebuilds them the same again).
"""

import os
import random
import shutil
import sys

import kqlite
from faultyfs import MODES, FaultyFS, PowerLoss
from kqlite import Record
from kqlite.errors import KqliteError
from kqlite.format import parse_header
from kqlite.format.batch import build_batch, decode_records
from kqlite.format.control_records import read_marker
from kqlite.storage import Isolation
from kqlite.storage.log import NO_VERIFICATION
from kqlite.storage.verify import TransactionReplay, find_segments, verify_segment

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "storage"))
from txn_model import TxnModel  # noqa: E402

CONFIG = {"segment_bytes": 500, "index_interval_bytes": 100, "fsync": "always"}


def script():
    """(op, ...) steps: ("txn", pid, n), ("plain", n), ("end", pid, commit), ("roll",),
    ("reopen",). Two producers interleave; aborts and commits fall on both sides of
    rolls and of a reopen that finds transactions open."""
    return [("plain", 2), ("txn", 1, 2), ("plain", 1), ("txn", 2, 3), ("txn", 1, 1),
            ("end", 1, False), ("plain", 2), ("txn", 1, 2), ("roll",), ("txn", 2, 1),
            ("end", 2, True), ("txn", 2, 2), ("reopen",), ("plain", 1), ("end", 1, False),
            ("txn", 1, 1), ("roll",), ("end", 2, False), ("plain", 2), ("end", 1, True),
            ("txn", 2, 3), ("plain", 1)]


class Runner:
    """Runs the steps; ``acked`` maps each offset an append or marker returned to what
    is there."""

    def __init__(self, fs, path):
        self.fs, self.path = fs, path
        self.log = None
        self.acked = {}
        self.seq = {}
        self.n = 0

    def run(self, steps):
        self.log = kqlite.Log.open(self.path, fs=self.fs, **CONFIG)
        for step in steps:
            self.step(step)
        self.log.close()

    def step(self, step):
        kind = step[0]
        self.n += 1
        if kind == "txn":
            _, pid, n = step
            seq = self.seq.get(pid, 0)
            values = [b"t%d.%d.%d" % (pid, self.n, i) for i in range(n)]
            data = build_batch(values, producer_id=pid, producer_epoch=0, base_sequence=seq,
                               transactional=True)
            first = self.log.append_as_leader(data, leader_epoch=0,
                                              verification_guard=NO_VERIFICATION).first_offset
            self.seq[pid] = seq + n
            self.acked.update((first + i, v) for i, v in enumerate(values))
        elif kind == "plain":
            values = [b"p%d.%d" % (self.n, i) for i in range(step[1])]
            first = self.log.append(values)
            self.acked.update((first + i, v) for i, v in enumerate(values))
        elif kind == "end":
            _, pid, commit = step
            offset = self.log.append_marker(pid, 0, 0, commit)
            self.acked[offset] = ("COMMIT" if commit else "ABORT", pid)
        elif kind == "roll":
            self.log.roll()
        elif kind == "reopen":
            self.log.close()
            self.log = kqlite.Log.open(self.path, fs=self.fs, **CONFIG)


def model_of(log):
    """The simple model of the batches ``log`` holds, and what is at each offset."""
    model, found, offset = TxnModel(), {}, log.start_offset
    while offset < log.end_offset:
        data = log.read_batches(offset, 1 << 20, isolation=Isolation.LOG_END)
        if not data:
            break
        pos = 0
        while pos < len(data):
            h = parse_header(data, pos)
            if h.is_control:
                marker = read_marker(data, pos, h)
                model.marker(h.producer_id, marker.is_commit)
                found[h.base_offset] = (marker.name, h.producer_id)
            else:
                records = decode_records(data, pos, h)
                model.data(h.producer_id, h.is_transactional,
                           [(r.key, r.value) for r in records])
                found.update((r.offset, r.value) for r in records)
            pos += h.size
            offset = h.last_offset + 1
    return model, found


def state_of(log):
    return (log.end_offset, log.last_stable_offset, log.aborted_transactions(),
            [(r.offset, r.value) for r in log.read(isolation=Isolation.COMMITTED)])


def violations(fs, path, acked):
    try:
        log = kqlite.Log.open(path, fs=fs, **CONFIG)
    except KqliteError as exc:
        return [f"reopen failed: {exc!r}"]
    bad = []
    try:
        model, found = model_of(log)
        for offset, what in acked.items():
            if found.get(offset) != what:
                bad.append(f"LOST: offset {offset} held {what!r}, now {found.get(offset)!r}")
        if log.last_stable_offset != model.lso():
            bad.append(f"LSO {log.last_stable_offset}, model {model.lso()}")
        if log.aborted_transactions() != model.entries():
            bad.append(f"aborted {log.aborted_transactions()}, model {model.entries()}")
        if sorted(log.ongoing_transactions()) != model.open_transactions():
            bad.append(f"open {log.ongoing_transactions()}, model {model.open_transactions()}")
        committed = [(o, v) for o, _k, v in model.records(committed=True)]
        if [(r.offset, r.value) for r in log.read(isolation=Isolation.COMMITTED)] != committed:
            bad.append("read_committed differs from the model")
        replay = TransactionReplay(path)
        bad += [f"check: {p.message}" for seg in find_segments(fs, path)
                for p in verify_segment(fs, seg, replay=replay).problems]
        first = state_of(log)
    finally:
        log.close()
    if bad:
        return bad
    fs.crash(random.Random(1), "drop")       # right after recovery
    with kqlite.Log.open(path, fs=fs, **CONFIG) as log:
        if state_of(log) != first:
            bad.append(f"not durable after recovery: {first[:3]} then {state_of(log)[:3]}")
    return bad


def test_transactions_survive_power_loss_at_every_fsync(tmp_path, soak):
    steps = script()
    counter = FaultyFS(str(tmp_path / "count"))
    Runner(counter, str(tmp_path / "count" / "t-0")).run(steps)
    total = counter.counts["fsync"]
    assert total > 30
    seeds = 8 if soak else 2
    found, states = [], 0
    for k in range(1, total + 1):
        for s in range(seeds):
            root = tmp_path / f"k{k}-s{s}"
            fs = FaultyFS(str(root))
            path = str(root / "t-0")
            fs.crash_at = ("fsync", k)
            runner = Runner(fs, path)
            try:
                runner.run(steps)
            except PowerLoss:
                pass
            fs.crash_at = None
            fs.crash(random.Random(k * 100 + s), MODES[(k + s) % len(MODES)])
            bad = violations(fs, path, runner.acked)
            states += 1
            if bad:
                found.append(f"fsync #{k}, mode {MODES[(k + s) % len(MODES)]}: {bad[:3]}")
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(str(root) + ".inodes", ignore_errors=True)
    print(f"transactions, power loss: {states} crash states at {total} fsyncs")
    assert not found, f"{len(found)} of {states} crash states:\n" + "\n".join(found[:10])
