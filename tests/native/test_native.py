"""C helpers against their pure-Python twins, and both against outside oracles.

hypothesis generates inputs; every function must give identical results (or
identical error types) in both implementations.
"""

import os
import subprocess
import sys
import zlib

import crcmod.predefined
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kqlite import _native
from kqlite.errors import CorruptRecordError

IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
crcmod_c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
fast = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

needs_c = pytest.mark.skipif(_native.c is None, reason="C helpers not built")


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_crc_known_vectors(impl):
    assert impl.crc32c(b"123456789") == 0xE3069283
    assert impl.crc32c(b"") == 0
    assert impl.crc32(b"123456789") == 0xCBF43926


@pytest.mark.parametrize("size", [0, 1, 7, 8, 4095, 3 * 4096 - 1, 3 * 4096, 3 * 4096 + 5,
                                  100_000, 1 << 20])
@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_crc_sizes_and_alignments(impl, size):
    data = os.urandom(size + 8)
    for shift in (0, 3):
        chunk = memoryview(data)[shift:shift + size]
        assert impl.crc32c(chunk) == crcmod_c(bytes(chunk))
        assert impl.crc32(chunk) == zlib.crc32(chunk)


@fast
@given(st.binary(max_size=20_000), st.binary(max_size=300))
def test_crc_continuation_and_agreement(a, b):
    for impl in IMPLS:
        assert impl.crc32c(b, impl.crc32c(a)) == crcmod_c(a + b)
        assert impl.crc32(b, impl.crc32(a)) == zlib.crc32(a + b)


def test_crc32c_matches_crc32c_package():
    crc32c = pytest.importorskip("crc32c")
    data = os.urandom(1 << 16)
    for impl in IMPLS:
        assert impl.crc32c(data) == crc32c.crc32c(data)


headers_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
                      max_size=3)
record_st = st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                      st.one_of(st.none(), st.binary(max_size=200)),
                      st.integers(-2 ** 40, 2 ** 40), headers_st)


@fast
@given(st.lists(record_st, min_size=1, max_size=30), st.integers(0, 2 ** 40),
       st.integers(0, 2 ** 41))
def test_records_encode_decode_agree(records, base_offset, base_ts):
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    deltas = [r[2] for r in records]
    headers = [r[3] for r in records]
    encoded = {impl.encode_records(values, keys, deltas, headers) for impl in IMPLS}
    assert len(encoded) == 1
    data = encoded.pop()
    expected = [(base_offset + i, base_ts + d, k, v, tuple(h))
                for i, (k, v, d, h) in enumerate(records)]
    for impl in IMPLS:
        assert impl.decode_records(data, len(records), base_offset, base_ts) == expected


@fast
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=50))
def test_values_fast_path_agrees(values):
    outs = {impl.encode_records(values) for impl in IMPLS}
    assert len(outs) == 1
    data = outs.pop()
    for impl in IMPLS:
        assert [r[3] for r in impl.decode_records(data, len(values))] == values


def _decode_result(impl, data, count):
    try:
        return ("ok", impl.decode_records(data, count))
    except CorruptRecordError:
        return ("corrupt", None)


@fast
@given(st.binary(max_size=400), st.integers(0, 20))
def test_decode_garbage_never_crashes(data, count):
    results = {_decode_result(impl, data, count)[0] for impl in IMPLS}
    assert len(results) == 1


@fast
@given(st.lists(record_st, min_size=1, max_size=10), st.data())
def test_decode_truncated_and_flipped(records, data):
    body = _native.pure.encode_records([r[1] for r in records], [r[0] for r in records],
                                       [r[2] for r in records], [r[3] for r in records])
    cut = data.draw(st.integers(0, len(body) - 1))
    for impl in IMPLS:
        with pytest.raises(CorruptRecordError):
            impl.decode_records(body[:cut], len(records))
    pos = data.draw(st.integers(0, len(body) - 1))
    flipped = bytearray(body)
    flipped[pos] ^= data.draw(st.integers(1, 255))
    outcomes = [_decode_result(impl, bytes(flipped), len(records)) for impl in IMPLS]
    assert all(o == outcomes[0] for o in outcomes)


def test_decode_rejects_huge_declared_lengths():
    # One record declaring a 2**40-byte value: must fail fast, not allocate.
    body = bytearray([0, 0, 0, 1])  # attrs, ts, offset delta, null key
    z = (2 ** 40) << 1
    while z > 0x7F:
        body.append((z & 0x7F) | 0x80)
        z >>= 7
    body.append(z)
    record = bytes([len(body) << 1]) + bytes(body)
    for impl in IMPLS:
        with pytest.raises(CorruptRecordError):
            impl.decode_records(record, 1)
        with pytest.raises(CorruptRecordError):
            impl.decode_records(b"", 10 ** 12)


def _kafka_python_batches(n_batches, codec=0, magic=2):
    from kafka.record.memory_records import MemoryRecordsBuilder
    out = bytearray()
    offset = 0
    for b in range(n_batches):
        builder = MemoryRecordsBuilder(magic=magic, compression_type=codec, batch_size=1 << 20,
                                       offset=offset)
        for i in range(b % 4 + 1):
            builder.append(timestamp=1000 + offset, key=b"k%d" % i, value=b"v" * (i * 13),
                           headers=[] if magic < 2 else [("h", b"x")])
            offset += 1
        builder.close()
        out += builder.buffer()
    return bytes(out), offset


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_scan_kafka_python_batches(impl, magic):
    data, n = _kafka_python_batches(12, magic=magic)
    batches, stop, status = impl.scan_batches(data)
    assert status == 0 and stop == len(data)
    assert len(batches) == (12 if magic == 2 else n)
    assert batches[-1][2] == n - 1
    assert all(b[5] == magic for b in batches)
    assert batches == _native.pure.scan_batches(data)[0]
    # Truncated tail.
    batches2, stop2, status2 = impl.scan_batches(data[:-5])
    assert status2 == 1 and batches2 == batches[:-1] and stop2 == batches[-1][0]
    # CRC flip in the payload of the third entry.
    bad = bytearray(data)
    bad[batches[2][0] + batches[2][4] - 1] ^= 1
    b3, stop3, status3 = impl.scan_batches(bytes(bad))
    assert status3 == 2 and stop3 == batches[2][0] and len(b3) == 2
    assert impl.scan_batches(bytes(bad), verify_crc=False)[2] == 0
    # Unknown magic.
    bad = bytearray(data)
    bad[batches[1][0] + 16] = 7
    assert impl.scan_batches(bytes(bad))[1:] == (batches[1][0], 3)
    # max_batches and max_size.
    assert len(impl.scan_batches(data, max_batches=3)[0]) == 3
    assert impl.scan_batches(data, max_size=10)[2] == 3


@fast
@given(st.binary(max_size=300), st.booleans())
def test_scan_garbage_agrees(data, verify):
    results = [impl.scan_batches(data, 0, None, verify) for impl in IMPLS]
    assert all(r == results[0] for r in results)


@fast
@given(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), max_size=200), st.integers(-2 ** 32, 2 ** 32),
       st.sampled_from([8, 12]))
def test_index_search_matches_bisect(keys, target, entry_size):
    import bisect
    import struct
    keys.sort()
    fmt = ">ii" if entry_size == 8 else ">qi"
    buf = b"".join(struct.pack(fmt, k, 0) for k in keys)
    expected = bisect.bisect_right(keys, target) - 1
    for impl in IMPLS:
        assert impl.index_search(buf, len(keys), entry_size, target) == expected


def test_pure_python_switch():
    code = "import kqlite._native as n; print(n.IMPLEMENTATION)"
    env = dict(os.environ, KQLITE_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "python"
    env["KQLITE_PURE_PYTHON"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == ("c" if _native.c is not None else "python")


@needs_c
def test_c_build_uses_hardware_crc_when_available():
    with open("/proc/cpuinfo") as f:
        has_sse42 = "sse4_2" in f.read()
    assert _native.c.HARDWARE_CRC == has_sse42
