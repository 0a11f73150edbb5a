"""Retention by time, size and log start offset; the active segment always stays."""

import pytest

import kqlite
from kqlite.errors import OffsetOutOfRangeError


def fill(log, n, ts0=1_000_000, step=1000):
    for i in range(n):
        log.append(b"v%03d" % i, timestamp=ts0 + i * step)


def test_retention_by_time_deletes_old_segments_only(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200, retention_ms=10_000) as log:
        fill(log, 40)
        before = log.segments
        now = 1_000_000 + 39 * 1000
        deleted = log.enforce_retention(now_ms=now)
        assert deleted and deleted == before[:len(deleted)]
        assert log.start_offset == log.segments[0]
        for rec in log.read():
            assert now - rec.timestamp <= 10_000 + 4000  # whole segments go, so a little extra stays
        # Far in the future everything but the active segment goes.
        log.enforce_retention(now_ms=now * 10)
        assert len(log.segments) == 1
        assert log.end_offset == 40


def test_retention_by_size(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=300, retention_bytes=700) as log:
        fill(log, 60)
        log.enforce_retention()
        assert log.size <= 700 + 300
        assert [r.offset for r in log.read()] == list(range(log.start_offset, 60))


def test_unlimited_retention_keeps_everything(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200, retention_ms=-1) as log:
        fill(log, 30)
        assert log.enforce_retention(now_ms=10 ** 15) == []


def test_compact_only_policy_ignores_time_retention(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200, retention_ms=1,
                         cleanup_policy="compact") as log:
        for i in range(30):  # a compacted log needs keys
            log.append(kqlite.Record(key=b"k%d" % i, value=b"v%03d" % i,
                                     timestamp=1_000_000 + i * 1000))
        assert log.enforce_retention(now_ms=10 ** 15) == []


def test_delete_records_moves_start_and_persists(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=200) as log:
        fill(log, 30)
        assert log.delete_records(before=17) == 17
        assert next(iter(log.read())).offset == 17
        with pytest.raises(OffsetOutOfRangeError):
            log.read(16)
        assert log.segments[0] <= 17
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records(before=31)
    with kqlite.Log.open(path) as log:
        assert log.start_offset == 17
        assert [r.offset for r in log.read()] == list(range(17, 30))


def test_delete_records_of_everything_keeps_active_segment(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200) as log:
        fill(log, 20)
        log.delete_records(before=20)
        assert list(log.read()) == []
        assert log.start_offset == 20 and len(log.segments) == 1
        assert log.append(b"next") == 20
