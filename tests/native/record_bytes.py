"""Hand-made record bytes for the record codec and walker tests (tests/native), and log
entries for the batch-header summary tests (tests/native, tests/storage)."""

import struct

# Smallest legal length field of a log entry per magic (csrc/kq_internal.h).
MIN_LENGTH = {0: 14, 1: 22, 2: 49}


def zigzag(n, width=64):
    """Kafka's zigzag varint of ``n`` (a ``width``-bit signed value)."""
    z = ((n << 1) ^ (n >> (width - 1))) & ((1 << width) - 1)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(body):
    """A record: its zigzag length, then the body bytes."""
    return zigzag(len(body)) + body


def entry(magic, base, extra, delta, timestamp):
    """A log entry whose header says what the summary reads (the rest is filler: no
    CRC is checked)."""
    length = MIN_LENGTH[magic] + extra
    out = bytearray(length + 12)
    struct.pack_into(">qi", out, 0, base, length)
    out[16] = magic
    if magic == 2:
        struct.pack_into(">i", out, 23, delta)
        struct.pack_into(">q", out, 35, timestamp)
    elif magic == 1:
        struct.pack_into(">q", out, 18, timestamp)
    return bytes(out)
