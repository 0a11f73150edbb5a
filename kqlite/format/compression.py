"""Batch compression codecs, keyed by Kafka's codec ids (attribute bits 0-2).

``compress(codec, data) -> bytes`` writes what Kafka's Java producer writes:
gzip (RFC 1952); snappy in snappy-java's xerial framing (16-byte header, then
``[int32 length][raw snappy block]`` per 32 KiB of input, as SnappyOutputStream);
lz4 as one LZ4 frame with independent 64 KiB blocks, no content size, no
checksums and the correct header checksum (Kafka's lz4 output for magic >= 1);
zstd as one standard zstd frame.

``decompress(codec, data, max_output=DEFAULT_MAX_OUTPUT, magic=None) -> bytes``
also reads what other writers produce: raw (unframed) snappy as librdkafka
writes it, concatenated xerial streams, any valid LZ4 frame (or several),
concatenated gzip members, zstd frames without a content size, several zstd
frames and skippable frames. ``magic=0`` reproduces Kafka's reader for message
format v0, which ignores the LZ4 frame-header checksum because Kafka 0.8/0.9
computed it wrongly (KAFKA-3160).

``codec`` is an id (0-4), a name ("none", "uncompressed", "gzip", "snappy",
"lz4", "zstd", any case) or None; ``codec_id`` does that mapping.

Raises: CorruptRecordError for data that does not decode (including empty,
truncated and trailing-garbage input) and for output that would exceed
``max_output`` bytes, detected while streaming, before the excess is
allocated; UnsupportedCodecError for an unknown codec or a missing optional
package (lz4, zstandard, python-snappy), saying what to pip install; TypeError for non-bytes data.
"""

import gzip
import struct
import zlib

from ..errors import CorruptRecordError, UnsupportedCodecError
from ._framing import check_zstd_frames, lz4_repair_header_checksum
from .constants import (CODEC_GZIP, CODEC_LZ4, CODEC_NAMES, CODEC_NONE, CODEC_SNAPPY,
                        CODEC_ZSTD, MAGIC_V0)

__all__ = ["compress", "decompress", "codec_id", "available_codecs", "DEFAULT_MAX_OUTPUT"]

DEFAULT_MAX_OUTPUT = 256 << 20
_STEP = 1 << 20     # output produced per streaming step while checking max_output

_BY_NAME = {name: cid for cid, name in CODEC_NAMES.items()}
_BY_NAME["uncompressed"] = CODEC_NONE   # Kafka's compression.type spelling

# ON-DISK/WIRE: snappy-java's SnappyCodec header: magic, version 1, compatible version 1.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024   # SnappyOutputStream's default block size


def codec_id(codec):
    """Kafka codec id for a name ("gzip"), an id (1) or None (no compression)."""
    if codec is None:
        return CODEC_NONE
    if isinstance(codec, int) and not isinstance(codec, bool) and codec in CODEC_NAMES:
        return codec
    if isinstance(codec, str) and codec.lower() in _BY_NAME:
        return _BY_NAME[codec.lower()]
    raise UnsupportedCodecError(f"unknown compression codec {codec!r}; "
                                f"use one of {', '.join(CODEC_NAMES.values())}")


def _optional(module, codec, install):
    # Imported on first use so that `import kqlite` works without the codec packages.
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise UnsupportedCodecError(
            f"{codec} compression needs the {module.split('.')[0]!r} package: "
            f"pip install {install}") from None


def _snappy():
    return _optional("snappy", "snappy", "python-snappy")   # a core dependency of kqlite


def _lz4():
    return _optional("lz4.frame", "lz4", "kqlite[lz4]")


def _zstd():
    return _optional("zstandard", "zstd", "kqlite[zstd]")


def available_codecs():
    """Names of the codecs usable in this environment, in codec-id order."""
    names = ["none", "gzip"]
    for name, load in (("snappy", _snappy), ("lz4", _lz4), ("zstd", _zstd)):
        try:
            load()
        except UnsupportedCodecError:
            continue
        names.append(name)
    return names


def _as_bytes(data):
    # memoryview() rejects ints, which bytes() would silently turn into zero bytes.
    return data if type(data) is bytes else bytes(memoryview(data))


# -- compress -------------------------------------------------------------------------------

def compress(codec, data):
    """``data`` compressed with ``codec`` in the form Kafka's Java producer writes."""
    codec = codec_id(codec)
    data = _as_bytes(data)
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        # mtime=0 keeps output deterministic; level 6 is Java's Deflater default.
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == CODEC_SNAPPY:
        raw = _snappy().compress
        out = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = raw(data[i:i + _XERIAL_BLOCK])
            out.append(struct.pack(">i", len(block)))
            out.append(block)
        return b"".join(out)
    if codec == CODEC_LZ4:
        lz4f = _lz4()
        # Java's reader (KafkaLZ4BlockInputStream) rejects dependent blocks.
        return lz4f.compress(data, block_size=lz4f.BLOCKSIZE_MAX64KB, block_linked=False,
                             block_checksum=False, content_checksum=False, store_size=False)
    return _zstd().ZstdCompressor(level=3).compress(data)


# -- decompress -----------------------------------------------------------------------------

def decompress(codec, data, max_output=DEFAULT_MAX_OUTPUT, magic=None):
    """The bytes ``data`` decompresses to; see the module docstring for what is accepted."""
    codec = codec_id(codec)
    data = _as_bytes(data)
    if not isinstance(max_output, int) or max_output < 0:
        raise ValueError(f"max_output must be a non-negative int, not {max_output!r}")
    name = CODEC_NAMES[codec]
    if codec == CODEC_NONE:
        if len(data) > max_output:
            raise _too_big(name, max_output)
        return data
    if not data:
        raise CorruptRecordError(f"empty {name} data")
    # Load the package outside the try below so a missing one is not reported as corruption.
    module = {CODEC_GZIP: None, CODEC_SNAPPY: _snappy, CODEC_LZ4: _lz4,
              CODEC_ZSTD: _zstd}[codec]
    module = module() if module else None
    try:
        if codec == CODEC_GZIP:
            return _gunzip(data, max_output)
        if codec == CODEC_SNAPPY:
            return _unsnappy(module, data, max_output)
        if codec == CODEC_LZ4:
            if magic == MAGIC_V0:
                data = lz4_repair_header_checksum(data)
            return _unlz4(module, data, max_output)
        return _unzstd(module, data, max_output)
    except (CorruptRecordError, MemoryError):
        raise
    except Exception as exc:   # each library has its own error types; all mean bad input here
        raise CorruptRecordError(f"cannot decompress {name} data: {exc}") from None


def _too_big(name, max_output):
    return CorruptRecordError(f"{name} data expands beyond max_output={max_output} bytes")


def _gunzip(data, max_output):
    out = bytearray()
    while True:
        d = zlib.decompressobj(wbits=31)
        pending = data
        while True:
            out += d.decompress(pending, max_output - len(out) + 1)
            if len(out) > max_output:
                raise _too_big("gzip", max_output)
            pending = d.unconsumed_tail
            if d.eof or not pending:
                break
        if not d.eof:
            raise CorruptRecordError("gzip data is truncated")
        data = d.unused_data
        if not data:
            return bytes(out)
        # More bytes: RFC 1952 allows concatenated members; anything else fails in zlib.


def _snappy_length(block):
    # The raw snappy preamble: uncompressed length as a little-endian base-128 varint.
    result = shift = 0
    for b in block[:5]:
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise CorruptRecordError("snappy block has no valid length preamble")


def _unsnappy(snappy, data, max_output):
    def block(raw, budget):
        # Checking the declared length first keeps a bomb from being allocated at all.
        if _snappy_length(raw) > budget:
            raise _too_big("snappy", max_output)
        return snappy.uncompress(raw)

    if not data.startswith(_XERIAL_MAGIC):
        return block(data, max_output)
    out = bytearray()
    pos, end = 0, len(data)
    while pos < end:
        if data.startswith(_XERIAL_MAGIC, pos):
            # A (concatenated) xerial stream header; snappy-java reads these mid-stream too.
            if pos + len(_XERIAL_HEADER) > end:
                raise CorruptRecordError("truncated xerial snappy header")
            pos += len(_XERIAL_HEADER)
            continue
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError(f"xerial snappy block of {size} bytes runs past the end")
        out += block(data[pos:pos + size], max_output - len(out))
        pos += size
    return bytes(out)


def _unlz4(lz4f, data, max_output):
    out = bytearray()
    while data:
        d = lz4f.LZ4FrameDecompressor()
        chunk = d.decompress(data, max_length=min(_STEP, max_output - len(out) + 1))
        while True:
            out += chunk
            if len(out) > max_output:
                raise _too_big("lz4", max_output)
            if d.eof or d.needs_input:
                break
            chunk = d.decompress(b"", max_length=min(_STEP, max_output - len(out) + 1))
            if not chunk and not d.eof:
                break   # no progress without more input: reported as truncation below
        if not d.eof:
            raise CorruptRecordError("lz4 frame is truncated")
        data = d.unused_data or b""   # the frame format allows concatenated frames
    return bytes(out)


def _unzstd(zstd, data, max_output):
    # zstandard's stream reader bounds the output but ends quietly on a truncated
    # frame, so the frame structure is walked first to refuse incomplete input.
    check_zstd_frames(data)
    out = bytearray()
    with zstd.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        while True:
            chunk = reader.read(_STEP)
            if not chunk:
                return bytes(out)
            out += chunk
            if len(out) > max_output:
                raise _too_big("zstd", max_output)
