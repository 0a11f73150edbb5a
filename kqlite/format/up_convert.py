"""Up-conversion of a produced legacy message set (magic 0 or 1) to one v2 record batch.

Produce v0-2 carry message sets in the format of Kafka 0.8-0.10. Kafka 3.x stores only
record batches v2, so its LogValidator converts them on the leader
(``convertAndAssignOffsetsNonCompressed``, and ``validateMessagesAndAssignOffsetsCompressed``
with ``toMagic = 2``). ``up_convert(data)`` does the same here, before the batch takes the
ordinary v2 path (format/validate.py, then the appender assigns offsets): it returns the
bytes of one v2 batch with baseOffset 0, no producer id, the records' keys, values and
timestamps (-1 for magic 0, which has none), compressed with the codec of the wrapper when
the set was compressed.

Theory of operation. Each top-level entry is framed and CRC-checked as Kafka's
``analyzeAndValidateRecords`` does. An uncompressed set may hold many entries (one record
each); a compressed set must be exactly one wrapper, whose value decompresses (within
``max_uncompressed``) to inner messages of the wrapper's magic, none compressed, each with a
valid CRC. Inner offsets are not kept, as Kafka reassigns them. A magic-1 message marked
LogAppendTime makes the batch a LogAppendTime batch, so that the appender refuses it for a
LogAppendTime topic and clears the mark for a CreateTime one, as Kafka does.

Refusals, as Kafka answers them:

====================================================  =====================================
what                                                   raises (Kafka error)
====================================================  =====================================
no entry, an entry of another magic than the first,   InvalidRecordError (INVALID_RECORD)
a compressed entry among several, a null or empty
wrapper value, no inner message, an inner message of
another magic or itself compressed, a magic-1 wrapper
offset below its last inner offset, a zstd wrapper
bad framing or CRC (outer or inner), a partial entry  CorruptRecordError (CORRUPT_MESSAGE)
at the end, data that does not decompress or expands
past ``max_uncompressed``
codec ids 5-7, a codec package not installed          UnsupportedCodecError
                                                      (UNSUPPORTED_COMPRESSION_TYPE)
====================================================  =====================================
"""

from ..errors import CorruptRecordError, InvalidRecordError
from . import compression
from .batch import build_batch_parts
from .constants import (CODEC_NONE, CODEC_ZSTD, LEGACY_CODEC_MASK, LEGACY_TIMESTAMP_TYPE_MASK,
                        MAGIC_OFFSET, MAGIC_V1, MAGIC_V2)
# The legacy reader's single-message parser (framing, size minimums, CRC-32): one parser
# for both the read path and this one.
from .legacy import _parse as _parse_message
from .record import Record
from .timestamps import set_timestamp_type

__all__ = ["is_legacy", "up_convert"]


def is_legacy(data):
    """True when ``data`` starts with a magic-0 or magic-1 entry (what up_convert takes)."""
    return len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] < MAGIC_V2


def up_convert(data, *, max_uncompressed=compression.DEFAULT_MAX_OUTPUT):
    """One v2 batch (bytes) holding the records of the legacy message set ``data``; see the
    module docstring for what is refused."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    try:
        entries = _entries(view)
        records, codec, log_append_time = _records(entries, max_uncompressed)
    finally:
        view.release()
    head, body, _count, max_ts = build_batch_parts(records, codec=codec)
    batch = head + body
    if log_append_time:
        set_timestamp_type(batch, 0, True, max_ts)
    return bytes(batch)


def _entries(view):
    """The parsed top-level messages: (offset, magic, attributes, timestamp, key, value)."""
    if not len(view):
        raise InvalidRecordError("the produce request carries no message set")
    entries = []
    pos = 0
    while pos < len(view):
        offset, magic, attributes, timestamp, key, value, end = _parse_message(view, pos)
        if entries and magic != entries[0][1]:
            raise InvalidRecordError(f"the message at byte {pos} has magic {magic}, not the "
                                     f"magic {entries[0][1]} of the first message")
        entries.append((offset, magic, attributes, timestamp, key, value))
        pos = end
    if len(entries) > 1 and any(e[2] & LEGACY_CODEC_MASK for e in entries):
        raise InvalidRecordError(f"a compressed message set must be one wrapper message, not "
                                 f"{len(entries)} messages")
    return entries


def _records(entries, max_uncompressed):
    """(Records, codec, whether any message is marked LogAppendTime)."""
    first = entries[0]
    codec = first[2] & LEGACY_CODEC_MASK
    if codec == CODEC_NONE:
        records = [Record._make((0, timestamp, key, value, ()))
                   for _o, _m, _a, timestamp, key, value in entries]
        log_append_time = any(_is_log_append_time(e[1], e[2]) for e in entries)
        return records, CODEC_NONE, log_append_time
    offset, magic, attributes, timestamp, _key, value = first
    if codec == CODEC_ZSTD:
        raise InvalidRecordError("a zstd-compressed message set needs magic 2 (Produce v3+)")
    if not value:
        raise InvalidRecordError("the compressed wrapper message has no value")
    inner = compression.decompress(codec, value, max_uncompressed, magic=magic)
    wrapper_log_append_time = _is_log_append_time(magic, attributes)
    records = []
    pos = last_inner = 0
    while pos < len(inner):
        try:
            inner_offset, inner_magic, inner_attributes, inner_ts, key, val, pos = \
                _parse_message(inner, pos)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"inner message at byte {exc.position} of the "
                                     f"decompressed set: {exc.reason}") from None
        if inner_magic != magic:
            raise InvalidRecordError(f"an inner message has magic {inner_magic}, its wrapper "
                                     f"magic {magic}")
        if inner_attributes & LEGACY_CODEC_MASK:
            raise InvalidRecordError("an inner message of a compressed message set is "
                                     "itself compressed")
        if wrapper_log_append_time:
            inner_ts = timestamp        # magic 1: the wrapper's LogAppendTime is every record's
        records.append(Record._make((0, inner_ts, key, val, ())))
        last_inner = inner_offset
    if not records:
        raise InvalidRecordError("the compressed wrapper message holds no inner message")
    if magic == MAGIC_V1 and offset != 0 and offset < last_inner:
        raise InvalidRecordError(f"the wrapper offset {offset} is below its last inner "
                                 f"offset {last_inner}")
    return records, codec, wrapper_log_append_time


def _is_log_append_time(magic, attributes):
    return magic == MAGIC_V1 and bool(attributes & LEGACY_TIMESTAMP_TYPE_MASK)
