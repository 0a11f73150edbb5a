"""RecordBatch v2: build, parse and validate Kafka's on-disk/on-wire batch.

Layout and field meanings are in docs/format.md and ``constants.py``; the 61-byte
header is :class:`~kqlite.format.header.BatchHeader` (header.py). A batch is
bytes from end to end; this module never holds a file or a socket. Building a
batch (:func:`build_batch`) and decoding one (:func:`decode_batch`) go through
the ``_native`` helpers so the C and pure-Python paths give identical bytes.

The CRC covers attributes..end, so ``baseOffset`` and ``partitionLeaderEpoch``
can be rewritten in place (:func:`set_base_offset`, :func:`set_leader_epoch`)
without recomputing it: this is what lets an appender assign offsets to bytes
it never decodes.
"""

import struct
import threading
import time

from .. import _native
from .._native._inputs import as_bytes, header_key
from ..errors import CorruptRecordError, InvalidRecordError
from . import compression
from .constants import (
    ATTRIBUTES_OFFSET, BATCH_OVERHEAD, CODEC_NONE, CONTROL_MASK, CRC_OFFSET,
    LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_CREATE_TIME, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
)
from .header import BEFORE_CRC, FROM_ATTRIBUTES, BatchHeader, parse_header
from .record import Record

__all__ = ["BatchHeader", "build_batch", "build_batch_parts", "build_values_batch_parts",
           "build_value_batch", "build_record_batch", "value_batches", "ValueBatches",
           "parse_header", "decode_batch", "decode_records", "iter_records",
           "set_base_offset", "set_leader_epoch", "verify_crc", "now_ms", "magic_of",
           "entry_size"]

_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")

_new_tuple = tuple.__new__    # Record(...) from a row without a Python-level call


def now_ms():
    return int(time.time() * 1000)


def verify_crc(buf, pos=0, header=None):
    """Raise CorruptRecordError unless the batch at ``pos`` has a correct CRC-32C."""
    header = header or parse_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(f"batch of {header.size} bytes runs past the "
                                 f"end of the buffer", position=pos)
    actual = _native.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC-32C mismatch: stored 0x{header.crc:08x}, "
                                 f"computed 0x{actual:08x}", position=pos)
    return header


_PLAIN_TYPES = frozenset((bytes, bytearray, memoryview, type(None)))


def _split_records(records):
    """Turn the append() argument list into parallel columns for encode_records."""
    if _PLAIN_TYPES.issuperset(map(type, records)):
        # Values only (the common case): one C-level pass instead of a loop per record.
        return list(records), None, None, None
    values, keys, stamps, headers = [], None, None, None
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            if keys is None:
                keys, stamps, headers = [None] * i, [None] * i, [()] * i
            values.append(rec[3])
            keys.append(rec[2])
            stamps.append(rec[1])
            headers.append(rec[4])
        elif rec is None or isinstance(rec, (bytes, bytearray, memoryview)):
            values.append(rec)
            if keys is not None:
                keys.append(None)
                stamps.append(None)
                headers.append(())
        else:
            raise InvalidRecordError(
                f"record {i} is a {type(rec).__name__}; append bytes, None or kqlite.Record "
                f"(encode str values first)")
    return values, keys, stamps, headers


def build_batch(records, base_offset=0, timestamp=None, codec=CODEC_NONE,
                producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
                base_sequence=NO_SEQUENCE, partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                transactional=False, control=False, timestamp_type=0):
    """Encode ``records`` (bytes values, None tombstones or Record objects) as one batch.

    Records without a timestamp get ``timestamp`` (default: now). Returns bytes.
    """
    head, body, _, _ = build_batch_parts(
        records, base_offset, timestamp, codec, producer_id, producer_epoch, base_sequence,
        partition_leader_epoch, transactional, control, timestamp_type)
    return b"".join((head, body))


def build_batch_parts(records, base_offset=0, timestamp=None, codec=CODEC_NONE,
                      producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
                      base_sequence=NO_SEQUENCE,
                      partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, transactional=False,
                      control=False, timestamp_type=0):
    """:func:`build_batch` without joining the pieces: ``(head, body, count, max_ts)``.

    ``head`` is the 61-byte header as a bytearray (baseOffset can be rewritten in
    place), ``body`` the records; the batch is ``head + body``. Appenders write both
    pieces without copying the body again.
    """
    if not records:
        raise InvalidRecordError("a record batch needs at least one record")
    values, keys, stamps, headers = _split_records(records)
    return _assemble(values, keys, stamps, headers, base_offset, timestamp, codec, producer_id,
                     producer_epoch, base_sequence, partition_leader_epoch, transactional,
                     control, timestamp_type)


def build_values_batch_parts(values, timestamp=None, codec=CODEC_NONE,
                             partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                             timestamp_type=0):
    """:func:`build_batch_parts` for a non-empty list the caller knows holds only bytes
    or bytearray values (no keys, headers or Records): skips the per-record checks."""
    return _assemble(values, None, None, None, 0, timestamp, codec, NO_PRODUCER_ID,
                     NO_PRODUCER_EPOCH, NO_SEQUENCE, partition_leader_epoch, False, False,
                     timestamp_type)


_LENGTH = struct.Struct(">i")
_join = b"".join
_pack = struct.pack
_BYTES_TYPES = frozenset((bytes, bytearray))
VALUE_GROUP_OVERHEAD = 12     # what a record adds to its value when cutting groups
_SCRATCH_KEPT = 4 << 20       # a thread keeps its batch buffer up to this size
_JOIN_AHEAD = 4 << 20         # lists with fewer value bytes are joined at once
_scratch = threading.local()


def value_batches(values, target, timestamp=None,
                  partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, timestamp_type=0):
    """A non-empty list of values as uncompressed batches with base offset 0, one per
    group of the list cut every ``target`` bytes (the values' lengths plus
    VALUE_GROUP_OVERHEAD each, at least one value per group): a :class:`ValueBatches`,
    or None when a value is not bytes-like (the caller takes the general path, which
    says what is wrong). Each batch holds the bytes :func:`build_values_batch_parts`
    makes of its group, joined.

    Theory of operation: one C-level pass takes the values' lengths, from which C
    cuts the groups and sizes their batches, and every check (types, lengths,
    sizes) is made here, so that the caller knows that building the batches one
    after the other while it writes them cannot fail half-way. The join of the
    values is the only copy before the encoder, which writes the records after the
    header into a buffer the thread reuses and sums the CRC-32C as it goes,
    starting from the header's fields (all known before the records: the count
    comes from the cut). A list of up to _JOIN_AHEAD value bytes is joined here at
    once (the join checks the types); a longer one may only hold bytes and
    bytearray values, and each group is joined when its batch is built: an append
    of any size then touches about one batch's worth of memory, which stays in
    cache and is not handed back to the system between batches.
    """
    n = len(values)
    try:
        lens = _pack(f"{n}q", *map(len, values))
    except TypeError:
        return None
    ends, sizes, value_bytes = _native.cut_values(lens, VALUE_GROUP_OVERHEAD, target)
    total = sum(value_bytes)
    if total <= _JOIN_AHEAD:
        try:
            data = _join(values)
        except TypeError:       # str, None, Record
            return None
        if len(data) != total:  # lengths that are not byte counts (wide memoryviews)
            return None
    elif _BYTES_TYPES.issuperset(map(type, values)):
        data = None
    else:
        return None
    ts = now_ms() if timestamp is None else int(timestamp)
    return ValueBatches(values, data, memoryview(lens), ends, value_bytes,
                        [BATCH_OVERHEAD + s for s in sizes], ts, partition_leader_epoch,
                        TIMESTAMP_TYPE_MASK if timestamp_type else 0)


class ValueBatches:
    """The batches of :func:`value_batches`: ``sizes`` (bytes of each batch), and
    iteration, which yields ``(batch, record count, max timestamp)`` with ``batch`` a
    writable memoryview valid until the next one is taken."""

    __slots__ = ("values", "data", "lens", "ends", "value_bytes", "sizes", "timestamp",
                 "epoch", "attributes")

    def __init__(self, values, data, lens, ends, value_bytes, sizes, timestamp, epoch,
                 attributes):
        self.values, self.data, self.lens, self.ends = values, data, lens, ends
        self.value_bytes, self.sizes = value_bytes, sizes
        self.timestamp, self.epoch, self.attributes = timestamp, epoch, attributes

    def __iter__(self):
        values, data, lens, ts = self.values, self.data, self.lens, self.timestamp
        if data is not None:
            data = memoryview(data)
        buf = _take_scratch(max(self.sizes))
        start = at = 0
        for end, size in zip(self.ends, self.value_bytes):
            count = end - start
            head = BatchHeader(0, 0, self.epoch, MAGIC_V2, 0, self.attributes, count - 1, ts,
                               ts, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE,
                               count).encode()
            # value_batches made sure that the lengths cut the joined values exactly.
            written, crc = _native.encode_values_crc(
                buf, head, _join(values[start:end]) if data is None else data[at:at + size],
                lens[8 * start:8 * end], ATTRIBUTES_OFFSET)
            _LENGTH.pack_into(buf, LENGTH_OFFSET, written - LOG_OVERHEAD)
            _CRC.pack_into(buf, CRC_OFFSET, crc)
            yield memoryview(buf)[:written], count, ts
            start, at = end, at + size
        _give_back(buf)


def _take_scratch(size):
    """A bytearray of at least ``size`` bytes for building batches, the thread's own
    while it is taken (a thread builds one batch at a time)."""
    buf = _scratch.__dict__.pop("buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(size)
    return buf


def _give_back(buf):
    if len(buf) <= _SCRATCH_KEPT:
        _scratch.buf = buf


_ONE_RECORD_HEAD = b"\x00\x00\x00\x01"         # attributes, timestampDelta, offsetDelta, key -1


def _zigzag_varint(n):
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Length prefixes of the values one-record appends usually carry, ready made.
_VARINTS = tuple(_zigzag_varint(n) for n in range(4096))


def build_value_batch(value, timestamp, partition_leader_epoch=NO_PARTITION_LEADER_EPOCH):
    """The batch ``build_batch([value], timestamp=timestamp)`` builds, for one bytes value
    (or None) without key or headers, as a bytearray with base offset 0: the
    one-record append's encoder, without the per-list work of the general one."""
    if value is None:
        record = b"\x00\x00\x00\x01\x01\x00"      # valueLen -1, no headers
    else:
        n = len(value)
        record = b"".join((_ONE_RECORD_HEAD, _VARINTS[n] if n < 4096 else _zigzag_varint(n),
                           value, b"\x00"))
    return _one_record_batch(record, timestamp, partition_leader_epoch)


def build_record_batch(value, key, headers, timestamp,
                       partition_leader_epoch=NO_PARTITION_LEADER_EPOCH):
    """The batch ``build_batch([Record(value, key, headers, timestamp)])`` builds, for one
    record with a key or headers (or both), as a bytearray with base offset 0: the
    producer's one-record shapes, encoded without the general encoder's columns. Keys,
    values and header fields are checked as encode_records checks them (the same
    refusals, from kqlite._native._inputs)."""
    parts = [b"\x00\x00\x00"]                   # attributes, timestampDelta, offsetDelta
    _put_field(parts, as_bytes(key, "key"))
    _put_field(parts, as_bytes(value, "value"))
    if not headers:
        parts.append(b"\x00")
    else:
        parts.append(_varint(len(headers)))
        for hkey, hvalue in headers:
            _put_field(parts, header_key(hkey))
            _put_field(parts, as_bytes(hvalue, "header value"))
    record = b"".join(parts)
    return _one_record_batch(record, timestamp, partition_leader_epoch)


def _varint(n):
    return _VARINTS[n] if 0 <= n < 4096 else _zigzag_varint(n)


def _put_field(parts, field):
    """A record field (key, value, header key or value): its zigzag length, -1 for null,
    then its bytes."""
    if field is None:
        parts.append(b"\x01")
    else:
        parts.append(_varint(len(field)))
        parts.append(field)


def _one_record_batch(record, timestamp, partition_leader_epoch):
    """A batch of the one encoded ``record`` (without its length), stamped ``timestamp``."""
    n = len(record)
    if n >= 1 << 31:
        raise InvalidRecordError("a record or field is longer than 2**31 - 1 bytes")
    body = b"".join((FROM_ATTRIBUTES.pack(0, 0, timestamp, timestamp, NO_PRODUCER_ID,
                                          NO_PRODUCER_EPOCH, NO_SEQUENCE, 1),
                     _varint(n), record))
    out = bytearray(BEFORE_CRC.pack(0, len(body) + CRC_OFFSET + 4 - LOG_OVERHEAD,
                                    partition_leader_epoch, MAGIC_V2, _native.crc32c(body)))
    out += body
    return out


def _assemble(values, keys, stamps, headers, base_offset, timestamp, codec, producer_id,
              producer_epoch, base_sequence, partition_leader_epoch, transactional, control,
              timestamp_type):
    default_ts = now_ms() if timestamp is None else int(timestamp)
    if stamps is None:
        base_ts = max_ts = default_ts
        deltas = None
    else:
        stamps = [default_ts if t is None else int(t) for t in stamps]
        base_ts = stamps[0]
        max_ts = max(stamps)
        deltas = [t - base_ts for t in stamps]
        if not any(deltas):
            deltas = None
        if not any(headers):
            headers = None
    try:
        body = _native.encode_records(values, keys, deltas, headers)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidRecordError):
            raise
        raise InvalidRecordError(f"cannot encode records: {exc}") from None
    if timestamp_type:
        max_ts = default_ts  # LogAppendTime: readers take every record's time from here
    codec = compression.codec_id(codec)
    if codec != CODEC_NONE:
        body = compression.compress(codec, body)
    attributes = codec | (TIMESTAMP_TYPE_MASK if timestamp_type else 0) \
        | (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    count = len(values)
    head = BatchHeader(base_offset, 0, partition_leader_epoch, MAGIC_V2, 0, attributes,
                       count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                       count).encode_for(body)
    return head, body, count, max_ts


def decode_records(buf, pos=0, header=None, verify=True, max_output=None):
    """Decode the batch at ``buf[pos:]`` into a list of Record (CRC checked unless
    verify=False)."""
    header, body, start, stop, row_type = _records_region(buf, pos, header, verify, max_output)
    try:
        rows = _native.decode_records(body, header.records_count, header.base_offset,
                                      header.base_timestamp, row_type, start, stop)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, position=pos) from None
    if row_type is None:
        # LogAppendTime: every record carries the batch's max timestamp.
        ts = header.max_timestamp
        return [_new_tuple(Record, (r[0], ts, r[2], r[3], r[4])) for r in rows]
    return rows


def iter_records(buf, pos=0, header=None, verify=True, max_output=None):
    """:func:`decode_records` as ``(first offset, last offset, iterator of Record)``: every
    check is made before it returns, but the Records are built as they are taken, so a
    reader that drops each one keeps one alive, not the batch's (see
    ``_native.iter_records``). The offsets are None for a batch without records."""
    header, body, start, stop, row_type = _records_region(buf, pos, header, verify, max_output)
    try:
        first, last, rows = _native.iter_records(body, header.records_count,
                                                 header.base_offset, header.base_timestamp,
                                                 row_type, start, stop)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, position=pos) from None
    if row_type is None:
        ts = header.max_timestamp
        rows = (_new_tuple(Record, (r[0], ts, r[2], r[3], r[4])) for r in rows)
    return first, last, rows


def _records_region(buf, pos, header, verify, max_output):
    """(header, bytes holding the records, their start and end in it, the row type: None
    for LogAppendTime, whose timestamps are replaced) of the batch at ``buf[pos:]``."""
    header = header or parse_header(buf, pos)
    if verify:
        verify_crc(buf, pos, header)
    end = pos + header.size
    codec = header.compression
    row_type = Record if header.timestamp_type == TIMESTAMP_CREATE_TIME else None
    if codec == CODEC_NONE and type(buf) is bytes:
        # Decoded where it lies in ``buf``: no copy of the batch.
        return header, buf, pos + BATCH_OVERHEAD, end, row_type
    body = memoryview(buf)[pos + BATCH_OVERHEAD:end]
    if codec != CODEC_NONE:
        kwargs = {} if max_output is None else {"max_output": max_output}
        body = compression.decompress(codec, body, **kwargs)
    return header, body, 0, None, row_type


def decode_batch(buf, pos=0, verify=True):
    """Return ``(BatchHeader, [Record, ...])`` for the v2 batch at ``pos``."""
    header = parse_header(buf, pos)
    return header, decode_records(buf, pos, header, verify)


def set_base_offset(buf, pos, base_offset):
    """Rewrite baseOffset in a mutable buffer (outside the CRC, so the CRC stays valid)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_leader_epoch(buf, pos, epoch):
    """Rewrite partitionLeaderEpoch in a mutable buffer (outside the CRC)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def magic_of(buf, pos=0):
    """The magic byte of the log entry at ``pos`` (0, 1 or 2)."""
    return buf[pos + MAGIC_OFFSET]


def entry_size(buf, pos=0):
    """The bytes of the log entry at ``pos``, whatever its magic: the length field at byte
    8 (a v2 batchLength, a legacy message size) plus the 12 bytes up to it."""
    return LOG_OVERHEAD + _INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
