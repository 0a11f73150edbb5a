"""Rewriting a v2 batch with fewer records: what log compaction writes.

Kafka's ``MemoryRecords.filterTo`` keeps a batch's base offset, last offset delta,
producer id/epoch/base sequence, partition leader epoch, codec and attributes
when it drops records, so the offsets a batch covers never change; kqlite does
the same. The kept records' bytes are copied verbatim (their offset deltas are
relative to the unchanged base offset).

Setting a *delete horizon* (KIP-534) sets attribute bit 6 and stores the horizon
in ``baseTimestamp``; every record's timestampDelta is re-based on it so that its
timestamp stays the same. A batch whose records are all dropped may be kept as a
record-less header (Kafka's ``writeEmptyHeader``) so its offsets stay covered.
"""

from .. import _native
from . import compression
from .constants import (
    BATCH_OVERHEAD, CODEC_NONE, CONTROL_MASK, DELETE_HORIZON_MASK, TIMESTAMP_CREATE_TIME,
    TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
)
from .header import parse_header

__all__ = ["batch_records", "rebuild_batch", "empty_batch"]


def batch_records(buf, pos=0):
    """``(header, body, rows)`` of the v2 batch at ``pos`` (CRC not checked): ``body`` is
    the uncompressed records section and ``rows`` its (offset, timestamp, key, value,
    headers) tuples with timestamps as stored (baseTimestamp + delta)."""
    header = parse_header(buf, pos)
    body = memoryview(buf)[pos + BATCH_OVERHEAD:pos + header.size]
    if header.compression != CODEC_NONE:
        body = compression.decompress(header.compression, body)
    rows = _native.decode_records(body, header.records_count, header.base_offset,
                                  header.base_timestamp)
    return header, body, rows


def _read_varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _put_varint(out, n):
    n = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF     # zigzag, as Kafka's varlong
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def rebuild_batch(header, body, rows, keep, delete_horizon=None):
    """The batch (bytes) holding only ``rows[i] for i in keep`` (ascending, non-empty).

    ``header``, ``body`` and ``rows`` come from :func:`batch_records`. With
    ``delete_horizon`` the batch gets the delete-horizon bit and that baseTimestamp.
    """
    spans, pos = [], 0
    for _ in range(len(rows)):
        length, start = _read_varint(body, pos)
        spans.append((pos, start, start + length))
        pos = start + length
    raw = bytearray()
    base_ts = header.base_timestamp if delete_horizon is None else delete_horizon
    for i in keep:
        whole, start, end = spans[i]
        if delete_horizon is None:
            raw += body[whole:end]
            continue
        delta, after = _read_varint(body, start + 1)   # attributes byte, then timestampDelta
        rec = bytearray(body[start:start + 1])
        _put_varint(rec, header.base_timestamp + delta - base_ts)
        rec += body[after:end]
        _put_varint(raw, len(rec))
        raw += rec
    attributes = header.attributes | (DELETE_HORIZON_MASK if delete_horizon is not None else 0)
    if header.timestamp_type != TIMESTAMP_CREATE_TIME:
        max_ts = header.max_timestamp                  # LogAppendTime: the append time
    else:
        max_ts = max(rows[i][1] for i in keep)
    return _assemble(header, attributes, base_ts, max_ts, len(keep), bytes(raw))


def empty_batch(header):
    """A record-less batch covering the same offsets (Kafka's writeEmptyHeader): no
    codec, no delete horizon, the timestamp type and the transactional and control bits
    kept, both timestamps the batch's max timestamp."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return _assemble(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _assemble(header, attributes, base_ts, max_ts, count, raw):
    """``header`` with new attributes, timestamps and count over the records ``raw``
    (compressed with the batch's codec), encoded."""
    kept = header._replace(attributes=attributes, base_timestamp=base_ts,
                           max_timestamp=max_ts, records_count=count)
    body = compression.compress(kept.compression, raw) if kept.compression else raw
    return bytes(kept.encode_for(body) + body)
