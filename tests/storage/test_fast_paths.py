"""The append and read fast paths give exactly what the slow, obvious ways give.

Log.append takes C-level passes for lists of plain bytes (grouping, no per-record
type checks) and writes big batches as header + records; find_batch, read_batches
and fetch_region step over large batches by their headers (header walks). Each is
checked here against a plain computation on logs of many shapes: every batch read
whole and CRC-checked, then filtered in Python."""

import os
import random

import pytest

import kqlite
from kqlite.errors import OffsetOutOfRangeError
from kqlite.format.batch import build_batch
from kqlite.storage import appending
from kqlite.storage.scan import SegmentWalk


def all_batches(log):
    """(segment, BatchPosition) of every batch, from data walks with CRC checks."""
    out = []
    for seg in log._segments:
        walk = SegmentWalk(seg.log, 0, seg.size, verify_crc=True)
        out.extend((seg, b) for b in walk)
        assert walk.status == 0 and walk.stop == seg.size
    return out


def expected_batches(log, offset, max_bytes, limit, min_one=True):
    """What read_batches(offset, max_bytes) must return, batch by batch (and
    fetch_region(..., min_one=False): no batch when the first does not fit)."""
    batches = all_batches(log)
    first = next((i for i, (_, b) in enumerate(batches) if b.last_offset >= offset), None)
    if first is None or batches[first][1].last_offset >= limit:
        return b""
    seg = batches[first][0]
    data, total = b"", 0
    for s, b in batches[first:]:
        if s is not seg or b.last_offset >= limit or \
                ((data or not min_one) and total + b.size > max_bytes):
            break
        data += s.read(b.position, b.size)
        total += b.size
    return data


@pytest.mark.parametrize("seed", range(6))
def test_reads_match_whole_batch_walks(tmp_path, seed):
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
        batches = all_batches(log)
        for _ in range(40):
            offset = rng.randrange(0, end + 1)
            max_bytes = rng.choice([1, 100, 5000, 1 << 16, 1 << 20])
            limit = rng.choice([None, 1, 5, 5000])
            expected = expected_batches(log, offset, max_bytes, end)
            assert log.read_batches(offset, max_bytes) == expected
            region = log.fetch_region(offset, max_bytes)
            if region is None:
                assert expected == b""
            else:
                fd, position, length = region
                try:
                    assert os.pread(fd, length, position) == expected
                finally:
                    os.close(fd)
            fits = expected_batches(log, offset, max_bytes, end, min_one=False)
            region = log.fetch_region(offset, max_bytes, min_one=False)
            if region is None:
                assert fits == b""
            else:
                fd, position, length = region
                try:
                    assert os.pread(fd, length, position) == fits
                finally:
                    os.close(fd)
            got = [r.offset for r in log.read(offset, max_records=limit)]
            assert got == everything[offset:][:limit]
            seg, _ = rng.choice(batches)
            o = rng.randrange(seg.base_offset, seg.next_offset)
            assert seg.find_batch(o) == next(b for s, b in batches
                                             if s is seg and b.last_offset >= o)


@pytest.mark.parametrize("seed", range(3))
def test_one_read_extent_is_the_walks(tmp_path, seed):
    """read_batches' extent from reads folded natively (reads._extent_in_one_read)
    equals the header walk's whenever it settles, and settles for small batches (an
    extent that meets a large batch is left to the walk)."""
    from kqlite.storage import reads
    rng = random.Random(seed)
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=rng.choice([50_000, 1 << 30]),
                         index_interval_bytes=rng.choice([1, 4096])) as log:
        for _ in range(200):
            log.append([os.urandom(rng.choice([0, 40, 200]))])
        for _ in range(rng.randint(1, 300)):
            n = rng.choice([1] * 16 + [10] * 3 + [300])
            log.append([os.urandom(rng.choice([0, 40, 300])) for _ in range(n)])
            if rng.random() < 0.02:
                log.append([os.urandom(1000)] * 300)
        end = log.end_offset
        queries = [(0, 100, end), (0, 5000, end), (3, 5000, 50)] + [
            (rng.randrange(0, end), rng.choice([1, 100, 5000, 1 << 16, 1 << 22]),
             rng.choice([end, rng.randrange(0, end + 1)])) for _ in range(60)]
        for i, (offset, max_bytes, limit) in enumerate(queries):
            seg = log._segments.for_offset(offset)
            position = seg.index.lookup(offset)[1]
            walk = reads._extent_walk(seg, position, offset, max_bytes, limit, True)
            one = reads._extent_in_one_read(seg, position, offset, max_bytes, limit)
            assert one is not reads._UNSETTLED or i >= 3     # small batches settle
            if one is not reads._UNSETTLED:
                assert (one and one[:3]) == (walk and walk[:3])
                if one:
                    assert reads._bytes_from(one[3], one[1], one[2]) == \
                        seg.read(one[1], one[2])


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
        groups = list(appending.group_records(log.config, list(values), plain=False))
        assert sum(map(len, groups)) == len(values)
        assert list(appending.group_records(log.config, list(values), plain=True)) == groups
        expected, offset = b"", first
        for group in groups:
            expected += build_batch(group, base_offset=offset, timestamp=1234)
            offset += len(group)
        assert log.read_batches(0, 1 << 30) == expected
        assert [r.value for r in log.read()] == [bytes(v) for v in values]


def test_a_region_with_no_room_looks_nothing_up_but_checks_the_offset(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"x" * 100] * 3)
        assert log.fetch_region(0, 0, min_one=False) is None
        fd, _position, length = log.fetch_region(0, 0)
        os.close(fd)
        assert length > 0
        with pytest.raises(OffsetOutOfRangeError):
            log.fetch_region(log.end_offset + 1, 0, min_one=False)
