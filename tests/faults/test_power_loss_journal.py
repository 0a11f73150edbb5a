"""The power-loss journal of the fault harness (harness/power_loss.py) on its own: a child
process changes files through the journaled storage seam, is SIGKILLed, and the replay
must leave exactly the durable state.

The oracle is the crash suite's FaultyFS (tests/crash/faultyfs.py) in its ``drop`` mode,
which keeps the same books in memory: the same operations are run through FaultyFS in
this process and through the journal in the child, and the two disks must be equal after
the power cut, for hand-written cases and for random sequences (hypothesis). Then the
real storage engine: a child appends to a ``kqlite.Log`` through the journal and is
killed; after the replay every record a flush (or ``fsync="always"``) covered is there,
and what nothing synced is gone.

Run as ``python test_power_loss_journal.py ROOT JOURNAL MODE`` this file is the child.
"""

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _faultyfs():
    spec = importlib.util.spec_from_file_location(
        "crash_faultyfs", os.path.join(HERE, "..", "crash", "faultyfs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- The child --------------------------------------------------------------------------------

def _run_op(fs, root, op):
    from kqlite.storage.fs import atomic_write

    kind, args = op[0], op[1:]
    path = lambda rel: os.path.join(root, rel)  # noqa: E731
    if kind == "write":
        f = fs.open(path(args[0]), create=True)
        try:
            f.pwrite(bytes.fromhex(args[2]), args[1])
        finally:
            f.close()
    elif kind in ("truncate", "sync"):
        f = fs.open(path(args[0]))
        try:
            f.truncate(args[1]) if kind == "truncate" else f.sync()
        finally:
            f.close()
    elif kind == "rename":
        fs.rename(path(args[0]), path(args[1]))
    elif kind == "remove":
        fs.remove(path(args[0]))
    elif kind == "mkdir":
        fs.makedirs(path(args[0]))
    elif kind == "fsync_dir":
        fs.fsync_dir(path(args[0]))
    elif kind == "atomic":
        atomic_write(fs, path(args[0]), bytes.fromhex(args[1]), durable=args[2])
    elif kind == "rmdir":
        os.rmdir(path(args[0]))
    else:
        raise ValueError(op)


def _child_ops(root):
    """Run the JSON operations read from stdin through the journaled seam, answering
    "ok" to each, until killed."""
    from kqlite.storage.fs import DEFAULT_FS
    for line in sys.stdin:
        _run_op(DEFAULT_FS, root, json.loads(line))
        os.write(1, b"ok\n")


def _child_log(root, fsync, stop_after=None):
    """Append one record per call to the log ROOT/t-0, print "ack <offset>" after each,
    and every 10th time flush and print "flushed <log end>"; until killed, or until
    ``stop_after`` records, then print "done" and wait to be killed."""
    import kqlite
    log = kqlite.Log.open(os.path.join(root, "t-0"), segment_bytes=4096, fsync=fsync)
    n = 0
    while True:
        offset = log.append([b"record-%d" % n])
        os.write(1, b"ack %d\n" % offset)
        n += 1
        if n % 10 == 0 and fsync == "never":
            log.flush()
            os.write(1, b"flushed %d\n" % log.end_offset)
        if n == stop_after:
            os.write(1, b"done 0\n")
            while True:
                time.sleep(60)


def _child(root, journal, mode, stop_after=None):
    sys.path.insert(0, HERE)
    from harness.power_loss import install
    install(root, journal)
    os.write(1, b"ready\n")
    if mode == "ops":
        _child_ops(root)
    else:
        _child_log(root, mode, None if stop_after is None else int(stop_after))


# -- The parent side --------------------------------------------------------------------------

class Child:
    """A child process journaling ``root``."""

    def __init__(self, root, mode="ops", stop_after=None):
        from harness.power_loss import journal_dir_of
        self.root, self.journal = str(root), journal_dir_of(root)
        extra = [] if stop_after is None else [str(stop_after)]
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.root, self.journal, mode, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline()
        assert line == b"ready\n", f"{line!r}\n{self.proc.stderr.read().decode()}"

    def run(self, op):
        self.proc.stdin.write((json.dumps(op) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line == b"ok\n", f"{op}: {line!r}\n{self.proc.stderr.read().decode()}"

    def lines(self):
        return iter(self.proc.stdout.readline, b"")

    def power_loss(self):
        from harness.power_loss import replay
        self.proc.kill()
        self.proc.wait()
        assert self.proc.returncode == -signal.SIGKILL, self.proc.stderr.read().decode()
        return replay(self.journal)


def _tree(root):
    """{relative path: bytes, or None for a directory} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = fh.read()
    return out


def _initial(root):
    """The disk both sides start from (durable: it was there before the journal)."""
    os.makedirs(os.path.join(root, "d", "e"))
    for rel, data in (("a", bytes(range(40))), ("d/b", b"B" * 16), ("d/e/c", b"C" * 8)):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)


def _compare(tmp_path, ops):
    """Run ``ops`` on FaultyFS and in a journaling child, cut the power on both, compare.
    Operations FaultyFS refuses (a missing file, say) are left out on both sides."""
    faultyfs = _faultyfs()
    oracle_root, journal_root = tmp_path / "oracle", tmp_path / "journaled"
    _initial(str(oracle_root))
    _initial(str(journal_root))
    oracle = faultyfs.FaultyFS(str(oracle_root))
    child = Child(journal_root)
    done = []
    try:
        for op in ops:
            try:
                _run_op(oracle, str(oracle_root), op)
            except OSError:
                continue
            child.run(op)
            done.append(op)
    finally:
        stats = child.power_loss()
    oracle.crash(random.Random(0), "drop")
    assert _tree(str(journal_root)) == _tree(str(oracle_root)), (done, stats)
    return stats


# -- Hand-written cases -----------------------------------------------------------------------

def test_unsynced_appends_and_overwrites_are_undone(tmp_path):
    stats = _compare(tmp_path, [
        ["write", "a", 40, "aa" * 10],          # append, synced below
        ["sync", "a"],
        ["write", "a", 60, "bb" * 10],          # append, not synced: dropped
        ["write", "a", 5, "cc" * 10],           # overwrite of synced bytes: undone
        ["write", "a", 8, "dd" * 3],            # again: the oldest bytes win
        ["truncate", "d/b", 4],                 # truncation of synced bytes: undone
    ])
    assert stats["files"] == 2 and stats["bytes"] > 0


def test_synced_changes_survive_and_overwrites_after_a_sync_keep_the_synced_bytes(tmp_path):
    _compare(tmp_path, [
        ["write", "a", 0, "11" * 50],
        ["truncate", "a", 30],
        ["sync", "a"],
        ["write", "a", 0, "22" * 5],
        ["sync", "a"],
        ["write", "a", 2, "33" * 40],
    ])


def test_directory_entries_are_undone_until_the_directory_is_fsynced(tmp_path):
    stats = _compare(tmp_path, [
        ["write", "d/new", 0, "ee" * 4],        # created, synced, dir not fsynced: gone
        ["sync", "d/new"],
        ["remove", "d/b"],                      # removed without fsync_dir: back
        ["rename", "a", "d/e/a2"],              # moved across directories: back
        ["mkdir", "d/x/y"],                     # made: gone
        ["write", "kept", 0, "ff" * 4],         # created, synced, dir fsynced: stays
        ["sync", "kept"],
        ["fsync_dir", "."],
        ["atomic", "d/e/c", "77" * 6, True],    # durable replace: stays
        ["atomic", "d/e/z", "88" * 6, False],   # not durable: gone
    ])
    assert stats["entries"] > 0


def test_a_removed_directory_comes_back_with_its_files(tmp_path):
    """``os.rmdir`` is outside the seam (kqlite/db/files.py's remove_tree): the journal
    wraps it. FaultyFS has no rmdir, so the expected disk is written out here."""
    _initial(str(tmp_path / "disk"))
    child = Child(tmp_path / "disk")
    child.run(["remove", "d/e/c"])
    child.run(["rmdir", "d/e"])
    child.power_loss()
    assert _tree(str(tmp_path / "disk"))["d/e/c"] == b"C" * 8


def test_a_record_torn_by_the_kill_is_ignored(tmp_path):
    from harness.power_loss import JOURNAL, replay
    _initial(str(tmp_path / "disk"))
    child = Child(tmp_path / "disk")
    child.run(["write", "a", 0, "99" * 10])
    child.proc.kill()
    child.proc.wait()
    with open(os.path.join(child.journal, JOURNAL), "ab") as f:
        f.write(b"U\x00\x00\x01\x00" + b"x" * 10)    # a record cut short
    replay(child.journal)
    assert _tree(str(tmp_path / "disk"))["a"] == bytes(range(40))


# -- Random sequences against FaultyFS -----------------------------------------------------------

FILES = ["a", "b", "d/a", "d/b", "d/e/a", "d/e/c", "x/a"]
DIRS = [".", "d", "d/e", "x"]


def _ops():
    from hypothesis import strategies as st
    data = st.binary(min_size=1, max_size=24).map(bytes.hex)
    pos = st.integers(0, 64)
    f, d = st.sampled_from(FILES), st.sampled_from(DIRS)
    op = st.one_of(
        st.tuples(st.just("write"), f, pos, data),
        st.tuples(st.just("write"), f, pos, data),
        st.tuples(st.just("truncate"), f, pos),
        st.tuples(st.just("sync"), f),
        st.tuples(st.just("rename"), f, f),
        st.tuples(st.just("remove"), f),
        st.tuples(st.just("mkdir"), d),
        st.tuples(st.just("fsync_dir"), d),
        st.tuples(st.just("atomic"), f, data, st.booleans()),
    ).map(list)
    return st.lists(op, max_size=25)


def test_random_sequences_match_faultyfs_drop_mode(tmp_path_factory, soak):
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=300 if soak else 40, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_ops())
    def check(ops):
        _compare(tmp_path_factory.mktemp("seq"), ops)
    check()


# -- The real storage engine through the journal --------------------------------------------------

def _acks_then_power_loss(root, mode, acks, rng, *, stop=False):
    """Kill the child after about ``acks`` appends: in the middle of its appends, or
    (``stop``) once it has stopped after a number of appends that no flush ends on, so
    that some acknowledged appends are certainly unflushed."""
    target = acks + rng.randint(1, 9) if stop else acks + rng.randint(0, 15)
    child = Child(root, mode, stop_after=target if stop else None)
    acked, flushed = [], 0
    for line in child.lines():
        word, number = line.split()
        if word == b"done":
            break
        if word == b"ack":
            acked.append(int(number))
        else:
            flushed = int(number)
        if not stop and len(acked) >= target:
            break
    stats = child.power_loss()
    for line in child.lines():           # what it printed before the kill
        word, number = line.split()
        if word == b"ack":
            acked.append(int(number))
        else:
            flushed = int(number)
    return acked, flushed, stats


def _records(path):
    import kqlite
    from kqlite.storage import Isolation
    with kqlite.Log.open(path) as log:
        return [(r.offset, r.value) for r in log.read(0, isolation=Isolation.LOG_END)]


@pytest.mark.parametrize("seed", range(3))
def test_log_with_fsync_always_keeps_every_acknowledged_record(tmp_path, seed):
    acked, _flushed, _stats = _acks_then_power_loss(tmp_path / "disk", "always", 60,
                                                    random.Random(seed))
    records = _records(str(tmp_path / "disk" / "t-0"))
    assert [o for o, _v in records[:len(acked)]] == acked
    assert all(v == b"record-%d" % o for o, v in records)


@pytest.mark.parametrize("seed", range(3))
def test_log_in_default_mode_keeps_what_flush_covered_and_loses_the_rest(tmp_path, seed):
    acked, flushed, stats = _acks_then_power_loss(tmp_path / "disk", "never", 60,
                                                  random.Random(seed), stop=True)
    records = _records(str(tmp_path / "disk" / "t-0"))
    assert flushed >= 50 and stats["bytes"] > 0
    assert [o for o, _v in records] == list(range(len(records)))
    assert all(v == b"record-%d" % o for o, v in records)
    # A flush covers everything before it; nothing after the last one was synced.
    assert flushed <= len(records) < len(acked), (flushed, len(records), len(acked))


if __name__ == "__main__":
    _child(*sys.argv[1:5])
