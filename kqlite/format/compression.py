"""Batch compression codecs, keyed by Kafka's codec ids (attribute bits 0-2).

``compress(codec, data)`` writes what Kafka's Java producer writes:
gzip (RFC 1952), snappy in the xerial framing of Java's SnappyOutputStream,
lz4 as an LZ4 frame with independent 64 KiB blocks (Kafka's
KafkaLZ4BlockOutputStream for magic >= 1), zstd as a standard zstd frame.
``decompress(codec, data, max_output)`` reads those plus the variants other
clients write: raw snappy blocks (librdkafka), any valid LZ4 frame, zstd frames
without a content size, several concatenated frames.

Errors: corrupt input raises CorruptRecordError, output beyond ``max_output``
raises CorruptRecordError before it is all allocated (decompression bombs), and
an unknown codec or a missing optional package (lz4, zstandard) raises
UnsupportedCodecError naming the pip extra to install.
"""

import gzip
import struct
import zlib

from ..errors import CorruptRecordError, UnsupportedCodecError
from .constants import (CODEC_GZIP, CODEC_LZ4, CODEC_NAMES, CODEC_NONE, CODEC_SNAPPY,
                        CODEC_ZSTD)

__all__ = ["compress", "decompress", "codec_id", "available_codecs", "DEFAULT_MAX_OUTPUT"]

DEFAULT_MAX_OUTPUT = 256 << 20
_BY_NAME = {name: cid for cid, name in CODEC_NAMES.items()}
_BY_NAME["uncompressed"] = CODEC_NONE

# ON-DISK/WIRE: xerial snappy-java stream header (magic, version 1, compatible version 1).
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_CHUNK = 64 * 1024


def codec_id(codec):
    """Kafka codec id for a name ("gzip"), an id (1) or None (no compression)."""
    if codec is None:
        return CODEC_NONE
    if isinstance(codec, int) and codec in CODEC_NAMES:
        return codec
    if isinstance(codec, str) and codec.lower() in _BY_NAME:
        return _BY_NAME[codec.lower()]
    raise UnsupportedCodecError(f"unknown compression codec {codec!r}; "
                                f"use one of {', '.join(CODEC_NAMES.values())}")


def _optional(module, extra):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise UnsupportedCodecError(
            f"{extra} compression needs the {module.split('.')[0]!r} package: "
            f"pip install 'kqlite[{extra}]'") from None


def available_codecs():
    """Names of the codecs usable in this environment."""
    names = ["none", "gzip", "snappy"]
    for module, name in (("lz4.frame", "lz4"), ("zstandard", "zstd")):
        try:
            _optional(module, name)
            names.append(name)
        except UnsupportedCodecError:
            pass
    return names


# -- compress -------------------------------------------------------------------------------

def compress(codec, data):
    codec = codec_id(codec)
    data = bytes(data)
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == CODEC_SNAPPY:
        import snappy
        out = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = snappy.compress(data[i:i + _XERIAL_BLOCK])
            out.append(struct.pack(">i", len(block)))
            out.append(block)
        return b"".join(out)
    if codec == CODEC_LZ4:
        lz4f = _optional("lz4.frame", "lz4")
        return lz4f.compress(data, block_size=lz4f.BLOCKSIZE_MAX64KB, block_linked=False,
                             content_checksum=False, store_size=False)
    zstd = _optional("zstandard", "zstd")
    return zstd.ZstdCompressor(level=3).compress(data)


# -- decompress -----------------------------------------------------------------------------

def _too_big(codec, max_output):
    return CorruptRecordError(f"{CODEC_NAMES[codec]} data expands beyond "
                              f"{max_output} bytes")


def decompress(codec, data, max_output=DEFAULT_MAX_OUTPUT):
    codec = codec_id(codec)
    if codec == CODEC_NONE:
        return bytes(data)
    data = bytes(data)
    try:
        if codec == CODEC_GZIP:
            return _gunzip(data, max_output)
        if codec == CODEC_SNAPPY:
            return _unsnappy(data, max_output)
        if codec == CODEC_LZ4:
            return _unlz4(data, max_output)
        return _unzstd(data, max_output)
    except (CorruptRecordError, UnsupportedCodecError):
        raise
    except Exception as exc:
        raise CorruptRecordError(f"cannot decompress {CODEC_NAMES[codec]} data: {exc}") \
            from None


def _gunzip(data, max_output):
    out = bytearray()
    while data:
        d = zlib.decompressobj(wbits=31)
        chunk = d.decompress(data, max_output - len(out) + 1)
        out += chunk
        while d.unconsumed_tail and len(out) <= max_output:
            out += d.decompress(d.unconsumed_tail, max_output - len(out) + 1)
        if len(out) > max_output:
            raise _too_big(CODEC_GZIP, max_output)
        if not d.eof:
            raise CorruptRecordError("gzip data is truncated")
        data = d.unused_data  # concatenated gzip members
    return bytes(out)


def _raw_snappy_length(block):
    result = shift = 0
    for i, b in enumerate(block[:5]):
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise CorruptRecordError("snappy block has no valid length preamble")


def _unsnappy(data, max_output):
    import snappy

    def block(raw, budget):
        if _raw_snappy_length(raw) > budget:
            raise _too_big(CODEC_SNAPPY, max_output)
        return snappy.uncompress(raw)

    if not data.startswith(_XERIAL_MAGIC):
        return block(data, max_output)
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    if len(data) < pos:
        raise CorruptRecordError("truncated xerial snappy header")
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(f"xerial snappy block of {size} bytes runs past the end")
        out += block(data[pos:pos + size], max_output - len(out))
        pos += size
    return bytes(out)


def _read_bounded(reader, codec, max_output):
    out = bytearray()
    while True:
        chunk = reader.read(_CHUNK)
        if not chunk:
            return bytes(out)
        out += chunk
        if len(out) > max_output:
            raise _too_big(codec, max_output)


def _unlz4(data, max_output):
    lz4f = _optional("lz4.frame", "lz4")
    import io
    with lz4f.LZ4FrameFile(io.BytesIO(data), "rb") as reader:
        return _read_bounded(reader, CODEC_LZ4, max_output)


def _unzstd(data, max_output):
    zstd = _optional("zstandard", "zstd")
    reader = zstd.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    with reader:
        out = _read_bounded(reader, CODEC_ZSTD, max_output)
    if data and not out and not _is_empty_zstd(zstd, data):
        raise CorruptRecordError("zstd data produced no output")
    return out


def _is_empty_zstd(zstd, data):
    try:
        return zstd.get_frame_parameters(data).content_size in (0, zstd.CONTENTSIZE_UNKNOWN)
    except zstd.ZstdError:
        return False
