"""Hand-made record bytes for the record codec and walker tests (tests/native)."""


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
