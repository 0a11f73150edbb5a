"""AT-02: simulated power loss at every fsync of a scripted workload (SQLite TH3 loop,
LevelDB fault_injection_test), through FaultyFS.

For k = 1, 2, ... the workload (workload.script: fsync="always" appends with rolls,
an explicit roll, delete_records, retention, close/reopen, then default-mode
appends acknowledged by flush()) runs until its k-th fsync (file or directory),
where the power goes. The disk is then damaged with several random seeds, each
with one of FaultyFS's modes (drop, keep, prefix, random), the log is reopened and
compared with the model: every record acknowledged as durable is there with
identical bytes, offsets are dense, nothing else but whole records of the
interrupted append appears (no garbage), the log start never moves back, and
recovery is idempotent and itself durable. The loop ends at the first k that the
workload completes without reaching (it then crashes after the final close).

The negative control runs the same loop on a disk whose fsyncs are no-ops and
must report lost acknowledged records.
"""

import os
import pathlib
import random
import shutil
import tempfile
import time

import pytest

import kqlite
from faultyfs import MODES, FaultyFS, PowerLoss
from kqlite.storage.data_dir import write_meta_properties
from kqlite.storage.fs import DEFAULT_FS
from workload import Runner, script, verify_reopen

SCRIPT_SEED = 7


def new_disk(tmp_path, name, layout, lying=False, atomic=False):
    root = str(tmp_path / name)
    os.makedirs(root)
    if layout == "datadir":      # a Kafka data dir: checkpoint files are written too
        data = os.path.join(root, "data")
        os.makedirs(data)
        write_meta_properties(DEFAULT_FS, data)
        path = os.path.join(data, "t-0")
    else:
        path = os.path.join(root, "t-0")
    return FaultyFS(root, lying=lying, atomic_sectors=atomic), path


def count_fsyncs(tmp_path, layout):
    fs, path = new_disk(tmp_path, "count-" + layout, layout)
    Runner(fs, path).run(script(SCRIPT_SEED))
    drop_disk(fs)
    return fs.counts["fsync"]


def drop_disk(fs):
    shutil.rmtree(fs.root)
    shutil.rmtree(fs.root + ".inodes", ignore_errors=True)


def crash_loop(tmp_path, layout, seeds, lying=False, stop_at_first=False, atomic=False):
    """Run the TH3 loop; returns (number of crash states checked, violations)."""
    total = count_fsyncs(tmp_path, layout)
    assert total > 30
    steps = script(SCRIPT_SEED)
    violations, states = [], 0
    for k in range(1, total + 2):
        for s in range(seeds):
            seed = k * 1000 + s
            rng = random.Random(seed)
            mode = MODES[(k + s) % len(MODES)]    # every mode at every other k
            fs, path = new_disk(tmp_path, "k%d-s%d" % (k, s), layout, lying, atomic)
            fs.crash_at = ("fsync", k)
            runner = Runner(fs, path, seed=0)
            try:
                runner.run(steps)
                assert k == total + 1, f"fsync #{k} never came"
            except PowerLoss:
                assert k <= total
            where = fs.crash_point
            fs.crash_at = None
            fs.crash(rng, mode)
            bad = verify_reopen(fs, path, runner.model, runner.config or steps[0][1])
            states += 1
            if bad:
                violations.append(f"crash at fsync #{k} ({where}), mode {mode}, seed {seed}: "
                                  + "; ".join(bad[:3]))
                if stop_at_first:
                    return states, violations
            drop_disk(fs)
    return states, violations


_results = {}


def loop_result(request, variant):
    """The TH3 loop for a variant, run once per session (several tests read it)."""
    if variant not in _results:
        soak = request.config.getoption("--soak")
        layout, atomic = {"bare": ("bare", False), "datadir": ("datadir", False),
                          "bare-atomic-sectors": ("bare", True)}[variant]
        base = pathlib.Path(tempfile.mkdtemp(
            prefix="kqlite-power-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
        try:
            _results[variant] = crash_loop(base, layout, seeds=(24 if soak else 4),
                                           atomic=atomic)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return _results[variant]


def split(violations):
    start = [v for v in violations if "log start" in v]
    return [v for v in violations if v not in start], start


@pytest.mark.parametrize("variant", ["bare", "datadir", "bare-atomic-sectors"])
def test_no_acknowledged_record_is_lost_at_any_fsync(request, variant):
    states, violations = loop_result(request, variant)
    lost, _ = split(violations)
    print(f"power loss, {variant}: {states} crash states checked")
    assert not lost, f"{len(lost)} of {states} crash states:\n" + "\n".join(lost[:20])


@pytest.mark.parametrize("variant", ["bare", "datadir", "bare-atomic-sectors"])
def test_log_start_never_moves_back(request, variant):
    states, violations = loop_result(request, variant)
    _, start = split(violations)
    assert not start, f"{len(start)} of {states} crash states:\n" + "\n".join(start[:10])


def test_negative_control_lying_fsync_loses_acknowledged_records(disk):
    """The same loop on a disk that ignores fsync must find lost records: proof that
    the harness can fail."""
    states, violations = crash_loop(disk, "bare", seeds=1, lying=True)
    lost = [v for v in violations if "LOST" in v]
    print(f"negative control: {len(lost)} of {states} crash states lost acknowledged "
          f"records ({len(violations)} with any violation)")
    assert len(lost) > states // 2, f"only {len(lost)} of {states} states detected loss"


# -- One test per bug the loop found (deterministic) ------------------------------------------

def fresh(disk, name="root"):
    fs = FaultyFS(disk / name)
    return fs, str(disk / name / "t-0")


def test_first_segment_of_a_new_log_survives_power_loss(disk):
    """Fixed: the new segment's directory entry was never fsynced (only the data), so
    the acknowledged records vanished with the file."""
    fs, path = fresh(disk)
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    log.append(b"acked")
    fs.crash(random.Random(0), "drop")      # the Log object dies with the machine
    with kqlite.Log.open(path, fs=fs) as log:
        assert [r.value for r in log.read()] == [b"acked"]


def test_log_reopened_after_a_clean_close_survives_power_loss(disk):
    """Fixed: opening rewrote the state as "not clean" without fsync, so after a power
    cut the old "clean" state came back, recovery was skipped and the records past its
    size were cut as "never acknowledged"."""
    fs, path = fresh(disk)
    with kqlite.Log.open(path, fs=fs, fsync="always") as log:
        log.append(b"one")
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    log.append([b"two", b"three"])
    fs.crash(random.Random(0), "drop")
    with kqlite.Log.open(path, fs=fs) as log:
        assert [r.value for r in log.read()] == [b"one", b"two", b"three"]
        assert log.recovery_reports == []


def test_new_data_dir_survives_power_loss(disk):
    """Fixed: Log.open creating the data dir fsynced the data dir but not its parent."""
    fs = FaultyFS(disk / "root")
    path = str(disk / "root" / "data" / "t-0")
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    log.append(b"acked")
    fs.crash(random.Random(0), "drop")      # the Log object dies with the machine
    with kqlite.Log.open(path, fs=fs) as log:
        assert [r.value for r in log.read()] == [b"acked"]


def test_torn_state_write_does_not_move_the_log_start_back(disk):
    fs, path = fresh(disk)
    log = kqlite.Log.open(path, fs=fs, fsync="always", segment_bytes=300)
    for i in range(8):
        log.append(b"r%d" % i + b"." * 20)
    assert 3 in log.segments                  # offsets 3-5 share a segment
    log.delete_records(4)                     # acknowledged: offsets 0-3 are gone
    log.append(b"after")                       # rewrites .kqlite-state, unsynced
    state = os.path.join(path, ".kqlite-state")
    assert fs.unsynced_writes(state)
    fs.crash(random.Random(0), "keep")
    with open(state, "r+b") as f:              # the sector holding it was torn
        f.write(b"\xa5" * 20)
    with kqlite.Log.open(path, fs=fs) as log:
        assert log.start_offset == 4


# -- AT-08 with power-loss damage: a crash at every fsync of a compaction ----------------------

COMPACT_CONFIG = {"segment_bytes": 500, "cleanup_policy": "compact",
                  "min_cleanable_dirty_ratio": 0.0, "delete_retention_ms": 86_400_000,
                  "index_interval_bytes": 150}


def build_compacted_log(fs, path):
    """A keyed log with superseded values and tombstones over several segments, closed
    (durable). Returns {offset: (key, value)} of everything appended."""
    rnd = random.Random(5)
    history = {}
    with kqlite.Log.open(path, fs=fs, **COMPACT_CONFIG) as log:
        for i in range(40):
            records = [kqlite.Record(key=b"k%d" % rnd.randrange(6),
                                     value=None if rnd.random() < 0.1 else b"v%d." % i + b"x" * 30,
                                     timestamp=1_700_000_000_000 + i)
                       for _ in range(rnd.randint(1, 3))]
            first = log.append(records)
            for j, r in enumerate(records):
                history[first + j] = (r.key, r.value)
        log.roll()
        log.append(kqlite.Record(key=b"k0", value=b"active", timestamp=1_700_000_000_100))
        history[log.end_offset - 1] = (b"k0", b"active")
    return history


def latest(pairs):
    view = {}
    for key, value in pairs:
        if value is None:
            view.pop(key, None)
        else:
            view[key] = value
    return view


def check_compacted(fs, path, history, start, end):
    with kqlite.Log.open(path, fs=fs, **COMPACT_CONFIG) as log:
        records = list(log.read())
        bad = []
        if (log.start_offset, log.end_offset) != (start, end):
            bad.append(f"start/end {(log.start_offset, log.end_offset)} != {(start, end)}")
        offsets = [r.offset for r in records]
        if offsets != sorted(set(offsets)):
            bad.append("offsets repeat or go back")
        for r in records:
            if history.get(r.offset) != (r.key, r.value):
                bad.append(f"offset {r.offset}: {(r.key, r.value)!r} was never appended there")
                break
        if latest((r.key, r.value) for r in records) != latest(history[o] for o in sorted(history)):
            bad.append("the key -> latest value map changed")
    left = [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    if left:
        bad.append(f"leftovers {left}")
    return bad


def test_power_loss_at_every_fsync_of_a_compaction(disk, soak):
    seeds = 12 if soak else 4
    fs, path = fresh(disk, "count")
    history = build_compacted_log(fs, path)
    with kqlite.Log.open(path, fs=fs, **COMPACT_CONFIG) as log:
        start, end = log.start_offset, log.end_offset
        before = fs.counts["fsync"]
        report = log.compact(now_ms=1_700_000_000_000 + 2 * 86_400_000, force=True)
        total = fs.counts["fsync"] - before
    assert report.segments_cleaned >= 2 and total >= 6
    violations, states = [], 0
    for k in range(1, total + 1):
        for s in range(seeds):
            fs, path = fresh(disk, "k%d-s%d" % (k, s))
            build_compacted_log(fs, path)
            log = kqlite.Log.open(path, fs=fs, **COMPACT_CONFIG)
            fs.crash_at = ("fsync", fs.counts["fsync"] + k)
            with pytest.raises(PowerLoss):
                log.compact(now_ms=1_700_000_000_000 + 2 * 86_400_000, force=True)
            where, mode = fs.crash_point, MODES[(k + s) % len(MODES)]
            fs.crash_at = None
            fs.crash(random.Random(k * 100 + s), mode)
            bad = check_compacted(fs, path, history, start, end)
            if not bad:     # a later compaction finishes the job, and survives a power cut
                with kqlite.Log.open(path, fs=fs, **COMPACT_CONFIG) as log:
                    log.compact(now_ms=1_700_000_000_000 + 2 * 86_400_000, force=True)
                fs.crash(random.Random(1), "drop")
                bad = check_compacted(fs, path, history, start, end)
            states += 1
            if bad:
                violations.append(f"crash at compaction fsync #{k} ({where}), {mode}: {bad}")
            drop_disk(fs)
    print(f"compaction power loss: {total} fsyncs, {states} crash states checked")
    assert not violations, f"{len(violations)} of {states}:\n" + "\n".join(violations[:10])


# -- The other flush modes: what a power cut may take ------------------------------------------

def surviving(fs, path):
    fs.crash(random.Random(3), "drop")
    with kqlite.Log.open(path, fs=fs) as log:
        values = [r.value for r in log.read()]
    assert values == [b"%d" % i for i in range(len(values))]      # a prefix, intact
    return len(values)


def test_default_mode_keeps_what_flush_covered(disk):
    """fsync="never": a power cut keeps everything up to the last flush() (or close()),
    and may take all the rest; a segment roll does not fsync."""
    fs, path = fresh(disk)
    log = kqlite.Log.open(path, fs=fs, segment_bytes=300)
    for i in range(10):
        log.append(b"%d" % i)
    log.flush()
    for i in range(10, 40):                  # several rolls, no flush
        log.append(b"%d" % i)
    assert len(log.segments) > 2
    assert surviving(fs, path) == 10         # "drop" is the worst case: exactly the flushed


@pytest.mark.parametrize("m", [1, 4, 7])
def test_flush_messages_loses_at_most_m_minus_1(disk, m):
    fs, path = fresh(disk)
    log = kqlite.Log.open(path, fs=fs, flush_messages=m, segment_bytes=300)
    for i in range(30):
        log.append(b"%d" % i)
    assert surviving(fs, path) >= 30 - (m - 1)


def test_flush_ms_loses_only_the_last_interval(disk):
    fs, path = fresh(disk)
    log = kqlite.Log.open(path, fs=fs, flush_ms=20)
    for i in range(5):
        log.append(b"%d" % i)
    deadline = time.monotonic() + 5
    while log.recovery_point < 5 and time.monotonic() < deadline:
        time.sleep(0.005)                     # the background flusher gets to it
    assert log.recovery_point == 5
    log._flush_if_due = lambda now: None      # freeze the flusher: the machine dies now
    assert surviving(fs, path) == 5
