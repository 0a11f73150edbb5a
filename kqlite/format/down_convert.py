"""Down-conversion: record batches rewritten in the legacy message format an old Fetch
version understands (Kafka's RecordsUtil.downConvert).

Fetch v0-1 readers know only magic 0 messages, v2-3 readers magic 0 and 1; kqlite
stores RecordBatch v2, so a broker answering them converts, as Kafka 3.9 does:

- an uncompressed batch becomes one message per record, each with its own absolute
  offset; records below the fetch offset are dropped (some librdkafka versions rely on
  it when a fetch starts inside a batch);
- a compressed batch becomes one compressed wrapper message with the same codec whose
  value is the inner message set: under magic 1 the inner offsets are relative (0, 1,
  ...) and the wrapper's offset is the absolute offset of the last record; under magic 0
  the inner offsets are absolute. The wrapper's timestamp is the batch's max timestamp;
  every record of the batch is kept (the reader skips those below its offset);
- magic 1 keeps timestamps and the LogAppendTime attribute (LogAppendTime messages all
  carry the batch's append time); magic 0 has neither; headers are dropped (no legacy
  format has them);
- control batches are skipped; zstd cannot be expressed in a legacy message:
  UnsupportedCodecError (the broker answers UNSUPPORTED_COMPRESSION_TYPE);
- entries already at or below the target magic are copied unchanged; a magic 1 entry
  converted to magic 0 is re-encoded like an uncompressed batch (or wrapper).

lz4 under magic 0 is written with the frame-header checksum Kafka 0.8/0.9 computed (over
the magic number too, KAFKA-3160), which is what readers of that format expect.
"""

import struct

from .._native import crc32
from ..errors import UnsupportedCodecError
from . import compression
from ._framing import xxh32
from .batch import decode_records
from .constants import (CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, LEGACY_CODEC_MASK,
                        LEGACY_TIMESTAMP_TYPE_MASK, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V0,
                        MAGIC_V1, MAGIC_V2, NO_TIMESTAMP, TIMESTAMP_LOG_APPEND_TIME)
from .header import parse_header
from .legacy import read_legacy_entry

__all__ = ["down_convert", "legacy_message"]

_ENTRY_HEAD = struct.Struct(">qiIbb")   # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def down_convert(data, to_magic, fetch_offset=0,
                 max_output=compression.DEFAULT_MAX_OUTPUT):
    """The whole log entries in ``data`` (v2 batches or legacy entries) rewritten in
    message format ``to_magic`` (0 or 1), as bytes. ``fetch_offset``: records of an
    uncompressed batch below it are dropped. Raises UnsupportedCodecError for zstd,
    CorruptRecordError for damaged input."""
    if to_magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"down-conversion is to magic 0 or 1, not {to_magic!r}")
    view = memoryview(data)
    out = bytearray()
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        size = LOG_OVERHEAD + _I32.unpack_from(view, pos + 8)[0]
        magic = view[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < len(view) else None
        if magic == MAGIC_V2:
            _convert_batch(view, pos, to_magic, fetch_offset, out, max_output)
        elif magic is not None and magic <= to_magic:
            out += view[pos:pos + size]
        else:
            _convert_legacy(view, pos, to_magic, fetch_offset, out, max_output)
        pos += size
    return bytes(out)


def legacy_message(magic, offset, timestamp, key, value, attributes=0):
    """One legacy log entry: ``offset, size, crc, magic, attributes, [timestamp], key,
    value`` (timestamp only for magic 1; None key/value are written as length -1)."""
    body = bytearray(_ENTRY_HEAD.pack(offset, 0, 0, magic, attributes))
    if magic == MAGIC_V1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field))
            body += field
    _I32.pack_into(body, 8, len(body) - LOG_OVERHEAD)
    struct.pack_into(">I", body, 12, crc32(memoryview(body)[16:]))
    return bytes(body)


def _convert_batch(view, pos, to_magic, fetch_offset, out, max_output):
    header = parse_header(view, pos)
    if header.is_control:
        return
    codec = header.compression
    if codec == CODEC_ZSTD:
        raise UnsupportedCodecError("zstd-compressed batches cannot be down-converted to "
                                    f"message format v{to_magic}")
    records = decode_records(view, pos, header, max_output=max_output)
    log_append_time = header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    if codec == CODEC_NONE:
        records = [r for r in records if r.offset >= fetch_offset]
    _write(records, to_magic, codec, log_append_time, header.max_timestamp, out)


def _convert_legacy(view, pos, to_magic, fetch_offset, out, max_output):
    attributes = view[pos + 17]
    codec = attributes & LEGACY_CODEC_MASK
    records = read_legacy_entry(view, pos, max_output)
    if codec == CODEC_NONE:
        records = [r for r in records if r.offset >= fetch_offset]
    max_ts = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    _write(records, to_magic, codec, bool(attributes & LEGACY_TIMESTAMP_TYPE_MASK), max_ts,
           out)


def _write(records, to_magic, codec, log_append_time, max_timestamp, out):
    if not records:
        return
    type_bit = LEGACY_TIMESTAMP_TYPE_MASK if log_append_time and to_magic == MAGIC_V1 else 0

    def stamp(record):
        return max_timestamp if log_append_time else record.timestamp

    if codec == CODEC_NONE:
        for r in records:
            out += legacy_message(to_magic, r.offset, stamp(r), r.key, r.value, type_bit)
        return
    base = records[0].offset if to_magic == MAGIC_V1 else 0
    inner = b"".join(legacy_message(to_magic, r.offset - base, stamp(r), r.key, r.value,
                                    type_bit)
                     for r in records)
    value = compression.compress(codec, inner)
    if codec == CODEC_LZ4 and to_magic == MAGIC_V0:
        value = _lz4_v0_header_checksum(value)
    out += legacy_message(to_magic, records[-1].offset, max_timestamp, None, value,
                          codec | type_bit)


def _lz4_v0_header_checksum(frame):
    """An LZ4 frame whose header checksum is computed as Kafka 0.8/0.9 computed it: over
    the magic number and the descriptor (the standard covers the descriptor only)."""
    if frame[:4] != _LZ4_MAGIC:
        return frame
    descriptor_end = 4 + 2 + (8 if frame[4] & 0x08 else 0)   # FLG, BD, [content size]
    checksum = (xxh32(frame[:descriptor_end]) >> 8) & 0xFF
    return frame[:descriptor_end] + bytes([checksum]) + frame[descriptor_end + 1:]
