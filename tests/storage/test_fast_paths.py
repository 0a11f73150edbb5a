"""The append and read fast paths give exactly what the general paths give.

Log.append takes C-level passes for lists of plain bytes (grouping, no per-record
type checks) and writes big batches as header + records; find_batch and
read_batches settle the common case from batch headers. Each is checked here
against the general path it shortcuts, on logs of many shapes."""

import os
import random

import pytest

import kqlite
from kqlite.format.batch import build_batch
from kqlite.storage import log as log_module
from kqlite.storage import segment as segment_module


@pytest.fixture
def general_paths(monkeypatch):
    """A function that runs ``fn()`` with the read fast paths switched off."""
    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(segment_module.Segment, "_find_batch_quick", lambda self, *a: None)
            m.setattr(log_module.Log, "_read_batches_exact", lambda self, *a: None)
            return fn()
    return run


@pytest.mark.parametrize("seed", range(6))
def test_reads_match_the_general_paths(tmp_path, seed, general_paths):
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=rng.choice([2000, 50_000, 1 << 30]),
                         index_interval_bytes=rng.choice([1, 100, 4096])) as log:
        for _ in range(rng.randint(1, 25)):
            n = rng.choice([1, 2, 10, 300, 3000])
            size = rng.choice([0, 10, 100, 1000])
            log.append([os.urandom(size) for _ in range(n)])
        end = log.end_offset
        everything = [r.offset for r in log.read()]
        assert everything == list(range(end))
        for _ in range(40):
            offset = rng.randrange(0, end + 1)
            max_bytes = rng.choice([1, 100, 5000, 1 << 16, 1 << 20])
            limit = rng.choice([None, 1, 5, 5000])
            fast = log.read_batches(offset, max_bytes)
            general = general_paths(lambda: log.read_batches(offset, max_bytes))
            assert fast == general
            got = [r.offset for r in log.read(offset, max_records=limit)]
            assert got == everything[offset:][:limit]
            for seg in log._segments:
                if seg.size:
                    o = rng.randrange(seg.base_offset, seg.next_offset)
                    assert seg.find_batch(o) == general_paths(lambda: seg.find_batch(o))


def test_read_stops_at_max_offset_and_high_watermark(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        for _ in range(5):
            log.append([b"x" * 50] * 1000)
        assert [r.offset for r in log.read(500, max_offset=2500)] == list(range(500, 2500))
        log.set_high_watermark(3210)
        assert [r.offset for r in log.read(3000)] == list(range(3000, 3210))
        data = log.read_batches(0, 1 << 30)
        assert data and len(data) < log.size    # batches at or past the watermark stay out


@pytest.mark.parametrize("values", [
    [b"a" * 100] * 25_000,                           # split into several batches
    [os.urandom(random.Random(3).randrange(0, 3000)) for _ in range(2000)],
    [bytearray(b"b" * 70_000)] * 40,                 # written as header + records
    [b"", bytearray(b"x"), b"y" * 1_500_000],       # one record above the batch target
])
def test_plain_value_appends_are_the_general_batches(tmp_path, values):
    """The fast grouping cuts exactly where the general one does: the bytes on disk are
    those of build_batch over the same groups."""
    with kqlite.Log.open(tmp_path / "t-0", max_message_bytes=4 << 20) as log:
        first = log.append(values, timestamp=1234)
        groups = list(log._groups(list(values), plain=False))
        assert sum(map(len, groups)) == len(values)
        assert list(log._groups(list(values), plain=True)) == groups
        expected, offset = b"", first
        for group in groups:
            expected += build_batch(group, base_offset=offset, timestamp=1234)
            offset += len(group)
        assert log.read_batches(0, 1 << 30) == expected
        assert [r.value for r in log.read()] == [bytes(v) for v in values]
