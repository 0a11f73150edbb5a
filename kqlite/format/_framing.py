"""Frame-structure helpers for compression.py: what the codec libraries do not expose.

``lz4_repair_header_checksum(data) -> bytes`` recomputes an LZ4 frame's header
checksum (for Kafka's magic-0 lz4, see compression.py); ``xxh32(data, seed=0)``
is the XXH32 hash that checksum uses; ``check_zstd_frames(data)`` walks zstd
frame and block headers (RFC 8878) and raises CorruptRecordError unless the
data is a sequence of complete frames. Pure byte parsing, no decompression.
"""

import struct

from ..errors import CorruptRecordError

__all__ = ["lz4_repair_header_checksum", "xxh32", "check_zstd_frames"]

# ON-DISK/WIRE: LZ4 frame magic (little-endian 0x184D2204) and zstd frame magics.
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50    # skippable frames: low 4 bits are free


def lz4_repair_header_checksum(data):
    """``data`` with the frame-header checksum (HC) byte recomputed.

    Kafka 0.8/0.9 hashed the magic number into HC (KAFKA-3160), so Kafka reads
    magic-0 lz4 without checking HC; recomputing it lets a standard decoder do the same.
    """
    if len(data) < 7 or not data.startswith(_LZ4_MAGIC):
        return data     # not an LZ4 frame: let the decoder report it
    flg = data[4]
    hc_at = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= hc_at:
        raise CorruptRecordError("truncated lz4 frame header")
    hc = (xxh32(data[4:hc_at]) >> 8) & 0xFF
    return data[:hc_at] + bytes((hc,)) + data[hc_at + 1:]


_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data, seed=0):
    """XXH32 (the LZ4 frame format's checksum); used here only on a few header bytes."""
    n, i = len(data), 0
    if n >= 16:
        acc = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while i + 16 <= n:
            for lane in range(4):
                word = int.from_bytes(data[i:i + 4], "little")
                acc[lane] = _rotl((acc[lane] + word * _P2) & _M32, 13) * _P1 & _M32
                i += 4
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18))
    else:
        h = seed + _P5
    h = (h + n) & _M32
    while i + 4 <= n:
        h = _rotl((h + int.from_bytes(data[i:i + 4], "little") * _P3) & _M32, 17) * _P4 & _M32
        i += 4
    while i < n:
        h = _rotl((h + data[i] * _P5) & _M32, 11) * _P1 & _M32
        i += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


def check_zstd_frames(data):
    """Raise CorruptRecordError unless ``data`` is a sequence of complete zstd frames (RFC 8878)."""
    pos, end = 0, len(data)

    def need(n):
        if pos + n > end:
            raise CorruptRecordError("zstd data is truncated")

    while pos < end:
        need(4)
        (magic,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            need(4)
            pos += 4 + struct.unpack_from("<I", data, pos)[0]
            need(0)
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"not a zstd frame (magic {magic:#010x})")
        need(1)
        descriptor = data[pos]
        single_segment = descriptor & 0x20
        pos += 1 + (0 if single_segment else 1)                     # window descriptor
        pos += (0, 1, 2, 4)[descriptor & 0x03]                      # dictionary id
        pos += ((1 if single_segment else 0), 2, 4, 8)[descriptor >> 6]   # content size
        while True:
            need(3)
            header = int.from_bytes(data[pos:pos + 3], "little")
            pos += 3
            block_type = (header >> 1) & 0x03
            if block_type == 3:
                raise CorruptRecordError("zstd block of reserved type")
            pos += 1 if block_type == 1 else header >> 3              # RLE blocks store 1 byte
            need(0)
            if header & 1:
                break
        if descriptor & 0x04:
            pos += 4                                                # content checksum
            need(0)
