"""Stateful property test: a Log against a plain in-memory model of Kafka's partition log.

The model knows batches (each append of a few records is one batch), the segments
they sit in, and the log start offset. Segment rolls and retention are predicted
from Kafka's rules (roll when ``segment.bytes`` would be exceeded; retention by
size deletes the oldest non-active segments while the excess covers them) using
batch sizes read from the ``.log`` files by a tiny independent parser below.

Checked after every step: dense offsets from start to end, ``read()`` equals the
model exactly (keys, values, headers, timestamps), segment files named by 20-digit
base offsets and matching the model batch for batch, index entries pointing at
batch boundaries, and ``offset_for_time`` / ``read(offset)`` on random inputs.
A ``reopen`` step closes and reopens the log, after which all of it must hold.

A second Log instance on the same directory (opened and closed by the steps) stands in
for another process: each instance has its own file descriptions, so the flock-based
locking and the shared state behave exactly as between processes. Every step goes
through one of the two. In some runs a third instance, the checker, does the checks
after every step, so that the other two are refreshed only by the steps that use them
(a process that has not looked at the log for a while must still do the right thing).
"""

import itertools
import os
import re
import struct

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, rule,
    run_state_machine_as_test,
)

import kqlite
from kqlite import Record
from kqlite.errors import OffsetOutOfRangeError
from kqlite.format.batch import now_ms

SETTINGS = settings(max_examples=40, stateful_step_count=25, deadline=None,
                    report_multiple_bugs=False,
                    suppress_health_check=list(HealthCheck))

_SEGMENT_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


# -- An independent reader of the on-disk layout ---------------------------------------------

def disk_layout(path):
    """[(segment_base, [(batch_base, last_offset, size, max_timestamp), ...]), ...] parsed
    straight from the .log files (Kafka's v2 header layout), oldest segment first."""
    layout = []
    for name in sorted(os.listdir(path)):
        m = _SEGMENT_NAME.match(name)
        if not m or m.group(2) != "log":
            continue
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        batches, pos = [], 0
        while pos < len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            assert data[pos + 16] == 2, f"{name}@{pos}: magic {data[pos + 16]}"
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            (max_ts,) = struct.unpack_from(">q", data, pos + 35)
            batches.append((base, base + delta, length + 12, max_ts))
            pos += length + 12
        assert pos == len(data), f"{name}: trailing bytes"
        layout.append((int(m.group(1)), batches))
    return layout


def read_index(path, entry):
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) % entry.size == 0, path
    return [entry.unpack_from(data, i) for i in range(0, len(data), entry.size)]


# -- The model ---------------------------------------------------------------------------------

class MBatch:
    __slots__ = ("base", "records", "size")

    def __init__(self, base, records, size):
        self.base, self.records, self.size = base, records, size

    @property
    def last(self):
        return self.base + len(self.records) - 1

    @property
    def end(self):
        return self.base + len(self.records)


class MSegment:
    __slots__ = ("base", "batches")

    def __init__(self, base):
        self.base, self.batches = base, []

    @property
    def size(self):
        return sum(b.size for b in self.batches)

    @property
    def end(self):
        return self.batches[-1].end if self.batches else self.base


# -- Strategies --------------------------------------------------------------------------------

timestamps = st.one_of(st.integers(1000, 1012), st.integers(0, 2 ** 41))
values = st.one_of(st.none(), st.binary(max_size=60))
keys = st.one_of(st.none(), st.binary(max_size=12))
headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
                   max_size=3)
full_records = st.builds(lambda v, k, h, t: Record(value=v, key=k, headers=h, timestamp=t),
                         values, keys, headers, st.one_of(st.none(), timestamps))
one_record = st.one_of(st.binary(max_size=60), st.none(), full_records)
codecs = st.sampled_from([None, None, None, "none", "gzip", "snappy", "lz4", "zstd"])


class LogMachine(RuleBasedStateMachine):
    base_dir = None           # set by the test function (pytest's tmp_path)
    counter = None

    def __init__(self):
        super().__init__()
        self.logs = [None, None]
        self.checker = None

    # -- set-up ---------------------------------------------------------------------------

    @initialize(segment_bytes=st.integers(300, 2000), index_interval=st.integers(1, 200),
                retention_bytes=st.integers(0, 3000), second=st.booleans(),
                checker=st.booleans())
    def open_log(self, segment_bytes, index_interval, retention_bytes, second, checker):
        self.path = os.path.join(self.base_dir, "ex%d" % next(self.counter), "topic-0")
        self.config = {"segment.bytes": segment_bytes, "index.interval.bytes": index_interval,
                       "retention.bytes": retention_bytes, "retention.ms": -1,
                       "segment.ms": 2 ** 62}
        self.logs = [kqlite.Log.open(self.path, self.config), None]
        if second:
            self.logs[1] = kqlite.Log.open(self.path, self.config)
        if checker:
            self.checker = kqlite.Log.open(self.path, self.config)
        self.segments = [MSegment(0)]
        self.start = 0

    def teardown(self):
        for log in self.logs + [self.checker]:
            if log is not None:
                log.close()

    def pick(self, via):
        """The instance a step goes through (the first when the second is closed)."""
        return self.logs[via] or self.logs[0]

    def open_logs(self):
        return [log for log in self.logs if log is not None]

    def checked_logs(self):
        """Who the invariants look through: the checker if there is one, else every open
        instance."""
        return [self.checker] if self.checker is not None else self.open_logs()

    # -- model helpers --------------------------------------------------------------------

    @property
    def end(self):
        return self.segments[-1].end

    def live_records(self):
        """[(offset, timestamp, key, value, headers)] from the log start offset."""
        out = []
        for seg in self.segments:
            for b in seg.batches:
                for i, (ts, k, v, h) in enumerate(b.records):
                    if b.base + i >= self.start:
                        out.append((b.base + i, ts, k, v, h))
        return out

    def drop_segments(self, doomed):
        self.segments = [s for s in self.segments if s not in doomed]
        self.start = max(self.start, self.segments[0].base)

    # -- rules ----------------------------------------------------------------------------

    @rule(records=st.lists(one_record, min_size=1, max_size=20),
          timestamp=st.one_of(st.none(), timestamps), codec=codecs, via=st.integers(0, 1))
    def append(self, records, timestamp, codec, via):
        log = self.pick(via)
        kwargs = {} if codec is None else {"codec": codec}
        before = now_ms()
        first = log.append(records, timestamp=timestamp, **kwargs)
        after = now_ms()
        assert first == self.end
        assert log.end_offset == first + len(records)

        model = []
        for rec in records:
            if isinstance(rec, Record):
                model.append((rec.timestamp, rec.key, rec.value, rec.headers))
            else:
                model.append((None, None, rec, ()))
        if any(ts is None for ts, *_ in model):
            if timestamp is None:
                # The default is the wall clock: learn it from the log, then check it.
                got = list(log.read(first))
                defaults = {got[i].timestamp for i, m in enumerate(model) if m[0] is None}
                assert len(defaults) == 1, defaults
                timestamp = defaults.pop()
                assert before <= timestamp <= after
            model = [(timestamp if ts is None else ts, k, v, h) for ts, k, v, h in model]

        # One small append is one batch: find its size in the active .log file.
        layout = disk_layout(self.path)
        seg_base, batches = layout[-1]
        assert batches[-1][:2] == (first, first + len(records) - 1), batches[-1]
        size = batches[-1][2]
        active = self.segments[-1]
        if active.batches and active.size + size > self.config["segment.bytes"]:
            active = MSegment(first)
            self.segments.append(active)
        active.batches.append(MBatch(first, model, size))

    @rule(via=st.integers(0, 1))
    def roll(self, via):
        self.pick(via).roll()
        if self.segments[-1].batches:
            self.segments.append(MSegment(self.end))

    @rule(via=st.integers(0, 1))
    def reopen(self, via):
        """Close one instance and open it again (while the other may stay open)."""
        if self.logs[via] is not None:
            self.logs[via].close()
            self.logs[via] = None
        self.logs[via] = kqlite.Log.open(self.path, self.config)
        assert self.logs[via].recovery_reports == []

    @rule()
    def reopen_all(self):
        """Close every instance (the last one marks a clean shutdown) and open again: the
        first opener is alone now."""
        had_checker = self.checker is not None
        for log in self.logs + [self.checker]:
            if log is not None:
                log.close()
        self.logs, self.checker = [None, None], None
        self.logs[0] = kqlite.Log.open(self.path, self.config)
        assert self.logs[0].recovery_reports == []
        if had_checker:
            self.checker = kqlite.Log.open(self.path, self.config)

    @rule(via=st.integers(0, 1))
    def check_via(self, via):
        """The invariants through one of the step instances, whatever it last saw."""
        log = self.pick(via)
        self.check_contents(log)
        self.check_files([log])

    @rule()
    def close_second(self):
        if self.logs[1] is not None:
            self.logs[1].close()
            self.logs[1] = None

    @rule(via=st.integers(0, 1))
    def enforce_retention(self, via):
        deleted = self.pick(via).enforce_retention()
        # Kafka's deleteOldSegments: log-start breaches, then size breaches (never the active).
        doomed = [s for s in self.segments[:-1] if s.end <= self.start]
        rest = [s for s in self.segments if s not in doomed]
        excess = sum(s.size for s in rest) - self.config["retention.bytes"]
        for seg in rest[:-1]:
            if excess < seg.size:
                break
            doomed.append(seg)
            excess -= seg.size
        assert deleted == [s.base for s in doomed]
        if doomed:
            self.drop_segments(doomed)

    @rule(data=st.data(), via=st.integers(0, 1))
    def delete_records(self, data, via):
        log = self.pick(via)
        before = data.draw(st.integers(0, self.end + 2), label="before")
        if before > self.end:
            with pytest.raises(OffsetOutOfRangeError):
                log.delete_records(before=before)
            return
        result = log.delete_records(before=before)
        self.start = max(self.start, before)
        assert result == self.start
        doomed = [s for s in self.segments[:-1] if s.end <= self.start]
        if doomed:
            self.drop_segments(doomed)

    @rule(data=st.data(), via=st.integers(0, 1))
    def truncate_to(self, data, via):
        log = self.pick(via)
        offset = data.draw(st.integers(0, self.end + 2), label="offset")
        if offset >= self.end:
            assert log.truncate_to(offset) == self.end
            return
        if offset < self.start:
            with pytest.raises(OffsetOutOfRangeError):
                log.truncate_to(offset)
            return
        new_end = log.truncate_to(offset)
        while len(self.segments) > 1 and self.segments[-1].base >= offset:
            self.segments.pop()
        seg = self.segments[-1]
        seg.batches = [b for b in seg.batches if b.last < offset]
        assert new_end == self.end <= offset
        # Whole batches go, so the end may fall below the start: the start follows it down
        # (Kafka: logStartOffset = min(targetOffset, logStartOffset)), never start > end.
        self.start = min(self.start, self.end)

    @rule(data=st.data(), via=st.integers(0, 1))
    def read_from_random_offset(self, data, via):
        log = self.pick(via)
        live = self.live_records()
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        limit = data.draw(st.one_of(st.none(), st.integers(1, 30)), label="max_records")
        expected = live[offset - self.start:]
        if limit is not None:
            expected = expected[:limit]
        assert [tuple(r) for r in log.read(offset, max_records=limit)] == expected
        stop = data.draw(st.integers(self.start, self.end), label="max_offset")
        assert [tuple(r) for r in log.read(offset, max_offset=stop)] == \
            [r for r in live[offset - self.start:] if r[0] < stop]

    @rule(data=st.data(), via=st.integers(0, 1))
    def offset_for_time(self, data, via):
        log = self.pick(via)
        live = self.live_records()
        known = sorted({r[1] for r in live})
        if known and data.draw(st.booleans(), label="near a stored timestamp"):
            # An index into the timestamps, not sampled_from(known): records appended
            # without one carry the clock's, so how many differ changes when Hypothesis
            # replays the same choices, and a draw's bounds must not.
            pick = data.draw(st.integers(0, 255), label="stored timestamp")
            t = known[pick % len(known)] + \
                data.draw(st.sampled_from([0, 0, -1, 1]), label="delta")
        else:
            t = data.draw(timestamps, label="t")
        expected = next((r[0] for r in live if r[1] >= t), None)
        assert log.offset_for_time(t) == expected, (t, live)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def offsets_and_contents_match_the_model(self):
        for log in self.checked_logs():
            self.check_contents(log)

    @invariant()
    def files_match_the_model(self):
        self.check_files(self.checked_logs())

    def check_contents(self, log):
        live = self.live_records()
        assert (log.start_offset, log.end_offset) == (self.start, self.end)
        assert log.high_watermark == self.end
        got = [tuple(r) for r in log.read()]
        assert [r[0] for r in got] == list(range(self.start, self.end))
        assert got == live
        assert list(log.read(self.end)) == []
        with pytest.raises(OffsetOutOfRangeError):
            log.read(self.end + 1)
        if self.start > 0:
            with pytest.raises(OffsetOutOfRangeError):
                log.read(self.start - 1)

    def check_files(self, instances):
        names = [n for n in os.listdir(self.path) if _SEGMENT_NAME.match(n)]
        logs = sorted(n for n in names if n.endswith(".log"))
        bases = [int(n[:20]) for n in logs]
        assert bases == sorted(bases) and bases == [s.base for s in self.segments]
        for log in instances:
            log.end_offset                      # catch up with the other instances first
            assert log.segments == bases
        for n in logs:
            assert len(n) == 24 and n[:20].isdigit()
            assert n[:20] + ".index" in names and n[:20] + ".timeindex" in names
        assert len(names) == 3 * len(logs), sorted(names)
        expected = [(s.base, [(b.base, b.last, b.size) for b in s.batches])
                    for s in self.segments]
        layout = disk_layout(self.path)
        assert [(base, [b[:3] for b in batches]) for base, batches in layout] == expected
        for base, batches in layout:
            self._check_indexes(base, batches)

    def _check_indexes(self, base, batches):
        """Kafka's index shapes: .index maps a batch's last offset to its position;
        .timeindex holds (max timestamp so far, offset of the batch that reached it)."""
        stem = os.path.join(self.path, "%020d" % base)
        by_pos, pos = {}, 0
        for b in batches:
            by_pos[pos] = b
            pos += b[2]
        prev = (-1, -1)
        for rel, position in read_index(stem + ".index", struct.Struct(">ii")):
            assert rel > prev[0] and position > prev[1]
            assert position in by_pos and by_pos[position][1] == base + rel
            prev = (rel, position)
        by_last = {b[1]: b for b in batches}
        prev_ts, prev_rel = None, -1
        for ts, rel in read_index(stem + ".timeindex", struct.Struct(">qi")):
            assert prev_ts is None or ts > prev_ts
            assert rel >= prev_rel
            batch = by_last.get(base + rel)
            assert batch is not None and batch[3] == ts
            assert all(b[3] < ts for b in batches if b[1] < base + rel)
            prev_ts, prev_rel = ts, rel


def test_log_matches_model(tmp_path, soak):
    class Machine(LogMachine):
        base_dir = str(tmp_path)
        counter = itertools.count()
    # --soak explores far more (and longer) histories.
    run_state_machine_as_test(Machine, settings=settings(
        SETTINGS, max_examples=2000 if soak else SETTINGS.max_examples,
        stateful_step_count=60 if soak else SETTINGS.stateful_step_count))


# -- Deterministic regressions for what the state machine found ----------------------------

def test_offset_for_time_exact_match_inside_a_batch(tmp_path):
    """The record with the target timestamp is not the batch's last record."""
    with kqlite.Log.open(tmp_path / "t-0", index_interval_bytes=1) as log:
        log.append([b"a"], timestamp=1)
        log.append([Record(value=b"b", timestamp=10), Record(value=b"c", timestamp=5)])
        assert log.offset_for_time(10) == 1
    with kqlite.Log.open(tmp_path / "t-0") as log:        # the close wrote (10, 2) too
        assert log.offset_for_time(10) == 1


def test_truncate_below_start_inside_a_batch_keeps_start_le_end(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"a", b"b", b"c", b"d"])              # one batch, offsets 0..3
        log.delete_records(before=2)
        assert log.truncate_to(3) == 0                    # the whole batch goes
        assert log.start_offset <= log.end_offset
        assert list(log.read()) == []
        assert log.append(b"e") == 0
        assert [r.value for r in log.read()] == [b"e"]


def test_retention_applies_time_and_size_in_one_call(tmp_path):
    """Kafka's deleteOldSegments applies log-start, size and time retention together."""
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=100, retention_ms=1000,
                         retention_bytes=250) as log:
        for i in range(12):
            log.append(b"x" * 20, timestamp=10_000 if i < 2 else 1_000_000)
        per_segment = log.size // len(log.segments)
        assert len(log.segments) > 5
        log.enforce_retention(now_ms=1_000_500)           # only the first segment is too old
        assert log.size - log.config["retention.bytes"] < per_segment


# Two Log instances on one directory behave as two processes (separate flock descriptions).

@pytest.mark.parametrize("how", ["close", "flush"])
def test_an_instance_with_an_old_view_never_undoes_anothers_appends(tmp_path, how):
    path = tmp_path / "t-0"
    a, b = kqlite.Log.open(path), kqlite.Log.open(path)
    try:
        a.append(b"1")
        b.append(b"2")                        # a has not looked since
        getattr(a, how)()                     # both write the shared state
        assert b.append(b"3") == 2
        assert [(r.offset, r.value) for r in b.read()] == [(0, b"1"), (1, b"2"), (2, b"3")]
    finally:
        a.close()
        b.close()


def test_records_appended_before_another_instance_rolled_are_not_skipped(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=200) as a, \
            kqlite.Log.open(path, segment_bytes=200) as b:
        a.append(b"x")
        b.append(b"y")                        # into the segment a knows...
        b.append(b"z" * 150)                  # ...then b rolls
        assert [r.value[:1] for r in a.read(1)] == [b"y", b"z"]


def test_truncation_below_the_start_is_seen_by_other_instances(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as a, kqlite.Log.open(path) as b:
        a.append([b"a", b"b"])
        a.delete_records(before=1)
        assert (b.start_offset, b.end_offset) == (1, 2)
        assert a.truncate_to(1) == 0          # the whole batch goes
        assert (b.start_offset, b.end_offset) == (0, 0)
        a.append([b"c", b"d"])
        assert (b.start_offset, b.end_offset) == (0, 2)
        assert [r.value for r in b.read()] == [b"c", b"d"]


def test_an_opener_after_truncation_below_the_start_sees_the_new_records(tmp_path):
    """The data dir's log-start-offset checkpoint must not bring back the old start."""
    path = tmp_path / "data" / "t-0"                  # a data dir: checkpoints are written
    with kqlite.Log.open(path) as a:
        a.append([b"a", b"b"])
        a.delete_records(before=1)
        assert a.truncate_to(1) == 0
        assert a.append(b"c") == 0
        with kqlite.Log.open(path) as b:
            assert (b.start_offset, b.end_offset) == (0, 1)
            assert [r.value for r in b.read()] == [b"c"]
    with kqlite.Log.open(path) as c:
        assert [r.value for r in c.read()] == [b"c"]


def test_other_instances_see_a_truncated_and_rewritten_segment(tmp_path):
    """Truncate and append again in the same segment: another instance's cached view of
    that segment (its size, end offset, indexes) no longer describes the file."""
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, index_interval_bytes=1) as a, \
            kqlite.Log.open(path, index_interval_bytes=1) as b:
        a.append([b"0", b"1"], timestamp=10)
        a.append(b"2", timestamp=20)
        assert b.end_offset == 3
        assert a.truncate_to(2) == 2
        a.append([b"two", b"three"], timestamp=30)
        assert (b.start_offset, b.end_offset) == (0, 4)
        assert [(r.offset, r.value) for r in b.read(1)] == \
            [(1, b"1"), (2, b"two"), (3, b"three")]
        assert b.offset_for_time(25) == 2


def test_time_index_entry_written_by_another_instances_roll_goes_with_truncation(tmp_path):
    """b's roll closes the segment with a time index entry a never saw; when a then
    truncates that segment, the entry for the removed batch must go too."""
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, index_interval_bytes=1) as a:
        a.append(b"x", timestamp=50)
        with kqlite.Log.open(path, index_interval_bytes=1) as b:
            b.roll()
        assert a.truncate_to(0) == 0
        with open(path / ("%020d.timeindex" % 0), "rb") as f:
            assert f.read() == b""
        a.append(b"y", timestamp=10)
        assert a.offset_for_time(10) == 0
    with kqlite.Log.open(path) as c:
        assert c.offset_for_time(10) == 0 and c.offset_for_time(11) is None
