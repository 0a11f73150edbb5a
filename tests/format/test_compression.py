"""Codecs: round trips, interop with kafka-python's codec functions (an independent
implementation), corrupt input, decompression bombs, missing optional packages."""

import builtins
import os

import pytest
from kafka import codec as kcodec

from kqlite.errors import CorruptRecordError, UnsupportedCodecError
from kqlite.format import compression

CODECS = ["gzip", "snappy", "lz4", "zstd"]
PAYLOADS = [b"", b"x", b"hello kafka " * 5000, os.urandom(1 << 20)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=["empty", "one", "text", "random-1MiB"])
def test_round_trip(codec, payload):
    assert compression.decompress(codec, compression.compress(codec, payload)) == payload


THEIRS = {
    "gzip": (kcodec.gzip_encode, kcodec.gzip_decode),
    "snappy": (kcodec.snappy_encode, kcodec.snappy_decode),
    "lz4": (kcodec.lz4_encode, kcodec.lz4_decode),
    "zstd": (kcodec.zstd_encode, kcodec.zstd_decode),
}


@pytest.mark.parametrize("codec", CODECS)
def test_interop_with_kafka_python(codec):
    data = b"page-view user=42 " * 4000
    encode, decode = THEIRS[codec]
    assert compression.decompress(codec, encode(data)) == data
    assert decode(compression.compress(codec, data)) == data


def test_snappy_reads_raw_and_xerial_and_writes_xerial():
    data = b"abc" * 50000
    raw = kcodec.snappy_encode(data, xerial_compatible=False)
    framed = kcodec.snappy_encode(data, xerial_compatible=True)
    assert not raw.startswith(b"\x82SNAPPY\x00") and framed.startswith(b"\x82SNAPPY\x00")
    assert compression.decompress("snappy", raw) == data
    assert compression.decompress("snappy", framed) == data
    ours = compression.compress("snappy", data)
    assert ours.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")


def test_lz4_frame_is_kafka_style():
    frame = compression.compress("lz4", b"x" * 100000)
    assert frame[:4] == b"\x04\x22\x4d\x18"      # LZ4 frame magic
    assert frame[4] & 0x20                        # independent blocks
    assert not frame[4] & 0x08                    # no content size
    assert frame[5] == 0x40                       # 64 KiB maximum block size


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_and_truncated_input(codec):
    good = compression.compress(codec, b"some records " * 1000)
    for bad in (good[: len(good) // 2], b"\x00" * 50, os.urandom(64)):
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, bad)


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_refused(codec):
    bomb = compression.compress(codec, b"\0" * (4 << 20))
    with pytest.raises(CorruptRecordError, match="beyond"):
        compression.decompress(codec, bomb, max_output=1 << 20)


def test_codec_names_and_errors():
    assert compression.codec_id(None) == 0
    assert compression.codec_id("GZIP") == 1
    assert compression.codec_id(4) == 4
    assert compression.codec_id("uncompressed") == 0
    with pytest.raises(UnsupportedCodecError, match="unknown"):
        compression.codec_id("brotli")
    assert set(compression.available_codecs()) == {"none", *CODECS}


@pytest.mark.parametrize("module,codec", [("lz4", "lz4"), ("zstandard", "zstd")])
def test_missing_optional_package(monkeypatch, module, codec):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(UnsupportedCodecError, match=rf"kqlite\[{codec}\]"):
        compression.compress(codec, b"data")
    assert codec not in compression.available_codecs()
