"""AT-07: SQLite-style I/O-error loops (``do_faultsim_test``) through FaultyFS.

For each fault kind and each operation index i = 1, 2, ... the workload (appends,
a roll, delete_records, retention, close/reopen, flush, close) runs with the i-th
operation of the kind failing, until a run completes without reaching operation i.
What each run asserts:

1. Every operation that fails raises a KqliteError subclass (StorageError,
   LogFailedError): never a bare OSError from append, roll, flush, delete_records,
   enforce_retention or close. (Log.open is held to the same rule.)
2. A failed fsync puts the log in the failed state: the call raises LogFailedError,
   every later write raises LogFailedError even once the disk is healthy again, and
   the log issues no further fsync (no retry, "fsyncgate") - not even in close().
3. With the faults off, the log reopens (recovery) and then:
   - every append that returned is there with identical bytes and dense offsets;
   - an append that raised StorageError (a failed write, undone) is absent;
   - an append that raised LogFailedError (failed fsync, or a failed write whose undo
     also failed) may be present or absent, but only whole and intact (so may one
     that let a bare OSError escape: rule 1 is reported separately);
   - the log start is between the last acknowledged one and the highest requested;
   - the log accepts appends again.
4. Then the power is cut: every append acknowledged as durable (fsync="always"
   returned, or flush() or close() returned), including the one made after the healthy
   reopen, survives.

Fault kinds: EIO transient (the i-th operation of any kind fails once), EIO
persistent (it and every later one fail), ENOSPC (the disk fills up at the i-th
write: that write is cut short, every later write fails), EIO on fsync (the i-th
file or directory fsync fails once; its unsynced pages are lost to later syncs).

Rules 2-4 and rule 1 are separate tests over the same loop results. Each bug the
loops found has a small deterministic test below (all fixed: recovery after a failed
fsync, close after a failed flush, the clean-shutdown marker of a failed log, an
append that rolled then failed, bare OSErrors from the state file, an index, a new
segment or a checkpoint).
"""

import errno
import os
import random
import shutil
import tempfile

import pytest

import kqlite
from faultyfs import FaultyFS
from kqlite.errors import KqliteError, LogClosedError, LogFailedError, StorageError
from kqlite.storage.data_dir import write_meta_properties
from kqlite.storage.fs import DEFAULT_FS
from workload import Runner, check, script

SCRIPT = script(3, appends=(4, 2, 2, 3))

KINDS = {
    "eio-transient": dict(category="any", error=errno.EIO, persistent=False),
    "eio-persistent": dict(category="any", error=errno.EIO, persistent=True),
    "enospc": dict(category="write", error=errno.ENOSPC, persistent=True),
    "eio-fsync": dict(category="fsync", error=errno.EIO, persistent=False),
}


def new_disk(base, name):
    root = os.path.join(str(base), name)
    data = os.path.join(root, "data")
    os.makedirs(data)
    write_meta_properties(DEFAULT_FS, data)
    return FaultyFS(root), os.path.join(data, "t-0")


def faulty_run(fs, path, kind, at):
    """Run SCRIPT with the fault at operation ``at``. Returns (runner, leaks, problems):
    bare OSErrors that escaped (rule 1) and violations of rule 2."""
    spec = KINDS[kind]
    fs.inject(spec["category"], at, spec["error"], spec["persistent"])
    runner = Runner(fs, path)
    leaks, problems = [], []
    failed_log = None
    failed_at = None        # fsyncs of the partition's files when the log failed
    for step in SCRIPT:
        if runner.log is None and step[0] != "open":
            continue        # the open failed: the rest of this life is skipped
        current = runner.log
        hits = len(fs.hits)
        try:
            runner.step(step)
        except KqliteError as exc:
            if isinstance(exc, LogFailedError):
                if step[0] != "close":
                    failed_log = current
                failed_at = _log_syncs(fs, path)
                break
            if step[0] in ("open", "close"):
                runner.log = None
        except OSError as exc:
            leaks.append(f"{step[0]}: bare {exc!r} leaked ({fs.hits[-1:]})")
            if step[0] in ("open", "close"):
                runner.log = None
            else:
                break
        else:
            fsync_failed = [h for h in fs.hits[hits:] if h[2] in ("sync", "dirsync")
                            and _in_partition(h[3], path)]
            if fsync_failed and step[0] not in ("open", "close"):
                problems.append(f"{step[0]} returned normally after a failed fsync "
                                f"{fsync_failed}")
    fs.clear_faults()
    if failed_log is not None:
        try:
            failed_log.append(b"after the failure")
            problems.append("append succeeded on a failed log")
        except LogFailedError:
            pass
        except Exception as exc:
            problems.append(f"append on a failed log raised {exc!r}, not LogFailedError")
    for log in {id(x): x for x in (runner.log, failed_log) if x is not None}.values():
        try:
            log.close()
        except KqliteError:
            pass
        except OSError as exc:
            leaks.append(f"close: bare {exc!r} leaked")
    if failed_at is not None and _log_syncs(fs, path) != failed_at:
        problems.append(f"the failed log fsynced again: {fs.sync_calls[-3:]}")
    runner.log = None
    return runner, leaks, problems


def _in_partition(p, path):
    return p == path or p.startswith(path + os.sep)


def _log_syncs(fs, path):
    return sum(1 for p in fs.sync_calls if _in_partition(p.rstrip(os.sep), path))


def reopen_and_check(fs, path, runner, durable, tag):
    """Reopen with a healthy disk, check the model, append one more record (the log must
    accept writes again) and close, which makes it durable. Returns violations."""
    config = dict(runner.config or SCRIPT[0][1])
    try:
        log = kqlite.Log.open(path, fs=fs, **config)
    except Exception as exc:
        return [f"reopen with a healthy disk failed: {exc!r}"]
    try:
        bad = check(log, runner.model, durable=durable)
        if not bad:
            model = runner.model
            value = b"healthy again " + tag.encode()
            n = model.begin_append([value])
            model.appends[n][0] = log.end_offset
            model.records.setdefault(log.end_offset, {})[n] = value
            if log.append(value) != model.appends[n][0]:
                bad.append("append after reopen did not go to the log end")
            model.settle(n, "durable")
    finally:
        log.close()
    return bad


def fault_loop(base, kind, limit=2000):
    """Returns (runs, leaks, violations)."""
    violations, leaks = [], []
    for at in range(1, limit):
        fs, path = new_disk(base, "%s-%d" % (kind, at))
        runner, leaked, problems = faulty_run(fs, path, kind, at)
        hit = fs.fault_hit
        where = f"{kind} at operation #{at} ({fs.hits[0][2]} {os.path.basename(fs.hits[0][3])})" \
            if hit else f"{kind} (no fault)"
        leaks += [f"{where}: {x}" for x in leaked]
        bad = list(problems)
        # As after a process crash: everything that returned counts.
        bad += reopen_and_check(fs, path, runner, False, "1")
        if not bad:
            # Then a power cut: what the reopened log acknowledged must survive it too
            # (after a failed fsync, pages the kernel marked clean are not on disk).
            fs.crash(random.Random(at), "drop")
            bad += reopen_and_check(fs, path, runner, True, "2")
        if bad:
            violations.append(f"{where}: " + "; ".join(bad[:4]))
        _drop(fs)
        if not hit:
            return at, leaks, violations
    raise AssertionError(f"{kind}: the workload never completed without a fault")


def _drop(fs):
    shutil.rmtree(fs.root, ignore_errors=True)
    shutil.rmtree(fs.root + ".inodes", ignore_errors=True)


# -- The loops -----------------------------------------------------------------------------

_results = {}


def loop_result(kind):
    """Run the fault loop for ``kind`` once per session (two tests read its results)."""
    if kind not in _results:
        base = tempfile.mkdtemp(prefix="kqlite-faults-",
                                dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        try:
            _results[kind] = fault_loop(base, kind)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return _results[kind]


@pytest.mark.parametrize("kind", list(KINDS))
def test_fault_loop_loses_nothing_acknowledged(kind):
    """Rules 2-4 for every operation index (see the module docstring)."""
    runs, _leaks, violations = loop_result(kind)
    assert runs > 20
    assert not violations, f"{len(violations)} of {runs} runs:\n" + "\n".join(violations[:15])


@pytest.mark.parametrize("kind", list(KINDS))
def test_fault_loop_raises_only_kqlite_errors(kind):
    """Rule 1: no bare OSError escapes any Log call."""
    runs, leaks, _violations = loop_result(kind)
    assert not leaks, f"{len(leaks)} leaks in {runs} runs:\n" + "\n".join(leaks[:15])


# -- One test per bug the loops found (deterministic) ------------------------------------------

def open_log(fs, path, **config):
    return kqlite.Log.open(path, fs=fs, **dict({"fsync": "always"}, **config))


def test_fsync_failure_then_reopen_then_power_loss(disk):
    fs = FaultyFS(disk / "root")
    path = str(disk / "root" / "t-0")
    log = open_log(fs, path)
    log.append([b"a", b"b"])
    fs.inject("sync", 1, match=".log")
    with pytest.raises(LogFailedError):
        log.append([b"c", b"d"])          # never acknowledged; its pages are now "clean"
    fs.clear_faults()
    log.close()
    with open_log(fs, path) as log:       # recovery keeps c, d (they are in the page cache)
        assert [r.value for r in log.read()] == [b"a", b"b", b"c", b"d"]
        assert log.append(b"e") == 4      # acknowledged: fsync="always"
    fs.crash(random.Random(0), "drop")
    with open_log(fs, path) as log:
        recs = [(r.offset, r.value) for r in log.read()]
    assert (4, b"e") in recs, recs
    assert [o for o, _ in recs] == list(range(len(recs))), f"offsets have a hole: {recs}"


def test_failed_append_after_a_roll(disk):
    fs = FaultyFS(disk / "root")
    path = str(disk / "root" / "t-0")
    with open_log(fs, path, segment_bytes=300) as log:
        log.append(b"x" * 100)
        fs.inject("write", 1, match=".log")            # the append that rolls fails
        with pytest.raises(StorageError):
            log.append(b"y" * 150)
        fs.clear_faults()
        assert len(log.segments) == 2
        assert log.append(b"z" * 10) == 1              # acknowledged
        assert [r.value for r in log.read()] == [b"x" * 100, b"z" * 10]
    with open_log(fs, path) as log:
        assert [r.value for r in log.read()] == [b"x" * 100, b"z" * 10]


def test_failed_fsync_refuses_writes_and_never_retries(disk):
    """AT-07's last rule on its own: no second fsync after a failed one, not even in
    close(); the log refuses writes until reopened; reopening accepts them again."""
    fs = FaultyFS(disk / "root")
    path = str(disk / "root" / "t-0")
    log = open_log(fs, path)
    log.append(b"a")
    fs.inject("sync", 1)
    with pytest.raises(LogFailedError):
        log.append(b"b")
    fs.clear_faults()
    syncs = len(fs.sync_calls)
    for write in (lambda: log.append(b"c"), log.flush, log.roll,
                  lambda: log.delete_records(1), log.enforce_retention):
        with pytest.raises(LogFailedError):
            write()
    assert [r.value for r in log.read()][:1] == [b"a"]    # reads still work
    log.close()
    assert [p for p in fs.sync_calls[syncs:] if p.startswith(path)] == []
    with open_log(fs, path) as log:
        values = [r.value for r in log.read()]
        assert values[0] == b"a" and b"c" not in values
        assert log.append(b"d") == len(values)


def test_close_after_a_failed_fsync_releases_the_log(disk):
    """``with Log.open(...) as log:`` calls close() once: if its flush fails the log
    must still be released (as io.FileIO.close does), or a reopen in this process is
    not alone and skips recovery."""
    from kqlite.storage.fs import DEFAULT_FS
    from kqlite.storage.locking import FileLock
    fs = FaultyFS(disk / "root")
    path = str(disk / "root" / "t-0")
    log = open_log(fs, path, fsync="never")
    log.append(b"a")
    fs.inject("sync", 1)
    with pytest.raises(LogFailedError):
        log.close()                        # the final flush fails
    fs.clear_faults()
    with pytest.raises(LogClosedError):
        log.append(b"b")
    users = FileLock(DEFAULT_FS.open(os.path.join(path, ".kqlite-users")))
    try:
        assert users.try_lock(exclusive=True), "the failed log still holds .kqlite-users"
    finally:
        users.unlock()
        users.file.close()


def test_failed_log_does_not_mark_the_data_dir_clean(disk):
    root = disk / "root"
    fs = FaultyFS(root)
    path = str(root / "data" / "t-0")
    log = open_log(fs, path)
    log.append(b"a")
    fs.inject("sync", 1)
    with pytest.raises(LogFailedError):
        log.append(b"b")
    fs.clear_faults()
    log.close()
    assert not os.path.exists(root / "data" / ".kafka_cleanshutdown")


def test_scan_stops_at_the_end_of_a_short_file(tmp_path):
    """A segment walk asked to go past the end of a file that ends inside a batch used to
    re-read the same bytes forever (found by the loops through the stale-state bug)."""
    from kqlite.storage.fs import DEFAULT_FS
    from kqlite.storage.scan import SCAN_TRUNCATED, SegmentWalk
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(b"x" * 500)
        seg = os.path.join(log.path, "%020d.log" % 0)
    size = os.path.getsize(seg)
    os.truncate(seg, size - 100)
    f = DEFAULT_FS.open(seg)
    try:
        walk = SegmentWalk(f, 0, size + 1000)
        assert [b for c in walk.chunks() for b in c.batches] == []
        assert (walk.stop, walk.status) == (0, SCAN_TRUNCATED)
    finally:
        f.close()


@pytest.mark.parametrize("category, match, action", [
    ("write", ".kqlite-state", "append"),       # the shared state record after the write
    ("write", ".index", "append"),              # an index entry (index every batch)
    ("open", ".log", "roll"),                   # the new segment's file
    ("write", "log-start-offset-checkpoint.tmp", "delete_records"),
    ("remove", ".log", "enforce_retention"),    # deleting an expired segment
])
def test_io_error_outside_the_log_write_fails_the_log(disk, category, match, action):
    """Was BUG_OSERROR: these escaped as bare OSErrors and left memory and disk out of
    step. Now the log fails (like Kafka taking the log dir offline): LogFailedError,
    later writes refused, close releases the files, reopening recovers."""
    fs, path = new_disk(disk, "root")
    log = open_log(fs, path, index_interval_bytes=1, segment_bytes=200, retention_ms=1)
    for i in range(4):
        log.append(b"v%d" % i * 30, timestamp=1)
    calls = {"append": lambda: log.append(b"w" * 30, timestamp=1), "roll": log.roll,
             "delete_records": lambda: log.delete_records(log.end_offset - 1),
             "enforce_retention": lambda: log.enforce_retention(now_ms=10 ** 12)}
    fs.inject(category, 1, match=match)
    with pytest.raises(LogFailedError, match=f"{action} on log .* failed"):
        calls[action]()
    assert fs.fault_hit
    fs.clear_faults()
    with pytest.raises(LogFailedError):
        log.append(b"refused")
    log.close()
    with open_log(fs, path) as log:
        values = [r.value for r in log.read()]
        assert b"refused" not in values
        assert log.append(b"again") == log.end_offset - 1


def test_open_that_fails_raises_storage_error(disk):
    fs = FaultyFS(disk / "root")
    path = str(disk / "root" / "t-0")
    with open_log(fs, path) as log:
        log.append(b"a")
    fs.inject("open", 1)
    with pytest.raises(StorageError, match="cannot open the log at"):
        open_log(fs, path)
    fs.clear_faults()
    with open_log(fs, path) as log:
        assert [r.value for r in log.read()] == [b"a"]
    with pytest.raises(FileNotFoundError, match="no log at"):
        kqlite.Log.open(str(disk / "root" / "missing-0"), fs=fs, create=False)
