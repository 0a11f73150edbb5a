"""Reader for legacy message sets: magic 0 (Kafka 0.8-0.9) and magic 1 (0.10).

Accepts any buffer (bytes, bytearray, memoryview, mmap). A log entry is
``offset int64, size int32`` followed by ``size`` bytes of message:
``crc uint32`` (CRC-32 IEEE of magic..end), ``magic int8``, ``attributes int8``
(bits 0-2 codec, bit 3 LogAppendTime), ``timestamp int64`` (magic 1 only),
``key`` and ``value`` as int32-length-prefixed bytes (-1 = null).

``read_legacy_entry(buf, position=0, max_output=...)`` returns the Records of one
entry; ``iter_legacy_records(buf)`` yields those of consecutive entries. Records
have no headers; magic 0 has no timestamps (Record.timestamp is -1).
``legacy_header(buf, position)`` shows an entry's header through the fields of a v2
:class:`~kqlite.format.header.BatchHeader`, as Kafka's ``RecordBatch`` interface shows
a legacy batch (``AbstractLegacyRecordBatch``).

A compressed "wrapper" (codec bits set) holds an inner message set in its value,
decoded one level deep. As Kafka's reader does: inner offsets are absolute under
a magic 0 wrapper; under magic 1 they are relative, the wrapper's offset is the
last inner message's absolute offset, and a wrapper offset of 0 (some librdkafka
versions' produce requests) means the relative offsets are used as they are.
Inner magic-1 messages take the wrapper's timestamp when the wrapper says
LogAppendTime. Magic 0 lz4 wrappers are read without checking the LZ4 header
checksum, which Kafka 0.8/0.9 computed wrongly (KAFKA-3160).

Raises CorruptRecordError (``position`` = byte offset of the entry in ``buf``)
on a CRC mismatch, framing that runs past its end, an unknown magic, an empty,
null-valued, nested or zstd-compressed wrapper, undecodable or oversized
compressed data (beyond ``max_output``); UnsupportedCodecError for codec ids
5-7 or a missing optional codec package. kqlite never writes these formats.
"""

import struct

from .._native import crc32
from ..errors import CorruptRecordError
from . import compression
from .constants import (CODEC_ZSTD, LEGACY_CODEC_MASK, LEGACY_TIMESTAMP_TYPE_MASK,
                        LEGACY_V0_MIN_MESSAGE_SIZE, LEGACY_V1_MIN_MESSAGE_SIZE, LOG_OVERHEAD,
                        MAGIC_V0, MAGIC_V1, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH,
                        NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP)
from .header import BatchHeader
from .record import Record

__all__ = ["read_legacy_entry", "iter_legacy_records", "legacy_header"]

_HEAD = struct.Struct(">qiIbb")   # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MIN_SIZE = {MAGIC_V0: LEGACY_V0_MIN_MESSAGE_SIZE, MAGIC_V1: LEGACY_V1_MIN_MESSAGE_SIZE}


def _parse(buf, pos):
    """(offset, magic, attributes, timestamp, key, value, end) of the entry at ``pos``.

    Errors carry ``position=pos``; callers decoding inner sets re-anchor them.
    """
    if len(buf) - pos < LOG_OVERHEAD + 6:
        raise CorruptRecordError("truncated legacy message header", position=pos)
    offset, size, crc, magic, attributes = _HEAD.unpack_from(buf, pos)
    if magic not in _MIN_SIZE:
        raise CorruptRecordError(f"legacy message with magic {magic}", position=pos)
    if size < _MIN_SIZE[magic]:
        raise CorruptRecordError(f"legacy message size {size} is below the minimum "
                                 f"{_MIN_SIZE[magic]} for magic {magic}", position=pos)
    end = pos + LOG_OVERHEAD + size
    if end > len(buf):
        raise CorruptRecordError(f"legacy message of {size} bytes runs past the end of "
                                 "the data", position=pos)
    actual = crc32(memoryview(buf)[pos + 16:end])
    if actual != crc:
        raise CorruptRecordError(f"CRC-32 mismatch in legacy message (stored {crc:#010x}, "
                                 f"computed {actual:#010x})", position=pos)
    field = pos + 18
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _I64.unpack_from(buf, field)
        field += 8
    key, field = _length_prefixed(buf, field, end, pos)
    value, field = _length_prefixed(buf, field, end, pos)
    return offset, magic, attributes, timestamp, key, value, end


def _length_prefixed(buf, field, end, pos):
    if field + 4 > end:
        raise CorruptRecordError("length field runs past the end of its legacy message",
                                 position=pos)
    (n,) = _I32.unpack_from(buf, field)
    field += 4
    if n < 0:
        return None, field
    if field + n > end:
        raise CorruptRecordError(f"field of {n} bytes runs past the end of its legacy "
                                 "message", position=pos)
    return bytes(buf[field:field + n]), field + n


def legacy_header(buf, position=0):
    """The header of the legacy entry at ``position`` (its CRC not checked) as a
    :class:`BatchHeader`, Kafka's legacy ``RecordBatch`` accessors: the entry's offset is
    both its base and its last offset; ``batch_length`` is the message size; the
    attributes keep the bits legacy messages define (codec, timestamp type), so it is
    never transactional or control; the timestamps are a magic 1 message's own (-1 for
    magic 0); no leader epoch, producer or sequence; ``records_count`` is 1, or -1 for a
    compressed wrapper (unknown without decompressing it, Kafka's ``countOrNull``)."""
    if len(buf) - position < LOG_OVERHEAD + 6:
        raise CorruptRecordError("truncated legacy message header", position=position)
    offset, size, crc, magic, attributes = _HEAD.unpack_from(buf, position)
    if magic not in _MIN_SIZE:
        raise CorruptRecordError(f"legacy message with magic {magic}", position=position)
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        if len(buf) - position < LOG_OVERHEAD + 14:
            raise CorruptRecordError("truncated legacy message header", position=position)
        (timestamp,) = _I64.unpack_from(buf, position + LOG_OVERHEAD + 6)
    attributes &= LEGACY_CODEC_MASK | LEGACY_TIMESTAMP_TYPE_MASK
    return BatchHeader(offset, size, NO_PARTITION_LEADER_EPOCH, magic, crc, attributes, 0,
                       timestamp, timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE,
                       -1 if attributes & LEGACY_CODEC_MASK else 1)


def read_legacy_entry(buf, position=0, max_output=compression.DEFAULT_MAX_OUTPUT):
    """Records of the legacy entry at ``position`` (several if it wraps compressed ones)."""
    offset, magic, attributes, timestamp, key, value, _end = _parse(buf, position)
    codec = attributes & LEGACY_CODEC_MASK
    if not codec:
        return [Record._make((offset, timestamp, key, value, ()))]
    if codec == CODEC_ZSTD:
        # zstd arrived with magic 2 (KIP-110); Kafka rejects it in a legacy wrapper.
        raise CorruptRecordError("zstd-compressed legacy message", position=position)
    if value is None:
        raise CorruptRecordError("compressed legacy message with a null value",
                                 position=position)
    try:
        inner = compression.decompress(codec, value, max_output, magic=magic)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, position=position) from None
    messages = []
    pos = 0
    while pos < len(inner):
        try:
            message = _parse(inner, pos)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"inner message at byte {exc.position} of the "
                                     f"decompressed set: {exc.reason}",
                                     position=position) from None
        if message[2] & LEGACY_CODEC_MASK:
            raise CorruptRecordError("compressed message nested in a compressed legacy "
                                     "message", position=position)
        messages.append(message)
        pos = message[6]
    if not messages:
        raise CorruptRecordError("compressed legacy message with no inner messages",
                                 position=position)

    base = 0    # magic 0: inner offsets are absolute
    if magic == MAGIC_V1 and offset != 0:
        last = messages[-1][0]
        if offset < last:
            raise CorruptRecordError(f"wrapper offset {offset} is below its last inner "
                                     f"relative offset {last}", position=position)
        base = offset - last
    log_append_time = magic == MAGIC_V1 and attributes & LEGACY_TIMESTAMP_TYPE_MASK
    return [Record._make((base + inner_offset,
                          # An inner magic-0 message has no timestamp whatever its wrapper says.
                          timestamp if log_append_time and inner_magic == MAGIC_V1
                          else inner_timestamp,
                          inner_key, inner_value, ()))
            for inner_offset, inner_magic, _a, inner_timestamp, inner_key, inner_value, _e
            in messages]


def iter_legacy_records(buf, max_output=compression.DEFAULT_MAX_OUTPUT):
    """Every record of a buffer of consecutive legacy entries, in order.

    A partial entry at the end raises CorruptRecordError like any other damage.
    """
    pos = 0
    while pos < len(buf):
        records = read_legacy_entry(buf, pos, max_output)
        yield from records
        # read_legacy_entry validated the size field, so it is safe to step over.
        pos += LOG_OVERHEAD + _I32.unpack_from(buf, pos + 8)[0]
