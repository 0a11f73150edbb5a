"""Codecs: round trips, Kafka's framings, interop with kafka-python's codec functions
(an independent implementation), corrupt input, decompression bombs, missing packages."""

import builtins
import gzip
import os
import struct
import tracemalloc

import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka import codec as kcodec

from kqlite.errors import CorruptRecordError, UnsupportedCodecError
from kqlite.format import compression
from kqlite.format._framing import check_zstd_frames, xxh32

CODECS = ["gzip", "snappy", "lz4", "zstd"]
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
TEXT = b"page-view user=42 path=/index.html " * 3000
MIB_RANDOM = os.urandom(1 << 20)
MIB_TEXT = (TEXT * 10)[: 1 << 20]


@pytest.mark.parametrize("codec", ["none"] + CODECS)
@pytest.mark.parametrize("payload", [b"", b"x", TEXT, MIB_RANDOM, MIB_TEXT],
                         ids=["empty", "one-byte", "text", "random-1MiB", "text-1MiB"])
def test_round_trip(codec, payload):
    packed = compression.compress(codec, payload)
    assert isinstance(packed, bytes)
    assert compression.decompress(codec, packed) == payload
    assert compression.decompress(compression.codec_id(codec), bytearray(packed)) == payload
    assert compression.decompress(codec, memoryview(packed)) == payload


@pytest.mark.parametrize("codec", CODECS)
def test_compress_accepts_any_buffer(codec):
    want = compression.compress(codec, TEXT)
    for data in (bytearray(TEXT), memoryview(TEXT)):
        assert compression.decompress(codec, compression.compress(codec, data)) == TEXT
    assert compression.compress(codec, TEXT) == want    # deterministic output


# -- interop with kafka-python's codec helpers --------------------------------------------------

THEIRS = {
    "gzip": (kcodec.gzip_encode, kcodec.gzip_decode),
    "snappy": (kcodec.snappy_encode, kcodec.snappy_decode),
    "lz4": (kcodec.lz4_encode, kcodec.lz4_decode),
    "zstd": (kcodec.zstd_encode, kcodec.zstd_decode),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("payload", [b"", b"k", TEXT, MIB_RANDOM], ids=["empty", "one", "text",
                                                                       "random-1MiB"])
def test_interop_with_kafka_python(codec, payload):
    encode, decode = THEIRS[codec]
    # kafka-python's readers refuse an empty zstd frame and a bare xerial header (Java's
    # SnappyOutputStream output for no input); a batch never compresses to nothing.
    if payload or codec not in ("zstd", "snappy"):
        assert decode(compression.compress(codec, payload)) == payload
    assert compression.decompress(codec, encode(payload)) == payload


@pytest.mark.parametrize("xerial", [True, False])
def test_snappy_reads_kafka_python_framed_and_raw(xerial):
    framed = kcodec.snappy_encode(MIB_TEXT, xerial_compatible=xerial)
    assert framed.startswith(XERIAL_HEADER) == xerial
    assert compression.decompress("snappy", framed) == MIB_TEXT


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = MIB_RANDOM[:100_000]
    out = compression.compress("snappy", data)
    assert out.startswith(XERIAL_HEADER)
    pos, blocks = len(XERIAL_HEADER), []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        blocks.append(kcodec.snappy_decode(out[pos + 4:pos + 4 + size]))  # raw snappy block
        pos += 4 + size
    assert pos == len(out)
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data
    assert compression.compress("snappy", b"") == XERIAL_HEADER   # like SnappyOutputStream


def test_snappy_concatenated_xerial_streams():
    a, b = compression.compress("snappy", b"first " * 9000), compression.compress("snappy", b"2nd")
    assert compression.decompress("snappy", a + b) == b"first " * 9000 + b"2nd"


def test_lz4_frame_is_what_kafka_writes():
    frame = compression.compress("lz4", MIB_RANDOM[:200_000] + TEXT)
    assert frame[:4] == b"\x04\x22\x4d\x18"     # LZ4 frame magic
    assert frame[4] == 0x60                       # version 01, independent blocks, nothing else
    assert frame[5] == 0x40                       # 64 KiB maximum block size
    xxhash = pytest.importorskip("xxhash")        # an independent XXH32
    assert frame[6] == (xxhash.xxh32(frame[4:6]).intdigest() >> 8) & 0xFF   # modern HC
    assert frame[6] != (xxhash.xxh32(frame[0:6]).intdigest() >> 8) & 0xFF  # not KAFKA-3160's
    assert frame.endswith(b"\x00\x00\x00\x00")    # end mark, no content checksum
    pos, sizes = 7, []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        if word == 0:
            break
        sizes.append(word & 0x7FFFFFFF)
        pos += 4 + sizes[-1]
    assert pos + 4 == len(frame) and max(sizes) <= 65536 and len(sizes) >= 4


def test_lz4_reads_any_valid_frame():
    data = MIB_TEXT[:300_000]
    for kwargs in ({}, {"store_size": True, "content_checksum": True, "block_checksum": True},
                   {"block_linked": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
                   {"compression_level": 12}):
        assert compression.decompress("lz4", lz4.frame.compress(data, **kwargs)) == data
    two = lz4.frame.compress(b"one ") + compression.compress("lz4", b"two")
    assert compression.decompress("lz4", two) == b"one two"


def test_lz4_magic0_ignores_the_kafka_3160_header_checksum():
    pytest.importorskip("xxhash", reason="kafka-python needs xxhash for the old lz4 framing")
    old = kcodec.lz4_encode_old_kafka(TEXT)
    assert compression.decompress("lz4", old, magic=0) == TEXT
    with pytest.raises(CorruptRecordError):       # magic >= 1 readers check the checksum
        compression.decompress("lz4", old)
    good = compression.compress("lz4", TEXT)      # a correct checksum is fine under magic 0 too
    assert compression.decompress("lz4", good, magic=0) == TEXT


def test_zstd_frames_without_content_size_and_several_frames():
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(MIB_TEXT)
    assert zstandard.get_frame_parameters(no_size).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert compression.decompress("zstd", no_size) == MIB_TEXT
    streamed = zstandard.ZstdCompressor(write_checksum=True).compressobj()   # like Java's stream
    framed = streamed.compress(TEXT) + streamed.flush()
    assert compression.decompress("zstd", framed) == TEXT
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    many = framed + skippable + no_size + compression.compress("zstd", b"")
    assert compression.decompress("zstd", many) == TEXT + MIB_TEXT
    with pytest.raises(CorruptRecordError):
        compression.decompress("zstd", skippable[:-1])


def test_gzip_concatenated_members():
    data = gzip.compress(b"one ") + compression.compress("gzip", b"two")
    assert compression.decompress("gzip", data) == b"one two"


# -- corrupt input ---------------------------------------------------------------------------

def broken_variants(codec):
    good = compression.compress(codec, TEXT)
    yield "empty", b""
    yield "partial-header", good[:12]
    yield "half", good[: len(good) // 2]
    yield "minus-one", good[:-1]
    yield "trailing-garbage", good + b"\x01garbage"
    yield "zeros", b"\x00" * 64
    yield "random", os.urandom(256)
    yield "bad-magic", b"\x00" + good[1:] if codec != "snappy" else b"\x82SNAPPZ" + good[7:]


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_and_truncated_input_raises_corrupt_record(codec):
    for label, bad in broken_variants(codec):
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, bad)
            pytest.fail(f"{codec} {label} decoded")


def test_gzip_checksum_catches_a_flipped_byte():
    data = bytearray(compression.compress("gzip", TEXT))
    data[len(data) // 2] ^= 0x10
    with pytest.raises(CorruptRecordError):
        compression.decompress("gzip", bytes(data))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CODECS), st.binary(max_size=3000), st.data())
def test_damaged_data_decodes_or_raises_corrupt_record(codec, payload, data):
    """Any damage ends in bytes or CorruptRecordError, never another exception."""
    packed = bytearray(compression.compress(codec, payload))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(packed) - 1))
        packed[i] = data.draw(st.integers(0, 255))
    packed = packed[: data.draw(st.integers(0, len(packed)))]
    try:
        out = compression.decompress(codec, bytes(packed), max_output=1 << 20)
    except CorruptRecordError:
        return
    assert isinstance(out, bytes) and len(out) <= 1 << 20


# -- max_output --------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["none"] + CODECS)
def test_max_output_boundary(codec):
    packed = compression.compress(codec, TEXT)
    assert compression.decompress(codec, packed, max_output=len(TEXT)) == TEXT
    with pytest.raises(CorruptRecordError, match="beyond max_output"):
        compression.decompress(codec, packed, max_output=len(TEXT) - 1)


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_refused_without_materialising_it(codec):
    bomb = compression.compress(codec, bytes(48 << 20))
    assert len(bomb) < 3 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="beyond"):
            compression.decompress(codec, bomb, max_output=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + (8 << 20)


def test_raw_snappy_bomb_checked_against_its_declared_length():
    bomb = kcodec.snappy_encode(bytes(8 << 20), xerial_compatible=False)
    with pytest.raises(CorruptRecordError, match="beyond"):
        compression.decompress("snappy", bomb, max_output=1 << 20)


# -- codec names, errors, missing packages ----------------------------------------------------

def test_codec_id():
    assert compression.codec_id(None) == 0
    assert [compression.codec_id(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == \
        [0, 1, 2, 3, 4]
    assert compression.codec_id("GZIP") == 1 and compression.codec_id("uncompressed") == 0
    assert [compression.codec_id(i) for i in range(5)] == [0, 1, 2, 3, 4]
    for bad in ("brotli", 5, -1, True, 1.0, b"gzip"):
        with pytest.raises(UnsupportedCodecError, match="unknown compression codec"):
            compression.codec_id(bad)
    with pytest.raises(UnsupportedCodecError):
        compression.decompress(7, b"data")


def test_bad_arguments():
    with pytest.raises(TypeError):
        compression.decompress("gzip", 123)
    with pytest.raises(TypeError):
        compression.compress("gzip", "text")
    with pytest.raises(ValueError):
        compression.decompress("gzip", compression.compress("gzip", b"x"), max_output=-1)


def test_available_codecs():
    assert compression.available_codecs() == ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("module,codec,message", [
    ("lz4", "lz4", "lz4 compression needs the 'lz4' package: pip install kqlite[lz4]"),
    ("zstandard", "zstd", "zstd compression needs the 'zstandard' package: pip install "
                          "kqlite[zstd]"),
    ("snappy", "snappy", "snappy compression needs the 'snappy' package: pip install "
                         "python-snappy"),
])
def test_missing_optional_package(monkeypatch, module, codec, message):
    packed = compression.compress(codec, b"data")
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    for call in (lambda: compression.compress(codec, b"data"),
                 lambda: compression.decompress(codec, packed)):
        with pytest.raises(UnsupportedCodecError) as err:
            call()
        assert str(err.value) == message
    assert codec not in compression.available_codecs()
    assert compression.decompress("gzip", compression.compress("gzip", b"ok")) == b"ok"


# -- frame helpers -----------------------------------------------------------------------------

def test_xxh32_matches_the_reference_implementation():
    xxhash = pytest.importorskip("xxhash")
    for n in list(range(40)) + [255, 1000]:
        data = os.urandom(n)
        for seed in (0, 1, 0xFFFFFFFF):
            assert xxh32(data, seed) == xxhash.xxh32(data, seed=seed).intdigest()


def test_zstd_frame_walk():
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(MIB_TEXT[:400_000])
    check_zstd_frames(frame + frame)
    for cut in (1, 4, 5, 10, len(frame) // 2, len(frame) - 4, len(frame) - 1):
        with pytest.raises(CorruptRecordError):
            check_zstd_frames(frame[:cut])
