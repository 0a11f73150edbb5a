"""SegmentWalk, the one walker over a segment file's batches.

Every way of walking (data walks with and without CRC checks, header walks that step
over batches larger than a read, any read size) reports the same batches, the same
stop position and the same status as one scan of the whole file in memory; batch
headers carry the v2 header fields; and a header walk reads a bounded amount per
batch however large the batches are."""

import os
import struct

import pytest

from kqlite import _native
from kqlite.format.batch import build_batch
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.scan import (
    SCAN_BAD_HEADER, SCAN_CORRUPT_CRC, SCAN_TRUNCATED, BatchPosition, SegmentWalk,
    batch_header,
)

READS = [61, 100, 1000, 1 << 14, 1 << 20]


def legacy_message(magic, offset, value):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(offset, 5_000 + offset, b"k", value)
    return bytes(builder.build())


def mixed_segment():
    """Bytes of legacy messages, then small and large v2 batches, offsets rising."""
    out, offset = bytearray(), 0
    for magic in (0, 1):
        out += legacy_message(magic, offset, b"x" * 300)
        offset += 1
    for n, size in [(1, 10), (3, 50_000), (1, 0), (40, 100), (1, 300_000), (2, 5)]:
        out += build_batch([os.urandom(size) for _ in range(n)], base_offset=offset,
                           timestamp=1_000 + offset, producer_id=7, producer_epoch=2,
                           base_sequence=offset, partition_leader_epoch=3)
        offset += n
    return bytes(out)


@pytest.fixture
def segment_file(tmp_path):
    def write(data):
        path = str(tmp_path / "00000000000000000000.log")
        with open(path, "wb") as f:
            f.write(data)
        opened = DEFAULT_FS.open(path)
        files.append(opened)
        return opened
    files = []
    yield write
    for f in files:
        f.close()


def reference(data, verify=True):
    found, stop, status = _native.scan_batches(data, 0, len(data), verify)
    return [BatchPosition(*b) for b in found], stop, status


def walk_all(f, end, **kwargs):
    walk = SegmentWalk(f, 0, end, **kwargs)
    return list(walk), walk.stop, walk.status


@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("mode", ["crc", "data", "headers"])
def test_every_walk_reports_what_one_scan_reports(segment_file, read, mode):
    data = mixed_segment()
    f = segment_file(data)
    kwargs = {"crc": {"verify_crc": True}, "data": {}, "headers": {"headers_only": True}}[mode]
    assert walk_all(f, len(data), chunk=read, **kwargs) == reference(data)


@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("headers_only", [False, True])
def test_damage_stops_every_walk_where_a_scan_stops(segment_file, read, headers_only):
    data = bytearray(mixed_segment())
    batches, _, _ = reference(bytes(data))
    big = next(b for b in batches if b.size > 200_000)
    # A truncated tail: the file ends inside the last batch.
    f = segment_file(bytes(data[:-3]))
    expected = reference(bytes(data[:-3]), verify=False)
    assert expected[2] == SCAN_TRUNCATED
    assert walk_all(f, len(data) - 3, chunk=read, headers_only=headers_only) == expected
    # Asked past the end of the file: the same answer.
    assert walk_all(f, len(data) + 500, chunk=read, headers_only=headers_only) == expected
    # A last offset beyond int64 in the header of a batch larger than most reads.
    bad = bytearray(data)
    struct.pack_into(">q", bad, big.position, (1 << 63) - 2)
    struct.pack_into(">i", bad, big.position + 23, 5)        # lastOffsetDelta
    f = segment_file(bytes(bad))
    expected = reference(bytes(bad), verify=False)
    assert expected[1:] == (big.position, SCAN_BAD_HEADER)
    assert walk_all(f, len(bad), chunk=read, headers_only=headers_only) == expected


@pytest.mark.parametrize("read", READS)
def test_a_crc_walk_stops_at_a_flipped_byte(segment_file, read):
    data = bytearray(mixed_segment())
    batches, _, _ = reference(bytes(data))
    target = batches[5]
    data[target.position + target.size - 1] ^= 0xFF
    f = segment_file(bytes(data))
    found, stop, status = walk_all(f, len(data), verify_crc=True, chunk=read)
    assert (found, stop, status) == (batches[:5], target.position, SCAN_CORRUPT_CRC)
    # Without CRC checks the damage goes unseen, as the header is intact.
    assert walk_all(f, len(data), headers_only=True, chunk=read)[0] == batches


def test_from_offset_leaves_out_earlier_batches(segment_file):
    data = mixed_segment()
    f = segment_file(data)
    batches, _, _ = reference(data)
    for offset in range(batches[-1].last_offset + 2):
        got = list(SegmentWalk(f, 0, len(data), headers_only=True, chunk=100,
                               from_offset=offset))
        assert got == [b for b in batches if b.last_offset >= offset]


def test_header_walks_read_a_bounded_amount_per_batch(tmp_path):
    """Stepping over 1 MiB batches reads one small chunk each, not the batch."""
    data = b"".join(build_batch([os.urandom(1 << 20)], base_offset=i, timestamp=1)
                    for i in range(8))
    path = str(tmp_path / "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)

    class Counting:
        def __init__(self, inner):
            self.inner, self.read = inner, 0

        def pread(self, size, pos):
            out = self.inner.pread(size, pos)
            self.read += len(out)
            return out

        def size(self):
            return self.inner.size()

    f = Counting(DEFAULT_FS.open(path))
    try:
        batches = list(SegmentWalk(f, 0, len(data), headers_only=True, chunk=1 << 14))
        assert [b.base_offset for b in batches] == list(range(8))
        assert f.read <= 8 * (1 << 14)
        f.read = 0
        assert len(list(SegmentWalk(f, 0, len(data), chunk=1 << 14))) == 8
        assert f.read >= len(data)                   # a data walk sees every byte
    finally:
        f.inner.close()


def test_batch_headers_carry_the_v2_fields(segment_file):
    data = mixed_segment()
    f = segment_file(data)
    headers, positions = [], []
    for chunk in SegmentWalk(f, 0, len(data), headers_only=True, chunk=100).chunks():
        headers.extend(batch_header(chunk, b) for b in chunk.batches)
        positions.extend(b.position for b in chunk.batches)
    legacy, v2 = headers[:2], headers[2:]
    assert [h.magic for h in legacy] == [0, 1]
    assert all(h.producer_id == -1 and h.producer_epoch == -1 and h.base_sequence == -1
               and h.partition_leader_epoch == -1 and h.records_count == 1
               and not h.is_transactional and not h.is_control for h in legacy)
    assert [h.base_offset for h in legacy] == [h.last_offset for h in legacy] == [0, 1]
    assert [(h.base_offset, h.records_count) for h in v2] == [
        (2, 1), (3, 3), (6, 1), (7, 40), (47, 1), (48, 2)]
    for h, position in zip(v2, positions[2:]):
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, h.base_offset)
        assert h.partition_leader_epoch == 3
        assert h.last_offset == h.base_offset + h.records_count - 1
        assert not h.is_transactional and not h.is_control
        raw = data[position:position + h.size]
        assert struct.unpack_from(">q", raw, 0)[0] == h.base_offset
        assert raw[:61] == h.encode()


def test_control_and_transactional_flags(segment_file):
    data = build_batch([b"a"], base_offset=0, timestamp=1, producer_id=1, producer_epoch=0,
                       base_sequence=0, transactional=True) + \
        build_batch([b"b"], base_offset=1, timestamp=1, producer_id=1, producer_epoch=0,
                    transactional=True, control=True)
    f = segment_file(data)
    chunk = next(SegmentWalk(f, 0, len(data)).chunks())
    first, second = (batch_header(chunk, b) for b in chunk.batches)
    assert first.is_transactional and not first.is_control
    assert second.is_transactional and second.is_control
