"""Log compaction (cleaner.py): the last record per key survives, offsets never move,
and a crash at any step of the .cleaned -> .swap -> .deleted protocol loses nothing.

(a) a Hypothesis state machine against a dict model (appends of keys from a small set,
    values and tombstones, rolls, clock ticks, compactions, reopens);
(b) a crash injected at every rename/fsync/remove of a compaction, both as an exception
    and as a real process death (os._exit in a forked child), then a fresh open
    (Kafka's testRecoveryAfterCrashDuringSplitPhase1..5 shape, AT-08);
(c) keys required on compacted logs, ratio and lag thresholds, the delete horizon,
    compact,delete, holes seen by every read path, other Log instances.
"""

import os
import shutil

import pytest
from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule,
    run_state_machine_as_test,
)

import kqlite
from kqlite import Record
from kqlite.errors import InvalidRecordError, LogFailedError
from kqlite.format.batch import build_batch, decode_batch, parse_header
from kqlite.format.constants import DELETE_HORIZON_MASK
from kqlite.storage import cleaner, swap
from kqlite.storage.data_dir import CLEANER_OFFSET_FILE
from kqlite.storage.fs import OsFile, OsFileSystem
from kqlite.storage.locking import FileLock
from kqlite.storage.verify import find_segments, verify_segment

from dead_handle import abandon

DAY = 86_400_000
T0 = 1_700_000_000_000


def rec(key, value, ts=T0, headers=()):
    return Record(key=key, value=value, timestamp=ts, headers=headers)


def open_log(path, fs=None, **config):
    options = {"segment_bytes": 400, "cleanup_policy": "compact",
               "min_cleanable_dirty_ratio": 0.0}
    options.update(config)
    return kqlite.Log.open(path, fs=fs, **options)


def latest(records):
    """Last-wins key -> value over records read in offset order; tombstones delete."""
    view = {}
    for r in records:
        if r.value is None:
            view.pop(r.key, None)
        else:
            view[r.key] = r.value
    return view


def check_log(log, history, model):
    """Offsets rise strictly; every record is the one appended at its offset; the latest
    value of every key equals the model."""
    records = list(log.read())
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    for r in records:
        assert r == history[r.offset]
    assert latest(records) == model
    return records


def leftovers(path):
    return [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap", ".deleted"))]


def verify_clean(path):
    for seg in find_segments(OsFileSystem(), path):
        assert verify_segment(OsFileSystem(), seg).problems == []


# -- (a) property test against a dict model ----------------------------------------------------

class CompactionMachine(RuleBasedStateMachine):
    base_dir = None
    counter = None

    @initialize(lag=st.sampled_from([0, 0, 500]), ratio=st.sampled_from([0.0, 0.5]),
                codec=st.sampled_from([None, "gzip"]))
    def open(self, lag, ratio, codec):
        self.path = os.path.join(self.base_dir, "m%d" % next(self.counter), "t-0")
        self.config = {"segment_bytes": 500, "min_compaction_lag_ms": lag,
                       "min_cleanable_dirty_ratio": ratio, "delete_retention_ms": 1000,
                       "index_interval_bytes": 100}
        self.codec = codec
        self.log = open_log(self.path, **self.config)
        self.clock = T0
        self.history = {}     # offset -> Record as read back
        self.model = {}       # key -> latest value (tombstoned keys absent)

    def teardown(self):
        self.log.close()

    @rule(items=st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.binary(max_size=20))),
                         min_size=1, max_size=6))
    def append(self, items):
        records = [rec(b"k%d" % k, v, self.clock, [("n", b"%d" % k)]) for k, v in items]
        first = self.log.append(records, codec=self.codec)
        for i, r in enumerate(records):
            self.history[first + i] = r._replace(offset=first + i)
            if r.value is None:
                self.model.pop(r.key, None)
            else:
                self.model[r.key] = r.value

    @rule(ms=st.integers(1, 1500))
    def tick(self, ms):
        self.clock += ms

    @rule()
    def roll(self):
        self.log.roll()

    @rule(force=st.booleans())
    def compact(self, force):
        active = self.log.segments[-1]
        before = [r for r in self.log.read() if r.offset >= active]
        start, end = self.log.start_offset, self.log.end_offset
        report = self.log.compact(now_ms=self.clock, force=force)
        event("compaction rewrote segments" if report.segments_cleaned else "compaction no-op")
        if report.tombstones_removed:
            event("compaction removed tombstones")
        assert report.bytes_after <= report.bytes_before + 61 * report.segments_cleaned
        assert (self.log.start_offset, self.log.end_offset) == (start, end)
        assert [r for r in self.log.read() if r.offset >= active] == before

    @precondition(lambda self: self.history)
    @rule()
    def clean_everything(self):
        """Roll, then clean twice past the delete horizon: every key once, no tombstones."""
        self.log.roll()
        now = self.clock + self.config["min_compaction_lag_ms"] + 1
        self.log.compact(now_ms=now, force=True)
        self.log.compact(now_ms=now + 1000, force=True)
        records = list(self.log.read())
        assert all(r.value is not None for r in records)
        assert sorted(r.key for r in records) == sorted(self.model)

    @rule(crash=st.booleans())
    def reopen(self, crash):
        if crash:
            abandon(self.log)      # as if killed: the next open runs crash recovery
        else:
            self.log.close()
        self.log = open_log(self.path, **self.config)

    @invariant()
    def matches_model(self):
        check_log(self.log, self.history, self.model)
        assert self.log.end_offset == len(self.history) and self.log.start_offset == 0
        assert not leftovers(self.path)


def test_compaction_against_a_dict_model(tmp_path):
    import itertools
    CompactionMachine.base_dir = str(tmp_path)
    CompactionMachine.counter = itertools.count()
    run_state_machine_as_test(CompactionMachine, settings=settings(
        max_examples=30, stateful_step_count=30, deadline=None,
        suppress_health_check=list(HealthCheck)))


# -- (b) a crash at every step of the swap -----------------------------------------------------

class Crash(BaseException):
    """Stands for the process dying (not an Exception, so nothing catches it)."""


class CrashFile(OsFile):
    __slots__ = ("fs",)

    def sync(self):
        self.fs.step("fsync " + os.path.basename(self.path))
        super().sync()


class CrashFS(OsFileSystem):
    """Counts rename, fsync (files and directories) and remove once armed; at operation
    number ``crash_at`` it crashes (raises Crash, or kills the process), and after a
    crash every operation crashes."""

    def __init__(self, crash_at=None, kill=False):
        self.crash_at, self.kill = crash_at, kill
        self.armed, self.dead = False, False
        self.ops = []

    def step(self, what):
        if self.dead:
            raise Crash(what)
        if not self.armed:
            return
        self.ops.append(what)
        if len(self.ops) == self.crash_at:
            if self.kill:
                os._exit(17)
            self.dead = True
            raise Crash(what)

    def open(self, path, create=False):
        if self.dead:
            raise Crash("open")
        f = super().open(path, create)
        wrapped = CrashFile(f.path, f._fd)
        wrapped.fs = self
        return wrapped

    def rename(self, src, dst):
        self.step(f"rename {os.path.basename(src)} -> {os.path.basename(dst)}")
        super().rename(src, dst)

    def remove(self, path):
        self.step("remove " + os.path.basename(path))
        super().remove(path)

    def fsync_dir(self, path):
        self.step("fsync dir")
        super().fsync_dir(path)


CRASH_CONFIG = {"segment_bytes": 700, "delete_retention_ms": DAY, "index_interval_bytes": 200}


def build_crash_log(path):
    """A log whose next compaction (at T0 + 2 days) removes superseded records and expired
    tombstones, keeps a fresh tombstone, and merges segments."""
    history, model = {}, {}

    def put(log, items, ts):
        records = [rec(b"k%d" % k, v, ts) for k, v in items]
        first = log.append(records)
        for i, r in enumerate(records):
            history[first + i] = r._replace(offset=first + i)
            if r.value is None:
                model.pop(r.key, None)
            else:
                model[r.key] = r.value

    with open_log(path, **CRASH_CONFIG) as log:
        for i in range(16):
            put(log, [(i % 7, b"a%d" % i), (i % 3, None if i % 5 == 0 else b"b%d" % i)], T0 + i)
        log.roll()
        log.compact(now_ms=T0 + 100)             # tombstones get a horizon of T0 + 100 + 1 day
        for i in range(14):
            put(log, [(i % 4, b"c%d" % i), (6, None if i == 9 else b"d%d" % i)], T0 + 200 + i)
        log.roll()
        put(log, [(1, b"active")], T0 + 300)
        start, end = log.start_offset, log.end_offset
    return history, model, start, end


def check_after_crash(path, history, model, start, end):
    with open_log(path, **CRASH_CONFIG) as log:
        assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
        assert (log.start_offset, log.end_offset) == (start, end)
        check_log(log, history, model)
        log.compact(now_ms=T0 + 2 * DAY)          # a later compaction finishes the job
        records = check_log(log, history, model)
        assert (log.start_offset, log.end_offset) == (start, end)
    assert not leftovers(path)
    verify_clean(path)
    return records


@pytest.fixture(scope="module")
def crash_template(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("template") / "data" / "t-0")
    history, model, start, end = build_crash_log(path)
    fs = CrashFS()
    shutil.copytree(os.path.dirname(path), os.path.dirname(path) + "-count")
    counted = os.path.join(os.path.dirname(path) + "-count", "t-0")
    with open_log(counted, fs=fs, **CRASH_CONFIG) as log:
        fs.armed = True
        report = log.compact(now_ms=T0 + 2 * DAY)
        fs.armed = False
        expected = check_log(log, history, model)
    assert report.segments_cleaned >= 2 and report.tombstones_removed >= 1
    return path, history, model, start, end, list(fs.ops), expected


@pytest.mark.parametrize("kill", [False, True], ids=["exception", "process-death"])
def test_crash_at_every_step_of_compaction(tmp_path, crash_template, kill):
    template, history, model, start, end, ops, expected = crash_template
    assert any(op.startswith("rename") and op.endswith(".log.swap") for op in ops)
    assert any(op.endswith(".log.deleted") for op in ops)
    for k in range(1, len(ops) + 1):
        data = str(tmp_path / ("run%d" % k))
        shutil.copytree(os.path.dirname(template), data)
        path = os.path.join(data, "t-0")
        fs = CrashFS(crash_at=k, kill=kill)
        if kill:
            pid = os.fork()
            if pid == 0:     # the child compacts and dies at operation k
                try:
                    log = open_log(path, fs=fs, **CRASH_CONFIG)
                    fs.armed = True
                    log.compact(now_ms=T0 + 2 * DAY)
                finally:
                    os._exit(3)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 17, f"step {k} ({ops[k - 1]}) was not reached"
        else:
            log = open_log(path, fs=fs, **CRASH_CONFIG)
            fs.armed = True
            with pytest.raises(Crash):
                log.compact(now_ms=T0 + 2 * DAY)
            assert fs.ops[-1] == ops[k - 1]
            abandon(log)
        records = check_after_crash(path, history, model, start, end)
        assert records == expected, f"crash at step {k}: {ops[k - 1]}"
        shutil.rmtree(data)


def test_failed_swap_fails_the_log_until_reopened(tmp_path, crash_template):
    template, history, model, start, end, ops, _ = crash_template
    step = next(i for i, op in enumerate(ops, 1) if op.endswith(".log.deleted"))

    class FailingFS(CrashFS):
        def step(self, what):
            if self.armed and len(self.ops) + 1 == step:
                self.ops.append(what)
                raise OSError(5, "injected EIO")
            super().step(what)

    data = str(tmp_path / "data")
    shutil.copytree(os.path.dirname(template), data)
    path = os.path.join(data, "t-0")
    fs = FailingFS()
    log = open_log(path, fs=fs, **CRASH_CONFIG)
    fs.armed = True
    with pytest.raises(LogFailedError):
        log.compact(now_ms=T0 + 2 * DAY)
    fs.armed = False
    check_log(log, history, model)            # reads still work from the open files
    with pytest.raises(LogFailedError):
        log.append(rec(b"k1", b"x"))
    log.close()
    check_after_crash(path, history, model, start, end)


def test_unreadable_swap_is_discarded_while_the_original_is_intact(tmp_path):
    path = str(tmp_path / "t-0")
    with open_log(path) as log:
        log.append([rec(b"k%d" % (i % 3), b"v%d" % i) for i in range(20)])
        log.roll()
        log.append(rec(b"k0", b"last"))
        expected = list(log.read())
    with open(os.path.join(path, "%020d.log.swap" % 0), "wb") as f:
        f.write(b"\x00" * 30 + b"garbage")
    with open(os.path.join(path, "%020d.index.swap" % 5), "wb") as f:
        f.write(b"orphan")
    with open_log(path) as log:
        assert list(log.read()) == expected
    assert not leftovers(path) and not [n for n in os.listdir(path) if n.endswith(".swap")]


# -- (c) behaviour ---------------------------------------------------------------------------------

def test_keyless_records_are_rejected_on_compacted_logs(tmp_path):
    with open_log(tmp_path / "c-0") as log:
        for bad in (b"value", [None], [rec(b"k", b"v"), b"no key"], rec(None, b"v")):
            with pytest.raises(InvalidRecordError, match="key"):
                log.append(bad)
        with pytest.raises(InvalidRecordError, match="key"):
            log.append_batches(build_batch([rec(b"k", b"v"), rec(None, b"v")]))
        assert log.end_offset == 0
        log.append(rec(b"k", None))                        # a keyed tombstone is fine
        log.append_batches(build_batch([rec(b"k", b"v")], codec="gzip"))
        assert log.end_offset == 2
    for policy in ("compact,delete", "delete,compact"):
        with open_log(tmp_path / ("p%d-0" % len(policy)), cleanup_policy=policy) as log:
            with pytest.raises(InvalidRecordError):
                log.append(b"value")
    with kqlite.Log.open(tmp_path / "d-0") as log:
        log.append(b"keyless is fine with cleanup.policy=delete")
        assert log.compact() == cleaner.CompactionReport(0, 0, 0, 0, 0)


def fill_keys(log, rounds, keys=4, ts=T0):
    for r in range(rounds):
        log.append([rec(b"k%d" % k, b"r%d-%d" % (r, k), ts) for k in range(keys)])


def test_dirty_ratio_threshold_and_cleaner_checkpoint(tmp_path):
    path = str(tmp_path / "data" / "t-0")
    with open_log(path, min_cleanable_dirty_ratio=0.5) as log:
        fill_keys(log, 30)
        log.roll()
        first = log.compact(now_ms=T0)                 # everything is dirty: ratio 1
        assert first.segments_cleaned > 1 and first.records_removed == 30 * 4 - 4
        checkpoint = open(os.path.join(str(tmp_path / "data"), CLEANER_OFFSET_FILE)).read()
        assert checkpoint.split("\n")[2] == "t 0 %d" % log.segments[-1]
        fill_keys(log, 1)                              # a little dirt, not enough
        log.roll()
        size = log.size
        assert log.compact(now_ms=T0) == (0, 0, 0, 0, 0) and log.size == size
        forced = log.compact(now_ms=T0, force=True)
        assert forced.records_removed == 4 and log.size < size
        assert len(list(log.read())) == 4


def test_ratio_uses_the_in_memory_checkpoint_without_a_data_dir(tmp_path):
    with open_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.5) as log:
        fill_keys(log, 30)
        log.roll()
        assert log.compact(now_ms=T0).records_removed > 0
        fill_keys(log, 1)
        log.roll()
        assert log.compact(now_ms=T0).segments_cleaned == 0


def test_min_compaction_lag_keeps_young_records(tmp_path):
    with open_log(tmp_path / "t-0", min_compaction_lag_ms=10_000) as log:
        fill_keys(log, 10, ts=T0)
        log.roll()
        old_end = log.end_offset
        fill_keys(log, 10, ts=T0 + 60_000)
        log.roll()
        log.compact(now_ms=T0 + 65_000)        # the second half is only 5 s old
        records = list(log.read())
        young = [r for r in records if r.offset >= old_end]
        assert len(young) == 40                 # untouched
        assert len([r for r in records if r.offset < old_end]) == 4
        log.compact(now_ms=T0 + 80_000)         # now old enough: only the latest stay
        assert len(list(log.read())) == 4


def test_tombstone_gets_a_delete_horizon_then_goes(tmp_path):
    with open_log(tmp_path / "t-0", delete_retention_ms=1000) as log:
        log.append([rec(b"a", b"1", T0), rec(b"b", b"1", T0 + 1)])
        log.append([rec(b"a", None, T0 + 5), rec(b"b", b"2", T0 + 6)])
        log.roll()
        log.append(rec(b"c", b"active", T0 + 7))
        report = log.compact(now_ms=T0 + 100)
        assert (report.records_removed, report.tombstones_removed) == (2, 0)
        records = list(log.read())
        assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
            (2, b"a", None, T0 + 5), (3, b"b", b"2", T0 + 6), (4, b"c", b"active", T0 + 7)]
        raw = log.read_batches(0)
        header = parse_header(raw)
        assert header.attributes & DELETE_HORIZON_MASK
        assert header.base_timestamp == T0 + 100 + 1000          # the delete horizon
        assert (header.base_offset, header.last_offset) == (2, 3)
        assert log.compact(now_ms=T0 + 1099, force=True).tombstones_removed == 0
        assert [r.offset for r in log.read()] == [2, 3, 4]
        report = log.compact(now_ms=T0 + 1100, force=True)
        assert (report.records_removed, report.tombstones_removed) == (1, 1)
        assert [(r.offset, r.key) for r in log.read()] == [(3, b"b"), (4, b"c")]
    verify_clean(str(tmp_path / "t-0"))


def test_compact_delete_applies_both(tmp_path):
    with open_log(tmp_path / "t-0", cleanup_policy="compact,delete", retention_ms=10_000,
                  segment_bytes=300) as log:
        fill_keys(log, 6, ts=T0)
        log.roll()
        boundary = log.end_offset
        fill_keys(log, 6, ts=T0 + 50_000)
        log.roll()
        log.append(rec(b"k0", b"active", T0 + 50_000))
        deleted = log.enforce_retention(now_ms=T0 + 30_000)      # the old half expired
        assert deleted and log.start_offset >= boundary - 4
        report = log.compact(now_ms=T0 + 30_000)
        assert report.records_removed > 0
        assert latest(log.read()) == {b"k0": b"active", **{b"k%d" % k: b"r5-%d" % k
                                                           for k in range(1, 4)}}
    with open_log(tmp_path / "c-0", retention_ms=1, segment_bytes=300) as log:
        fill_keys(log, 6, ts=T0)
        log.roll()
        assert log.enforce_retention(now_ms=T0 + DAY) == []      # compact only: no retention


def test_reads_skip_the_holes(tmp_path):
    path = str(tmp_path / "t-0")
    with open_log(path, index_interval_bytes=1) as log:
        for i in range(60):
            log.append(rec(b"k%d" % (i % 6), b"v%d" % i, T0 + i))
        log.roll()
        log.append(rec(b"z", b"active", T0 + 100))
        history = {r.offset: r for r in log.read()}
        log.compact(now_ms=T0 + 1000)
        kept = [r.offset for r in log.read()]
        assert kept == list(range(54, 61))
        for offset in range(0, 61):                        # any offset, hole or not
            first = next(iter(log.read(offset)))
            assert first.offset == min(o for o in kept if o >= offset)
            assert first == history[first.offset]
            batch = decode_batch(log.read_batches(offset, max_bytes=1))
            assert batch[0].last_offset >= offset
        assert log.offset_for_time(T0) == 54
        assert log.offset_for_time(T0 + 57) == 57
        assert log.offset_for_time(T0 + 100) == 60
        assert log.start_offset == 0 and log.end_offset == 61
    with open_log(path) as log:                            # and after a reopen
        assert [r.offset for r in log.read()] == kept
    verify_clean(path)


def test_batches_keep_producer_fields_codec_and_timestamps(tmp_path):
    with open_log(tmp_path / "t-0") as log:
        data = build_batch([rec(b"a", b"1", T0), rec(b"b", b"1", T0 + 3), rec(b"a", b"2", T0 + 9)],
                           codec="gzip", producer_id=77, producer_epoch=3, base_sequence=40,
                           partition_leader_epoch=5)
        log.append_batches(data)
        log.roll()
        log.append(rec(b"c", b"x"))
        log.compact(now_ms=T0 + 100)
        header, records = decode_batch(log.read_batches(0))
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 40)
        assert (header.partition_leader_epoch, header.compression) == (5, 1)
        assert (header.base_offset, header.last_offset, header.records_count) == (0, 2, 2)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
            (1, b"b", b"1", T0 + 3), (2, b"a", b"2", T0 + 9)]
        assert header.max_timestamp == T0 + 9


def test_active_segment_is_never_touched(tmp_path):
    with open_log(tmp_path / "t-0", segment_bytes=10 ** 6) as log:
        fill_keys(log, 20)
        size = log.size
        assert log.compact(now_ms=T0 + DAY, force=True) == (0, 0, 0, 0, 0)
        assert log.size == size and len(list(log.read())) == 80


def test_other_instances_see_the_compacted_log(tmp_path):
    path = str(tmp_path / "t-0")
    reader = open_log(path)
    with open_log(path) as writer:
        fill_keys(writer, 20)
        assert len(list(reader.read())) == 80
        writer.roll()
        writer.append(rec(b"k0", b"new"))
        writer.compact(now_ms=T0)
        expected = list(writer.read())
        assert len(expected) == 5
        assert list(reader.read()) == expected          # segment files replaced under it
        reader.append(rec(b"k1", b"from the reader"))
        assert latest(writer.read())[b"k1"] == b"from the reader"
    reader.close()


def test_a_log_changed_during_compaction_is_left_alone(tmp_path, monkeypatch):
    path = str(tmp_path / "t-0")
    with open_log(path) as log:
        fill_keys(log, 20)
        log.roll()
        fill_keys(log, 5)
        log.roll()
        log.append(rec(b"k0", b"active"))
        other = open_log(path)
        real = cleaner._clean_group

        def truncate_meanwhile(*args):
            out = real(*args)
            if other.end_offset > 50:
                other.truncate_to(50)                  # replication cuts the dirty tail
            return out

        monkeypatch.setattr(cleaner, "_clean_group", truncate_meanwhile)
        before = list(log.read())
        assert log.compact(now_ms=T0) == (0, 0, 0, 0, 0)
        assert log.end_offset == 48                    # whole batches are cut
        before = before[:48]
        assert list(log.read()) == before and not leftovers(path)
        other.close()
        monkeypatch.undo()
        assert log.compact(now_ms=T0).records_removed > 0
        assert latest(log.read()) == latest(before)


def test_stale_cleaned_files_wait_for_a_running_compaction(tmp_path):
    path = str(tmp_path / "t-0")
    with open_log(path) as log:
        log.append(rec(b"k", b"v"))
    stale = os.path.join(path, "%020d.log.cleaned" % 0)
    open(stale, "wb").close()
    fs = OsFileSystem()
    lock = FileLock(fs.open(os.path.join(path, swap.CLEANER_LOCK_FILE), create=True))
    assert lock.try_lock(True)
    swap.remove_stale_cleaned(fs, path)
    assert os.path.exists(stale)                       # a compaction may be writing it
    lock.unlock()
    lock.file.close()
    with open_log(path):
        pass
    assert not os.path.exists(stale)


def test_index_of_a_cleaned_segment_equals_a_rebuilt_one(tmp_path):
    path = str(tmp_path / "t-0")
    with open_log(path, index_interval_bytes=50, segment_bytes=4000) as log:
        for i in range(100):
            log.append(rec(b"k%d" % (i % 13), b"v" * (i % 17), T0 + (i * 7919) % 1000))
        log.roll()
        log.append(rec(b"k1", b"x"))
        log.compact(now_ms=T0 + 10_000)
        answers = [log.offset_for_time(t) for t in range(T0 - 1, T0 + 1001, 37)]
    names = [n for n in os.listdir(path) if n.endswith((".index", ".timeindex"))]
    originals = {n: open(os.path.join(path, n), "rb").read() for n in names}
    for n in names:
        os.remove(os.path.join(path, n))
    with open_log(path, index_interval_bytes=50, segment_bytes=4000) as log:
        assert [log.offset_for_time(t) for t in range(T0 - 1, T0 + 1001, 37)] == answers
    for n in names:
        assert open(os.path.join(path, n), "rb").read() == originals[n], n


def test_reports_and_info_lines(tmp_path, caplog):
    with open_log(tmp_path / "t-0") as log:
        fill_keys(log, 10)
        log.roll()
        log.append(rec(b"k0", b"x"))
        with caplog.at_level("INFO", logger="kqlite.storage"):
            report = log.compact(now_ms=T0)
    assert report.records_removed == 36 and report.tombstones_removed == 0
    assert report.bytes_after < report.bytes_before
    lines = [r.getMessage() for r in caplog.records if "compacted" in r.getMessage()]
    assert len(lines) == report.segments_cleaned or len(lines) >= 1
    assert sum(int(line.split(" records removed")[0].rsplit(" ", 1)[1]) for line in lines) == 36


def test_log_end_survives_when_the_last_batch_empties(tmp_path):
    """The last batch before the active segment loses all its records (expired
    tombstones); it stays as an empty batch, so a crash-recovery open that drops an
    empty active segment cannot move the log end back and reuse offsets."""
    path = str(tmp_path / "t-0")
    log = open_log(path, delete_retention_ms=10)
    log.append([rec(b"a", b"1"), rec(b"b", b"1")])
    log.append([rec(b"a", None), rec(b"b", None)])
    log.roll()
    log.compact(now_ms=T0)
    report = log.compact(now_ms=T0 + 10)
    assert report.records_removed == 2 and report.tombstones_removed == 2
    assert list(log.read()) == [] and log.end_offset == 4
    abandon(log)
    with open_log(path) as log:
        assert (log.start_offset, log.end_offset) == (0, 4)
        assert log.append(rec(b"c", b"1")) == 4
    raw = open(os.path.join(path, "%020d.log" % 0), "rb").read()
    header = parse_header(raw)
    assert (len(raw), header.base_offset, header.last_offset, header.records_count) == \
        (61, 2, 3, 0)


def test_reads_skip_empty_segments_and_gaps_between_segments(tmp_path):
    """Kafka's cleaner can leave an empty segment, or a segment ending well before the
    next one's base offset; every read path must step over both."""
    path = str(tmp_path / "t-0")
    with open_log(path, segment_bytes=10 ** 6) as log:
        for base in (0, 10, 20, 30, 40):
            log.append([rec(b"k%d" % i, b"v%d" % (base + i), T0 + base + i) for i in range(10)])
            log.roll()
        log.append(rec(b"z", b"active", T0 + 99))
    for base, content in ((10, b""), (30, b""), (20, build_batch(
            [rec(b"k%d" % i, b"v%d" % (20 + i), T0 + 20 + i) for i in range(5)], base_offset=20))):
        for suffix in (".index", ".timeindex"):
            os.remove(os.path.join(path, "%020d%s" % (base, suffix)))
        with open(os.path.join(path, "%020d.log" % base), "wb") as f:
            f.write(content)                   # 10 and 30: empty; 20: only offsets 20..24
    kept = list(range(10)) + list(range(20, 25)) + list(range(40, 51))
    with open_log(path, segment_bytes=10 ** 6) as log:
        assert [r.offset for r in log.read()] == kept
        for offset in range(51):
            assert next(iter(log.read(offset))).offset == min(o for o in kept if o >= offset)
            assert decode_batch(log.read_batches(offset, 1))[0].last_offset >= offset
        assert log.offset_for_time(T0 + 10) == 20
        assert log.offset_for_time(T0 + 25) == 40
        log.compact(now_ms=T0 + 1000)
        assert [r.offset for r in log.read()] == list(range(40, 51))
        assert log.end_offset == 51


def test_keyless_records_from_before_the_policy_change_are_dropped(tmp_path, caplog):
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path, segment_bytes=400) as log:        # cleanup.policy=delete
        log.append([b"keyless", rec(b"k", b"1"), rec(None, b"also keyless")])
        log.roll()
        log.append(rec(b"k", b"2"))
        log.roll()
        log.append(rec(b"z", b"active"))
    with caplog.at_level("INFO", logger="kqlite.storage"):
        with open_log(path) as log:
            report = log.compact(now_ms=T0)
            assert [(r.key, r.value) for r in log.read()] == [(b"k", b"2"), (b"z", b"active")]
    assert report.records_removed == 3
    assert "dropped 2 records without a key" in caplog.text


def test_legacy_entries_are_kept_whole_or_dropped_whole(tmp_path):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    def legacy(offset, key, value):
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
        builder.append(offset, timestamp=T0 + offset, key=key, value=value)
        return bytes(builder.build())

    path = str(tmp_path / "t-0")
    os.makedirs(path)
    with open(os.path.join(path, "%020d.log" % 0), "wb") as f:
        f.write(legacy(0, b"a", b"old") + legacy(1, b"b", b"old") + legacy(2, b"a", b"new")
                + legacy(3, b"c", None))
    with open_log(path) as log:
        log.append(rec(b"b", b"v2"))
        log.roll()
        log.append(rec(b"z", b"active"))
        report = log.compact(now_ms=T0 + 10 * DAY)
        assert report.records_removed == 2
        assert [(r.offset, r.key, r.value) for r in log.read()] == [
            (2, b"a", b"new"), (3, b"c", None), (4, b"b", b"v2"), (5, b"z", b"active")]
    verify_clean(path)


def test_cleaned_batches_read_by_kafka_python(tmp_path):
    """An independent reader (kafka-python) accepts rebuilt, horizon-stamped and empty
    batches: CRCs, offsets and timestamps as kqlite reads them."""
    from kafka.record.memory_records import MemoryRecords

    with open_log(tmp_path / "t-0", delete_retention_ms=1000) as log:
        log.append([rec(b"a", b"1", T0), rec(b"b", None, T0 + 3), rec(b"a", b"2", T0 + 9)],
                   codec="gzip")
        log.append([rec(b"c", b"1", T0), rec(b"d", None, T0 + 3)])
        log.append([rec(b"c", b"2", T0 + 4), rec(b"d", b"back", T0 + 5)])
        log.append([rec(b"e", None, T0 + 6)])
        log.roll()
        log.append(rec(b"z", b"active"))
        log.compact(now_ms=T0 + 50)
        log.compact(now_ms=T0 + 2000, force=True)     # e's tombstone goes: an empty batch
        expected = [(r.offset, r.timestamp, r.key, r.value) for r in log.read()]
        seen, batches, offset = [], 0, 0
        while offset < log.end_offset:
            records = MemoryRecords(log.read_batches(offset, 1 << 20))
            while True:
                batch = records.next_batch()
                if batch is None:
                    break
                assert batch.validate_crc()
                batches += 1
                seen += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
                offset = batch.base_offset + batch.last_offset_delta + 1
    assert seen == expected == [(2, T0 + 9, b"a", b"2"), (5, T0 + 4, b"c", b"2"),
                                (6, T0 + 5, b"d", b"back"), (8, T0, b"z", b"active")]
    assert batches == 4                          # a, c+d, the empty one, the active one


# -- Compaction while other processes append and read ----------------------------------------

def _append_keyed(path, writer, count, go):
    import random
    rng = random.Random(writer)
    with open_log(path, segment_bytes=2000, lock_timeout_ms=20000) as log:
        go.wait(30)
        for seq in range(count):
            key = b"k%d" % rng.randrange(20)
            log.append(rec(key, b"w%d:%d" % (writer, seq), T0 + seq))


def test_compaction_while_another_process_appends(tmp_path):
    import multiprocessing
    import random
    ctx = multiprocessing.get_context("spawn")
    path = str(tmp_path / "data" / "t-0")
    with open_log(path, segment_bytes=2000):
        pass
    go = ctx.Event()
    writer = ctx.Process(target=_append_keyed, args=(path, 1, 6000, go))
    writer.start()
    reports = []
    with open_log(path, segment_bytes=2000, lock_timeout_ms=20000) as log:
        go.set()
        while writer.is_alive():
            reports.append(log.compact(now_ms=T0, force=True))
            records = list(log.read())
            offsets = [r.offset for r in records]
            assert offsets == sorted(set(offsets))
        writer.join(60)
        assert writer.exitcode == 0
        log.roll()
        log.compact(now_ms=T0, force=True)
        records = list(log.read())
        assert log.end_offset == 6000
    assert sum(r.segments_cleaned for r in reports) > 0, reports
    rng, expected = random.Random(1), {}
    for seq in range(6000):
        expected[b"k%d" % rng.randrange(20)] = b"w1:%d" % seq
    assert {r.key: r.value for r in records} == expected and len(records) == len(expected)
    assert not leftovers(path)
    verify_clean(path)
