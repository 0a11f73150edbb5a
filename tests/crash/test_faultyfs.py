"""The harness itself: FaultyFS keeps exactly the books the crash tests rely on."""

import errno
import os
import random

import pytest

from faultyfs import SECTOR, FaultyFS, PowerLoss
from kqlite.storage.locking import FileLock


@pytest.fixture
def fs(disk):
    return FaultyFS(disk / "root")


def path(fs, name):
    return os.path.join(fs.root, name)


def read(fs, name):
    with open(path(fs, name), "rb") as f:
        return f.read()


def durable_file(fs, name, data):
    f = fs.open(path(fs, name), create=True)
    f.pwrite(data, 0)
    f.sync()
    fs.fsync_dir(fs.root)
    return f


def test_unsynced_writes_are_tracked_and_dropped(fs):
    f = durable_file(fs, "a", b"synced")
    f.pwrite(b"-unsynced", 6)
    assert fs.unsynced_writes(path(fs, "a")) == [(6, b"-unsynced")]
    fs.crash(random.Random(0), "drop")
    assert read(fs, "a") == b"synced"


def test_keep_mode_applies_everything(fs):
    f = durable_file(fs, "a", b"synced")
    f.pwrite(b"-unsynced", 6)
    f.truncate(10)
    fs.crash(random.Random(0), "keep")
    assert read(fs, "a") == b"synced-uns"


def test_new_file_without_directory_fsync_vanishes(fs):
    f = fs.open(path(fs, "new"), create=True)
    f.pwrite(b"data", 0)
    f.sync()                                      # data durable, entry not
    assert fs.unsynced_entries(fs.root) == [("set", "new")]
    assert "new" not in fs.durable_entries(fs.root)
    fs.crash(random.Random(0), "drop")
    assert not os.path.exists(path(fs, "new"))


def test_directory_fsync_makes_entries_durable(fs):
    durable_file(fs, "new", b"data")
    fs.crash(random.Random(0), "drop")
    assert read(fs, "new") == b"data"


def test_rename_and_remove_are_undone_without_directory_fsync(fs):
    durable_file(fs, "old", b"old contents").close()
    durable_file(fs, "victim", b"victim").close()
    tmp = fs.open(path(fs, "tmp"), create=True)
    tmp.pwrite(b"new contents", 0)
    tmp.sync()
    fs.rename(path(fs, "tmp"), path(fs, "old"))
    fs.remove(path(fs, "victim"))
    assert fs.unsynced_entries(fs.root) == [("set", "tmp"), ("rename", "tmp", "old"),
                                            ("del", "victim")]
    fs.crash(random.Random(0), "drop")
    assert sorted(os.listdir(fs.root)) == ["old", "victim"]
    assert read(fs, "old") == b"old contents" and read(fs, "victim") == b"victim"


def test_prefix_mode_keeps_operations_in_order(fs):
    f = durable_file(fs, "a", b"")
    for i in range(20):
        f.pwrite(b"%02d" % i, 2 * i)
    for seed in range(20):
        fs2 = FaultyFS(fs.root + "-%d" % seed)
        g = durable_file(fs2, "a", b"")
        for i in range(20):
            g.pwrite(b"%02d" % i, 2 * i)
        fs2.crash(random.Random(seed), "prefix")
        data = read(fs2, "a")
        assert data == b"".join(b"%02d" % i for i in range(len(data) // 2))


def test_garbage_never_touches_durable_bytes_it_does_not_overwrite(fs):
    """Powersafe overwrite: a torn or garbled append does not damage the synced bytes
    that share its sector; over many seeds every fate happens."""
    seen = set()
    for seed in range(60):
        fs2 = FaultyFS(fs.root + "-%d" % seed)
        f = durable_file(fs2, "a", b"S" * 700)             # sector 1 is partly durable
        f.pwrite(b"N" * 1000, 700)                          # spans sectors 1-3
        damage = fs2.crash(random.Random(seed), "random")
        data = read(fs2, "a")
        assert data[:700] == b"S" * 700
        tail = data[700:]
        if tail == b"N" * 1000:
            seen.add("applied")
        elif not tail:
            seen.add("dropped")
        elif set(tail) == {ord("N")}:
            assert (700 + len(tail)) % SECTOR == 0          # torn at a sector boundary
            seen.add("torn")
        else:
            assert damage["garbage"] == 1
            seen.add("garbage")
    assert seen == {"applied", "dropped", "torn", "garbage"}


def test_atomic_sectors_never_garble_a_one_sector_write(fs):
    for seed in range(30):
        fs2 = FaultyFS(fs.root + "-%d" % seed, atomic_sectors=True)
        f = durable_file(fs2, "a", b"old!" * 16)
        f.pwrite(b"new!" * 16, 0)
        fs2.crash(random.Random(seed), "random")
        assert read(fs2, "a") in (b"old!" * 16, b"new!" * 16)


def test_failed_sync_poisons_the_unsynced_writes(fs):
    """fsyncgate: after a failed fsync the pages are clean, so a later successful fsync
    does not make them durable; only a rewrite does."""
    f = durable_file(fs, "a", b"synced")
    f.pwrite(b"-lost", 6)
    fs.inject("sync", 1)
    with pytest.raises(OSError):
        f.sync()
    fs.clear_faults()
    f.sync()                                                # "succeeds"
    f.pwrite(b"!", 11)
    f.sync()
    assert read(fs, "a") == b"synced-lost!"                 # the page cache has it all
    fs.crash(random.Random(0), "keep")
    assert read(fs, "a") == b"synced\0\0\0\0\0!"


def test_lying_disk_makes_nothing_durable(disk):
    fs = FaultyFS(disk / "liar", lying=True)
    durable_file(fs, "a", b"data")
    fs.crash(random.Random(0), "drop")
    assert not os.path.exists(path(fs, "a"))


def test_faults_transient_persistent_enospc_and_match(fs):
    f = durable_file(fs, "a", b"")
    fs.inject("write", 2)
    f.pwrite(b"1", 0)
    with pytest.raises(OSError) as err:
        f.pwrite(b"22", 1)
    assert err.value.errno == errno.EIO and read(fs, "a") == b"12"   # half was written
    f.pwrite(b"3", 3)                                       # transient: once only
    fs.inject("any", 1, persistent=True)
    for op in (lambda: f.pwrite(b"x", 0), f.sync, lambda: fs.fsync_dir(fs.root),
               lambda: fs.open(path(fs, "b"), create=True)):
        with pytest.raises(OSError):
            op()
    fs.clear_faults()
    fs.budget, fs.written = 10, 0
    with pytest.raises(OSError) as err:
        f.pwrite(b"0123456789abc", 0)
    assert err.value.errno == errno.ENOSPC and read(fs, "a")[:10] == b"0123456789"
    with pytest.raises(OSError):
        f.pwrite(b"x", 20)                                  # the disk stays full
    fs.clear_faults()
    g = fs.open(path(fs, "b.log"), create=True)
    fs.inject("write", 1, match=".log")
    f.pwrite(b"fine", 0)
    with pytest.raises(OSError):
        g.pwrite(b"fails", 0)
    assert fs.hits[-1][3] == g.path


def test_crash_point_stops_the_machine_and_reboot_releases_locks(fs):
    f = durable_file(fs, "a", b"x")
    lock = FileLock(f)
    assert lock.try_lock(exclusive=True)
    fs.crash_at = ("fsync", fs.counts["fsync"] + 1)
    f.pwrite(b"y", 1)
    with pytest.raises(PowerLoss):
        f.sync()
    with pytest.raises(PowerLoss):
        fs.open(path(fs, "a"))                  # the machine is down
    fs.crash(random.Random(0), "drop")
    with pytest.raises(PowerLoss):
        f.pread(1, 0)                           # files of the old boot are dead
    f.close()                                   # and closing them is harmless
    again = fs.open(path(fs, "a"))
    assert FileLock(again).try_lock(exclusive=True)   # the dead process's flock is gone
    assert again.pread(10, 0) == b"x"
