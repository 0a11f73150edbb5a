"""A Log handle that only reads writes nothing and fsyncs nothing (storage/clean_mark.py),
and the first change of a handle makes the "not clean" mark durable before its data.

Counted through the file-system seam (FaultyFS records every operation), never timed.
"""

import os
import random
import subprocess
import sys

import pytest

import kqlite
from faultyfs import MODES
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.sharing import STATE_FILE
from kqlite.storage.state import FLAG_CLEAN, read_state
from test_power_loss import new_disk

CHANGES = ("write", "truncate", "sync", "dirsync", "rename", "remove", "mkdir")


def snapshot(root):
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, root)] = f.read()
    return files


def state_flags(fs, path):
    f = fs.open(os.path.join(path, STATE_FILE))
    try:
        return read_state(f).flags
    finally:
        f.close()


def changes(fs):
    return [(kind, p) for kind, p in fs.trace if kind in CHANGES]


@pytest.mark.parametrize("layout", ["bare", "datadir"])
def test_read_only_open_and_close_change_nothing_and_fsync_nothing(disk, layout):
    fs, path = new_disk(disk, "root", layout)
    with kqlite.Log.open(path, fs=fs, segment_bytes=200) as log:
        for i in range(10):
            log.append(b"record %d" % i)
    before = snapshot(fs.root)
    fs.reset_faults()
    fs.trace = []
    with kqlite.Log.open(path, fs=fs) as log:
        assert [r.value for r in log.read()] == [b"record %d" % i for i in range(10)]
        assert log.read_one(3).value == b"record 3"
        assert log.high_watermark == log.end_offset == 10
    done = changes(fs)
    if layout == "datadir":
        # The data dir's clean-shutdown marker (data_dir.py) is removed when a log opens
        # and written again when the last one closes: its directory fsync is the only
        # one, and nothing in the partition directory changes.
        assert done == [("remove", os.path.join(os.path.dirname(path), ".kafka_cleanshutdown")),
                        ("dirsync", os.path.dirname(path))]
        assert fs.counts["fsync"] == 1
    else:
        assert done == []
        assert fs.counts["fsync"] == 0
    assert snapshot(fs.root) == before
    assert state_flags(fs, path) & FLAG_CLEAN
    # The next opener finds the log cleanly closed: no recovery, the same records.
    with kqlite.Log.open(path, fs=fs) as log:
        assert log.recovery_reports == []
        assert log.end_offset == 10


def test_a_reader_that_dies_leaves_the_log_clean(tmp_path):
    """A reader killed before it closes (a Spark task's worker) never wrote "not clean",
    so the next open needs no recovery."""
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as log:
        log.append([b"a", b"b"])
    child = subprocess.run([sys.executable, "-c", (
        "import os, sys, kqlite\n"
        "log = kqlite.Log.open(sys.argv[1])\n"
        "assert [r.value for r in log.read()] == [b'a', b'b']\n"
        "os.kill(os.getpid(), 9)\n"), path], timeout=60)
    assert child.returncode == -9
    assert state_flags(DEFAULT_FS, path) & FLAG_CLEAN
    with kqlite.Log.open(path) as log:
        assert log.recovery_reports == []
        assert [r.value for r in log.read()] == [b"a", b"b"]


@pytest.mark.parametrize("mode", ["append", "append_batches", "roll", "delete_records",
                                  "truncate_to", "assign_epoch_start"])
def test_first_change_makes_the_not_clean_mark_durable_before_its_data(disk, mode):
    fs, path = new_disk(disk, "root", "bare")
    with kqlite.Log.open(path, fs=fs) as log:
        log.append([b"a", b"b", b"c"])
    state = os.path.join(path, STATE_FILE)
    log = kqlite.Log.open(path, fs=fs)
    fs.trace = []
    if mode == "append":
        log.append(b"d")
    elif mode == "append_batches":
        log.append_batches(log.read_batches(0))
    elif mode == "roll":
        log.roll()
    elif mode == "delete_records":
        log.delete_records(1)
    elif mode == "truncate_to":
        log.truncate_to(2)
    else:
        log.assign_epoch_start(5, 3)
    done = changes(fs)
    assert done[:2] == [("write", state), ("sync", state)], done
    assert state_flags(fs, path) & FLAG_CLEAN == 0
    # Once per handle: later changes do not fsync the state again for the mark.
    fs.trace = []
    log.append([b"e"])
    log.append([b"f"])
    assert ("sync", state) not in changes(fs)
    log.close()
    assert state_flags(fs, path) & FLAG_CLEAN


def test_power_cut_right_after_the_mark_loses_nothing(disk):
    fs, path = new_disk(disk, "root", "bare")
    with kqlite.Log.open(path, fs=fs, fsync="always") as log:
        log.append([b"a", b"b"])
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    fs.reset_faults()
    fs.crash_at = ("fsync", 2)      # the mark's fsync succeeds, the append's does not
    with pytest.raises(BaseException):
        log.append(b"c")
    fs.crash(random.Random(1), "random")
    with kqlite.Log.open(path, fs=fs) as log:
        values = [r.value for r in log.read()]
        assert values in ([b"a", b"b"], [b"a", b"b", b"c"])


@pytest.mark.parametrize("mode", MODES)
def test_acknowledged_appends_after_a_read_only_reopen_survive_power_loss(disk, mode):
    """The reopened-after-a-clean-close case of test_power_loss.py, through a handle that
    read first (no mark at open): every damage mode, several seeds."""
    for seed in range(6):
        fs, path = new_disk(disk, f"{mode}-{seed}", "bare")
        with kqlite.Log.open(path, fs=fs, fsync="always") as log:
            log.append(b"one")
        with kqlite.Log.open(path, fs=fs) as reader:
            assert [r.value for r in reader.read()] == [b"one"]
        log = kqlite.Log.open(path, fs=fs, fsync="always")
        assert [r.value for r in log.read()] == [b"one"]
        log.append([b"two", b"three"])
        log.append(b"four")
        fs.crash(random.Random(seed), mode)
        with kqlite.Log.open(path, fs=fs) as log:
            assert [r.value for r in log.read()] == [b"one", b"two", b"three", b"four"]


def test_reader_closing_while_a_writer_is_open_fsyncs_nothing(disk):
    fs, path = new_disk(disk, "root", "bare")
    writer = kqlite.Log.open(path, fs=fs)
    writer.append([b"a", b"b"])
    reader = kqlite.Log.open(path, fs=fs)
    writer.append(b"c")
    assert [r.value for r in reader.read()] == [b"a", b"b", b"c"]
    fs.trace = []
    fs.reset_faults()
    reader.close()
    assert changes(fs) == [] and fs.counts["fsync"] == 0
    writer.append(b"d")
    writer.close()
    assert state_flags(fs, path) & FLAG_CLEAN
    fs.crash(random.Random(0), "drop")
    with kqlite.Log.open(path, fs=fs) as log:
        assert [r.value for r in log.read()] == [b"a", b"b", b"c", b"d"]


def test_reader_closing_last_after_a_writer_marks_the_log_clean_durably(disk):
    """Another handle wrote and closed while this one was open: the state is not clean,
    so the reader, closing last, does the ordinary close (flush, clean mark, fsync)."""
    fs, path = new_disk(disk, "root", "bare")
    reader = kqlite.Log.open(path, fs=fs)
    with kqlite.Log.open(path, fs=fs) as writer:
        writer.append([b"a", b"b"])
    assert state_flags(fs, path) & FLAG_CLEAN == 0
    assert [r.value for r in reader.read()] == [b"a", b"b"]
    reader.close()
    assert state_flags(fs, path) & FLAG_CLEAN
    fs.crash(random.Random(0), "drop")
    assert state_flags(fs, path) & FLAG_CLEAN
    with kqlite.Log.open(path, fs=fs) as log:
        assert log.recovery_reports == []
        assert [r.value for r in log.read()] == [b"a", b"b"]


def test_unchanged_checkpoints_are_not_rewritten(disk):
    fs, path = new_disk(disk, "root", "datadir")
    with kqlite.Log.open(path, fs=fs) as log:
        log.append([b"a", b"b"])
    data = os.path.dirname(path)
    with open(os.path.join(data, "recovery-point-offset-checkpoint")) as f:
        assert f.read().splitlines()[2] == "t 0 2"
    log = kqlite.Log.open(path, fs=fs)
    assert log.delete_records(0) == 0      # a write that moves nothing: the handle marks
    fs.trace = []
    log.close()         # the ordinary close; the checkpoints it would write are the same
    done = changes(fs)
    assert ("sync", os.path.join(path, STATE_FILE)) in done
    assert not [p for kind, p in done if kind == "rename"], done
