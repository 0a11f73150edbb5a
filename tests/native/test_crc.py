"""CRC-32C and CRC-32: known vectors, outside oracles, continuation, buffer types."""

import mmap
import os
import platform
import zlib
from array import array

import crcmod.predefined
import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
crcmod_c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
crc32c_pkg = pytest.importorskip("crc32c")

# RFC 3720 (iSCSI) appendix B.4 vectors, plus the customary check value.
RFC3720 = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"123456789", 0xE3069283),
    (b"", 0),
]


@pytest.mark.parametrize("data,expected", RFC3720)
def test_crc32c_known_vectors(impl, data, expected):
    assert impl.crc32c(data) == expected


def test_crc32_known_vectors(impl):
    assert impl.crc32(b"123456789") == 0xCBF43926
    assert impl.crc32(b"") == 0


# Lengths around the 3-way stream blocks (3 x 256 and 3 x 4096 bytes) of the C path.
SIZES = [1, 7, 8, 9, 63, 767, 768, 769, 1535, 1536, 4096, 12287, 12288, 12289, 13056,
         3 * 4096 + 3 * 256 + 7, 65536, 100_003]


@pytest.mark.parametrize("size", SIZES)
def test_crc_lengths_and_alignments_against_oracles(impl, size):
    data = os.urandom(size + 8)
    for shift in (0, 1, 3, 7):
        chunk = memoryview(data)[shift:shift + size]
        expected = crc32c_pkg.crc32c(chunk)
        assert expected == crcmod_c(bytes(chunk))
        assert impl.crc32c(chunk) == expected
        assert impl.crc32c(bytes(chunk)) == expected
        assert impl.crc32(chunk) == zlib.crc32(chunk)


def test_crc32c_large_buffer(impl):
    data = os.urandom(16 << 20)
    assert impl.crc32c(data) == crc32c_pkg.crc32c(data)


@NATIVE
@given(st.binary(max_size=40_000), st.integers(0, 40_000), st.integers(0, 2 ** 32 - 1))
def test_crc_continuation_and_agreement(data, cut, value):
    a, b = data[:cut], data[cut:]
    for impl in IMPLS:
        assert impl.crc32c(b, impl.crc32c(a)) == crcmod_c(data)
        assert impl.crc32(b, impl.crc32(a)) == zlib.crc32(data)
        # `value` is exactly crcmod's / zlib's continuation argument.
        assert impl.crc32c(data, value) == crcmod_c(data, value)
        assert impl.crc32(data, value) == zlib.crc32(data, value)


def test_crc_buffer_types(impl, tmp_path):
    raw = os.urandom(5000)
    expected = crcmod_c(raw)
    assert impl.crc32c(bytearray(raw)) == expected
    assert impl.crc32c(memoryview(raw)) == expected
    assert impl.crc32c(memoryview(bytearray(raw))[10:]) == crcmod_c(raw[10:])
    words = array("q", range(100))
    assert impl.crc32c(words) == crcmod_c(words.tobytes())
    assert impl.crc32c(memoryview(words)) == crcmod_c(words.tobytes())
    assert impl.crc32(words) == zlib.crc32(words.tobytes())
    path = tmp_path / "seg"
    path.write_bytes(raw)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert impl.crc32c(m) == expected
        view = memoryview(m)
        assert impl.crc32c(view[100:4000]) == crcmod_c(raw[100:4000])
        view.release()
    # The mmap closed above: no buffer export was left behind by the call.


def test_crc_rejects_text(impl):
    with pytest.raises(TypeError):
        impl.crc32c("not bytes")
    with pytest.raises(TypeError):
        impl.crc32("not bytes")


@NATIVE
@given(st.binary(max_size=20_000), st.integers(0, 2 ** 32 - 1))
def test_portable_c_path_matches(data, value):
    if _native.c is None:
        return
    assert _native.c.crc32c_portable(data, value) == crcmod_c(data, value)


def test_hardware_crc_used_when_available(c_impl):
    if platform.machine() not in ("x86_64", "AMD64"):
        assert not c_impl.HARDWARE_CRC
        return
    with open("/proc/cpuinfo") as f:
        has_sse42 = "sse4_2" in f.read()
    assert c_impl.HARDWARE_CRC == has_sse42
