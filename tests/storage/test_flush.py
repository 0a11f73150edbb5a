"""Flush policy (flush.messages, flush.ms, fsync="always" with group commit) and
what happens when the disk fails, observed through the file-system seam."""

import errno
import threading
import time

import pytest

import kqlite
from kqlite.errors import LogFailedError, StorageError
from kqlite.storage.fs import OsFile, OsFileSystem


class CountingFile(OsFile):
    __slots__ = ("fs",)

    def sync(self):
        self.fs.syncs.append(self.path)
        if self.fs.fail_sync and self.path.endswith(".log"):
            raise OSError(errno.EIO, "injected fsync failure")
        super().sync()

    def pwrite(self, data, pos):
        if self.fs.fail_write and self.path.endswith(".log"):
            # Write part of the data first, as a full disk does.
            super().pwrite(bytes(data)[:len(data) // 2], pos)
            raise OSError(errno.ENOSPC, "injected: no space left on device")
        super().pwrite(data, pos)


class CountingFS(OsFileSystem):
    def __init__(self):
        self.syncs = []
        self.fail_sync = False
        self.fail_write = False

    def open(self, path, create=False):
        f = super().open(path, create)
        counted = CountingFile(f.path, f._fd)
        counted.fs = self
        return counted

    def log_syncs(self):
        return sum(1 for p in self.syncs if p.endswith(".log"))


def test_default_mode_does_not_fsync_appends(tmp_path):
    fs = CountingFS()
    with kqlite.Log.open(tmp_path / "t-0", fs=fs) as log:
        for _ in range(50):
            log.append(b"x")
        assert fs.log_syncs() == 0
    assert fs.log_syncs() >= 1  # close flushes


def test_flush_messages(tmp_path):
    fs = CountingFS()
    with kqlite.Log.open(tmp_path / "t-0", fs=fs, flush_messages=10) as log:
        for _ in range(35):
            log.append(b"x")
        assert fs.log_syncs() == 3
        assert log.recovery_point == 30


def test_flush_ms_background(tmp_path):
    fs = CountingFS()
    with kqlite.Log.open(tmp_path / "t-0", fs=fs, flush_ms=50) as log:
        log.append(b"x")
        deadline = time.monotonic() + 5
        while log.recovery_point == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fs.log_syncs() >= 1
        assert log.recovery_point == 1


def test_fsync_always_syncs_before_returning(tmp_path):
    fs = CountingFS()
    with kqlite.Log.open(tmp_path / "t-0", fs=fs, fsync="always") as log:
        for i in range(5):
            log.append(b"x")
            assert fs.log_syncs() == i + 1
            assert log.recovery_point == i + 1


def test_group_commit_shares_fsyncs_between_threads(tmp_path):
    fs = CountingFS()
    n_threads, per_thread = 8, 50
    with kqlite.Log.open(tmp_path / "t-0", fs=fs, fsync="always") as log:
        def work(t):
            for i in range(per_thread):
                log.append(b"%d-%d" % (t, i))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = n_threads * per_thread
        assert log.end_offset == total
        assert log.recovery_point == total
        values = [r.value for r in log.read()]
    assert len(set(values)) == total
    assert fs.log_syncs() <= total + 1  # never more than one per append (plus close)


def test_failed_fsync_fails_the_log_until_reopened(tmp_path):
    fs = CountingFS()
    path = tmp_path / "t-0"
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    log.append(b"durable")
    fs.fail_sync = True
    with pytest.raises(LogFailedError):
        log.append(b"maybe lost")
    fs.fail_sync = False
    with pytest.raises(LogFailedError, match="reopen"):
        log.append(b"refused")  # no retry of the fsync: it could falsely succeed
    with pytest.raises(LogFailedError):
        log.flush()
    assert [r.value for r in log.read()][0] == b"durable"
    log.close()
    with kqlite.Log.open(path) as log:
        values = [r.value for r in log.read()]
        assert values[0] == b"durable" and b"refused" not in values
        assert log.append(b"again") == len(values)


def test_failed_write_is_undone_and_log_stays_usable(tmp_path):
    fs = CountingFS()
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, fs=fs) as log:
        log.append(b"first")
        fs.fail_write = True
        with pytest.raises(StorageError, match="no space"):
            log.append([b"x" * 1000])
        fs.fail_write = False
        assert log.end_offset == 1
        assert log.append(b"second") == 1
        assert [r.value for r in log.read()] == [b"first", b"second"]
    with kqlite.Log.open(path) as log:
        assert [r.value for r in log.read()] == [b"first", b"second"]
        assert log.recovery_reports == []
