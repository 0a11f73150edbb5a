"""scan_batches over logs written by kafka-python (magic 0, 1, 2), with truncated
tails, flipped bytes, bad headers, limits, sub-ranges and mmaps; C against pure."""

import mmap
import struct

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
OK, TRUNCATED, CORRUPT_CRC, BAD_HEADER = (_native.SCAN_OK, _native.SCAN_TRUNCATED,
                                          _native.SCAN_CORRUPT_CRC, _native.SCAN_BAD_HEADER)


def v2_batch(base_offset, n, codec=0, first_ts=1_000):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(n):
        builder.append(i, first_ts + 7 * i, b"k%d" % i, b"v" * (i * 13), [("h", b"x")])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)     # kafka-python builds at offset 0
    return bytes(buf)


def legacy_messages(magic, base_offset, n, codec=0, first_ts=1_000):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(n):
        builder.append(base_offset + i, first_ts + 7 * i, b"k%d" % i, b"v" * (i * 13))
    return bytes(builder.build())


def expected_v2(pos, data, base_offset, n, first_ts=1_000):
    return (pos, base_offset, base_offset + n - 1, first_ts + 7 * (n - 1), len(data), 2)


def build_log(magic, n_entries=10, codec=0):
    """A log of n_entries entries and the tuples scan_batches must report for it."""
    out, expected, offset = bytearray(), [], 0
    for b in range(n_entries):
        n = b % 4 + 1
        if magic == 2:
            data = v2_batch(offset, n, codec, first_ts=1_000 + offset)
            expected.append(expected_v2(len(out), data, offset, n, first_ts=1_000 + offset))
            out += data
        else:
            data = legacy_messages(magic, offset, n, codec, first_ts=1_000 + offset)
            if codec:     # one wrapper message; a broker gives it the last inner offset
                data = struct.pack(">q", offset + n - 1) + data[8:]
                ts = struct.unpack_from(">q", data, 18)[0] if magic == 1 else -1
                expected.append((len(out), offset + n - 1, offset + n - 1, ts, len(data), magic))
            else:
                pos = len(out)
                for i in range(n):
                    size = 12 + struct.unpack_from(">i", data, pos - len(out) + 8)[0]
                    ts = 1_000 + offset + 7 * i if magic == 1 else -1
                    expected.append((pos, offset + i, offset + i, ts, size, magic))
                    pos += size
            out += data
        offset += n
    return bytes(out), expected


@pytest.mark.parametrize("codec", [0, 1], ids=["plain", "gzip"])
@pytest.mark.parametrize("magic", [0, 1, 2])
def test_scan_kafka_python_logs(impl, magic, codec):
    data, expected = build_log(magic, codec=codec)
    assert impl.scan_batches(data) == (expected, len(data), OK)
    assert impl.scan_batches(data, verify_crc=False) == (expected, len(data), OK)


def test_scan_mixed_magics(impl):
    parts = [legacy_messages(0, 0, 2), legacy_messages(1, 2, 1), v2_batch(3, 3)]
    data = b"".join(parts)
    batches, stop, status = impl.scan_batches(data)
    assert (stop, status) == (len(data), OK)
    assert [b[5] for b in batches] == [0, 0, 1, 2]
    assert [b[1:3] for b in batches] == [(0, 0), (1, 1), (2, 2), (3, 5)]


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_every_truncated_tail(impl, magic):
    data, expected = build_log(magic, n_entries=3)
    last = expected[-1][0]
    for cut in range(last, len(data)):
        assert impl.scan_batches(data[:cut]) == (expected[:-1], last, TRUNCATED if cut > last
                                                 else OK)


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_flipped_bytes(impl, magic):
    data, expected = build_log(magic, n_entries=4)
    pos, size = expected[2][0], expected[2][4]
    # The stored CRC and every byte it covers: v2 crc at 17, attributes on from 21;
    # legacy crc at 12, magic on from 16 (the magic byte is left to test_bad_headers).
    crc_field, covered = (range(17, 21), range(21, size)) if magic == 2 else \
        (range(12, 16), range(17, size))
    for at in [*crc_field, *covered]:
        bad = bytearray(data)
        bad[pos + at] ^= 0x40
        assert impl.scan_batches(bytes(bad)) == (expected[:2], pos, CORRUPT_CRC), at
        # Framing only: the damage is invisible and the scan goes on.
        assert impl.scan_batches(bytes(bad), verify_crc=False)[1:] == (len(data), OK)


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_bad_headers(impl, magic):
    data, expected = build_log(magic, n_entries=3)
    pos = expected[1][0]
    for garbage in (3, 7, 0x80, 0xFF):
        bad = bytearray(data)
        bad[pos + 16] = garbage
        assert impl.scan_batches(bytes(bad)) == (expected[:1], pos, BAD_HEADER)
    minimum = {0: 14, 1: 22, 2: 49}[magic]
    for length in (minimum - 1, 0, -1, -2 ** 31):
        bad = bytearray(data)
        struct.pack_into(">i", bad, pos + 8, length)
        assert impl.scan_batches(bytes(bad)) == (expected[:1], pos, BAD_HEADER)
    # A declared length reaching past the end is an incomplete tail, not a bad header.
    bad = bytearray(data)
    struct.pack_into(">i", bad, pos + 8, 2 ** 31 - 1)
    assert impl.scan_batches(bytes(bad)) == (expected[:1], pos, TRUNCATED)


def test_minimum_size_entries(impl):
    from kqlite._native.pure import crc32
    v0 = bytearray(struct.pack(">qiIbbii", 5, 14, 0, 0, 0, -1, -1))
    struct.pack_into(">I", v0, 12, crc32(v0[16:]))
    v1 = bytearray(struct.pack(">qiIbbqii", 6, 22, 0, 1, 0, 1234, -1, -1))
    struct.pack_into(">I", v1, 12, crc32(v1[16:]))
    v2 = bytearray(v2_batch(7, 1))
    assert len(v0) == 26 and len(v1) == 34
    data = bytes(v0 + v1 + v2)
    assert impl.scan_batches(data) == ([(0, 5, 5, -1, 26, 0), (26, 6, 6, 1234, 34, 1),
                                        (60, 7, 7, 1000, len(v2), 2)], len(data), OK)


def test_last_offset_outside_int64_is_a_bad_header(impl):
    from kqlite._native.pure import crc32c
    batch = bytearray(v2_batch(0, 3))
    struct.pack_into(">q", batch, 0, 2 ** 63 - 2)      # + lastOffsetDelta 2 overflows
    struct.pack_into(">I", batch, 17, crc32c(batch[21:]))
    assert impl.scan_batches(bytes(batch)) == ([], 0, BAD_HEADER)
    struct.pack_into(">q", batch, 0, 2 ** 63 - 3)
    assert impl.scan_batches(bytes(batch))[0][0][2] == 2 ** 63 - 1


def test_short_tails(impl):
    data, expected = build_log(2, n_entries=2)
    one = expected[0][4]
    for extra in range(1, 17):
        tail = data[one:one + extra]
        assert impl.scan_batches(data[:one] + tail) == (expected[:1], one, TRUNCATED)
    assert impl.scan_batches(b"") == ([], 0, OK)


def test_limits(impl):
    data, expected = build_log(2, n_entries=6)
    for k in range(0, 8):
        stop = expected[k - 1][0] + expected[k - 1][4] if 0 < k <= 6 else (0 if k == 0 else
                                                                           len(data))
        assert impl.scan_batches(data, max_batches=k) == (expected[:k], stop, OK)
    sizes = [e[4] for e in expected]
    biggest = max(sizes)
    assert impl.scan_batches(data, max_size=biggest) == (expected, len(data), OK)
    first_big = sizes.index(biggest)
    assert impl.scan_batches(data, max_size=biggest - 1) == (
        expected[:first_big], expected[first_big][0], BAD_HEADER)
    assert impl.scan_batches(data, max_size=0) == ([], 0, BAD_HEADER)


def test_sub_ranges(impl):
    data, expected = build_log(1, n_entries=5)
    mid = expected[3][0]
    assert impl.scan_batches(data, mid) == (expected[3:], len(data), OK)
    assert impl.scan_batches(data, expected[1][0], mid) == (expected[1:3], mid, OK)
    assert impl.scan_batches(data, 0, mid + 20) == (expected[:3], mid, TRUNCATED)
    assert impl.scan_batches(data, 0, len(data) + 100) == (expected, len(data), OK)
    assert impl.scan_batches(data, len(data)) == ([], len(data), OK)
    assert impl.scan_batches(data, mid, mid) == ([], mid, OK)
    with pytest.raises(ValueError):
        impl.scan_batches(data, -1)


def test_more_entries_than_one_c_call_returns(impl):
    from kqlite._native.pure import crc32
    msg = bytearray(struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -1, -1))
    entries = []
    for i in range(9000):
        struct.pack_into(">q", msg, 0, i)
        struct.pack_into(">I", msg, 12, crc32(msg[16:]))
        entries.append(bytes(msg))
    data = b"".join(entries)
    batches, stop, status = impl.scan_batches(data)
    assert (len(batches), stop, status) == (9000, len(data), OK)
    assert batches[8999] == (8999 * 26, 8999, 8999, -1, 26, 0)
    assert impl.scan_batches(data, max_batches=4097)[0] == batches[:4097]
    bad = bytearray(data)
    bad[5000 * 26 + 20] ^= 1
    assert impl.scan_batches(bytes(bad)) == (batches[:5000], 5000 * 26, CORRUPT_CRC)


def test_buffer_types_and_mmap(impl, tmp_path):
    data, expected = build_log(2, n_entries=5)
    assert impl.scan_batches(bytearray(data)) == (expected, len(data), OK)
    assert impl.scan_batches(memoryview(data)) == (expected, len(data), OK)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + b"\x00" * 5)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        assert impl.scan_batches(m) == (expected, len(data), TRUNCATED)
        m.close()       # BufferError here would mean the scan kept an export alive


@NATIVE
@given(st.binary(max_size=300), st.booleans(), st.integers(0, 40),
       st.one_of(st.none(), st.integers(0, 300)))
def test_garbage_agrees(data, verify, start, max_size):
    results = [impl.scan_batches(data, start, None, verify, None, max_size) for impl in IMPLS]
    assert all(r == results[0] for r in results)


@NATIVE
@given(st.sampled_from([0, 1, 2]), st.data())
def test_mutated_logs_agree(magic, draw):
    data, expected = build_log(magic, n_entries=4)
    bad = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 3))):
        bad[draw.draw(st.integers(0, len(bad) - 1))] = draw.draw(st.integers(0, 255))
    cut = draw.draw(st.integers(0, len(bad)))
    verify = draw.draw(st.booleans())
    max_batches = draw.draw(st.one_of(st.none(), st.integers(0, 12)))
    results = [impl.scan_batches(bytes(bad[:cut]), 0, None, verify, max_batches)
               for impl in IMPLS]
    assert all(r == results[0] for r in results)
    batches, stop, status = results[0]
    assert stop == (batches[-1][0] + batches[-1][4] if batches else 0)
    assert status in (OK, TRUNCATED, CORRUPT_CRC, BAD_HEADER)


def _extent_by_scan(data, from_offset, limit, max_bytes):
    """scan_extent's answer from scan_batches' tuples, the fold _extent_walk makes."""
    batches, stop, status = _native.pure.scan_batches(data, 0, None, False)
    first, total = None, 0
    for pos, _base, last, _ts, size, _magic in batches:
        if last < from_offset:
            continue
        if last >= limit or (first is not None and total + size > max_bytes):
            return _native.EXTENT_DONE, first, total, pos
        first = pos if first is None else first
        total += size
        if total >= max_bytes:
            return _native.EXTENT_DONE, first, total, pos + size
    return status, first, total, stop


@NATIVE
@given(st.sampled_from([0, 1, 2]), st.integers(0, 30), st.integers(0, 40),
       st.integers(-1, 3000), st.integers(0, 3000), st.one_of(st.none(), st.integers(0, 255)))
def test_extent_is_the_fold_of_the_scan(magic, from_offset, limit, max_bytes, cut, flip):
    data, _ = build_log(magic, n_entries=8)
    data = bytearray(data[:cut] if cut < len(data) else data)
    if flip is not None and data:
        data[flip % len(data)] ^= 0x5A
    data = bytes(data)
    want = _extent_by_scan(data, from_offset, limit, max_bytes)
    for impl in IMPLS:
        assert impl.scan_extent(data, 0, len(data), from_offset, limit, max_bytes) == want
