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
        if self.path.endswith(".log") and (self.fs.fail_write or (
                self.fs.fail_marker is not None and self.fs.fail_marker in bytes(data))):
            # Write part of the data first, as a full disk does.
            super().pwrite(bytes(data)[:len(data) // 2], pos)
            raise OSError(errno.ENOSPC, "injected: no space left on device")
        super().pwrite(data, pos)


class CountingFS(OsFileSystem):
    def __init__(self):
        self.syncs = []
        self.fail_sync = False
        self.fail_write = False
        self.fail_marker = None     # a write holding these bytes fails

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


def _threads(n, target):
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a durable append never returned"


def test_each_thread_gets_its_own_offset_once_it_is_durable(tmp_path):
    # fsync="always" one-record appends from threads go through the queue whose
    # leader writes everybody's record (group_commit.write_and_sync).
    n_threads, per_thread = 8, 40
    got = {}
    with kqlite.Log.open(tmp_path / "t-0", fsync="always") as log:
        def work(t):
            mine = []
            for i in range(per_thread):
                value = b"%d-%d" % (t, i)
                offset = log.append(value)
                assert log.recovery_point > offset      # durable before it returned
                mine.append((offset, value))
            got[t] = mine
        _threads(n_threads, work)
        stored = {r.offset: r.value for r in log.read()}
    returned = dict(pair for mine in got.values() for pair in mine)
    assert sorted(returned) == list(range(n_threads * per_thread))
    assert returned == stored
    for mine in got.values():           # a thread's own appends keep its order
        assert [o for o, _ in mine] == sorted(o for o, _ in mine)


def test_a_failed_round_fails_every_thread_with_its_own_error(tmp_path):
    fs = CountingFS()
    path = tmp_path / "t-0"
    errors, acknowledged = {}, {}
    ready = threading.Barrier(8)
    log = kqlite.Log.open(path, fs=fs, fsync="always")

    def work(t):
        acked = acknowledged.setdefault(t, [])
        ready.wait()
        for i in range(10_000):
            try:
                acked.append((log.append(b"%d-%d" % (t, i)), b"%d-%d" % (t, i)))
            except LogFailedError as exc:
                errors[t] = exc
                return
            if i == 20:
                fs.fail_sync = True
    _threads(8, work)
    assert sorted(errors) == list(range(8))
    assert len({id(e) for e in errors.values()}) == 8      # raised in each thread anew
    log.close()
    with kqlite.Log.open(path) as log:
        stored = {r.offset: r.value for r in log.read()}
    for acked in acknowledged.values():
        for offset, value in acked:
            assert stored[offset] == value


def test_a_record_whose_write_fails_fails_alone(tmp_path):
    fs = CountingFS()
    fs.fail_marker = b"bad"
    results = {}
    with kqlite.Log.open(tmp_path / "t-0", fs=fs, fsync="always") as log:
        def work(t):
            out = results[t] = []
            for i in range(30):
                value = b"bad-%d" % t if (t == 3 and i == 15) else b"%d-%d" % (t, i)
                try:
                    out.append((log.append(value), value))
                except StorageError as exc:
                    out.append((exc, value))
        _threads(8, work)
        stored = [(r.offset, r.value) for r in log.read()]
    failed = [(r, v) for out in results.values() for r, v in out if not isinstance(r, int)]
    assert [v for _, v in failed] == [b"bad-3"]
    assert "no space" in str(failed[0][0])
    good = sorted((r, v) for out in results.values() for r, v in out if isinstance(r, int))
    assert good == stored and len(stored) == 8 * 30 - 1     # dense, nothing half-written


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


def test_durable_one_record_appends_to_a_log_with_producer_state(tmp_path):
    # A log an idempotent producer wrote to keeps its producer state loaded, and then
    # a one-record append takes the general write path: inside a round's leader that
    # path must write without asking for a round of its own (it would wait for itself).
    from kqlite.format.batch import build_batch
    with kqlite.Log.open(tmp_path / "t-0", fsync="always") as log:
        log.append_as_leader(build_batch([b"idem-0", b"idem-1"], producer_id=11,
                                         producer_epoch=0, base_sequence=0), leader_epoch=0)
        got = {}

        def work(t):
            got[t] = [log.append(b"%d-%d" % (t, i)) for i in range(20)]
        _threads(4, work)
        assert sorted(o for offsets in got.values() for o in offsets) == list(range(2, 82))
        assert log.recovery_point == 82
        # The producer state still answers a retry of the first batch with its offsets.
        info = log.append_as_leader(build_batch([b"idem-0", b"idem-1"], producer_id=11,
                                                producer_epoch=0, base_sequence=0),
                                    leader_epoch=0)
        assert info.duplicate and info.first_offset == 0 and log.end_offset == 82
