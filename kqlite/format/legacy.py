"""Reader for legacy message sets: magic 0 (Kafka 0.8-0.9) and magic 1 (0.10).

A log entry is ``offset int64, size int32`` followed by a message:
``crc uint32`` (CRC-32 IEEE of magic..end), ``magic int8``, ``attributes int8``,
``timestamp int64`` (magic 1 only), ``key`` and ``value`` as int32-length-prefixed
bytes (-1 = null). A compressed "wrapper" message (codec bits set) carries an
inner message set in its value. Inner offsets are absolute for magic 0; for
magic 1 they are relative and the wrapper's offset is the last inner message's
absolute offset. Under LogAppendTime (attribute bit 3) inner messages take the
wrapper's timestamp. kqlite reads these formats and never writes them.

Errors: CRC mismatch or malformed framing raises CorruptRecordError with the
byte position.
"""

import struct
import zlib

from ..errors import CorruptRecordError
from . import compression
from .constants import (LEGACY_CODEC_MASK, LEGACY_TIMESTAMP_TYPE_MASK, LEGACY_V0_MIN_MESSAGE_SIZE,
                        LEGACY_V1_MIN_MESSAGE_SIZE, LOG_OVERHEAD, NO_TIMESTAMP)
from .record import Record

__all__ = ["read_legacy_entry", "iter_legacy_records"]

_ENTRY = struct.Struct(">qiIbb")   # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _bytes_field(buf, pos, end, where):
    if pos + 4 > end:
        raise CorruptRecordError("message field runs past its end", position=where)
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError(f"field of {n} bytes runs past the message", position=where)
    return bytes(buf[pos:pos + n]), pos + n


def _parse(buf, pos):
    """(offset, magic, attributes, timestamp, key, value, entry_end) of one entry."""
    if len(buf) - pos < LOG_OVERHEAD + 6:
        raise CorruptRecordError("truncated legacy message header", position=pos)
    offset, size, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
    minimum = LEGACY_V0_MIN_MESSAGE_SIZE if magic == 0 else LEGACY_V1_MIN_MESSAGE_SIZE
    end = pos + LOG_OVERHEAD + size
    if magic not in (0, 1) or size < minimum:
        raise CorruptRecordError(f"invalid legacy message (magic {magic}, size {size})",
                                 position=pos)
    if end > len(buf):
        raise CorruptRecordError("legacy message runs past the end of the data", position=pos)
    if zlib.crc32(memoryview(buf)[pos + 16:end]) != crc:
        raise CorruptRecordError("CRC-32 mismatch in legacy message", position=pos)
    field = pos + 18
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _I64.unpack_from(buf, field)
        field += 8
    key, field = _bytes_field(buf, field, end, pos)
    value, field = _bytes_field(buf, field, end, pos)
    return offset, magic, attributes, timestamp, key, value, end


def read_legacy_entry(buf, position=0):
    """Records of the legacy entry at ``position`` (several if it wraps compressed ones)."""
    offset, magic, attributes, timestamp, key, value, _end = _parse(buf, position)
    codec = attributes & LEGACY_CODEC_MASK
    if not codec:
        return [Record._make((offset, timestamp, key, value, ()))]
    if value is None:
        raise CorruptRecordError("compressed legacy message without a value", position=position)
    inner = compression.decompress(codec, value)
    messages = []
    pos = 0
    while pos < len(inner):
        try:
            msg = _parse(inner, pos)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"inner message: {exc.reason}", position=position) from None
        if msg[2] & LEGACY_CODEC_MASK:
            raise CorruptRecordError("nested compressed legacy message", position=position)
        messages.append(msg)
        pos = msg[6]
    if not messages:
        return []
    log_append = magic == 1 and attributes & LEGACY_TIMESTAMP_TYPE_MASK
    last_relative = messages[-1][0]
    records = []
    for inner_offset, _m, _a, inner_ts, ikey, ivalue, _e in messages:
        absolute = inner_offset if magic == 0 else offset - (last_relative - inner_offset)
        records.append(Record._make((absolute, timestamp if log_append else inner_ts,
                                     ikey, ivalue, ())))
    return records


def iter_legacy_records(buf):
    """Every record of a buffer of consecutive legacy entries."""
    pos = 0
    while pos < len(buf):
        yield from read_legacy_entry(buf, pos)
        pos += LOG_OVERHEAD + _I32.unpack_from(buf, pos + 8)[0]
