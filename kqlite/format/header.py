"""The 61-byte header of a RecordBatch v2: one type, one decode, one encode.

Theory of operation
-------------------
Every reader of a batch header in Python -- the segment walker, the record
lookup, the validator, compaction, the follower's epoch runs, Spark's decoders,
``kqlite dump`` -- gets a :class:`BatchHeader` from :func:`parse_header`, and
every writer of one packs a BatchHeader (:meth:`BatchHeader.encode`, or
:meth:`BatchHeader.encode_for` when the records that follow decide its length
and CRC). The layout below is therefore written once; the C helpers in
``csrc/`` and their pure-Python twins in ``kqlite._native`` walk the same bytes
on their own, below this layer.

Kafka's layout (``DefaultRecordBatch``; docs/format.md), big-endian::

    offset  field                 type
     0      baseOffset            int64
     8      batchLength           int32    bytes after this field
    12      partitionLeaderEpoch  int32
    16      magic                 int8     2
    17      crc                   uint32   CRC-32C of attributes..end
    21      attributes            int16    codec 0-2, timestamp type 3, transactional 4,
                                           control 5, delete horizon 6
    23      lastOffsetDelta       int32
    27      baseTimestamp         int64
    35      maxTimestamp          int64
    43      producerId            int64
    51      producerEpoch         int16
    53      baseSequence          int32
    57      recordsCount          int32
    61      records

The fields keep Kafka's names in snake case; the properties are Kafka's
``RecordBatch`` accessors (``sizeInBytes``, ``lastOffset``, ``compressionType``,
``timestampType``, ``isTransactional``, ``isControlBatch``, ``deleteHorizonMs``,
``lastSequence``). A legacy (magic 0/1) entry seen through the same fields, as
Kafka's ``RecordBatch`` interface shows one, is :func:`kqlite.format.legacy.legacy_header`.
"""

import struct
from typing import NamedTuple

from .. import _native
from ..errors import CorruptRecordError
from .constants import (
    ATTRIBUTES_OFFSET, BATCH_OVERHEAD, CODEC_MASK, CONTROL_MASK, CRC_OFFSET,
    DELETE_HORIZON_MASK, LOG_OVERHEAD, MAGIC_V2, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
)

__all__ = ["BatchHeader", "parse_header", "LAYOUT", "BEFORE_CRC", "FROM_ATTRIBUTES"]

# The two halves around the CRC (an encoder sums the second half into the CRC before the
# first is written), and the whole.
BEFORE_CRC = struct.Struct(">qiibI")           # baseOffset .. crc
FROM_ATTRIBUTES = struct.Struct(">hiqqqhii")   # attributes .. recordsCount
LAYOUT = struct.Struct(BEFORE_CRC.format + FROM_ATTRIBUTES.format[1:])
assert LAYOUT.size == BATCH_OVERHEAD and BEFORE_CRC.size == ATTRIBUTES_OFFSET

_CRC = struct.Struct(">I")
_INT32_MAX = (1 << 31) - 1
_new = tuple.__new__


class BatchHeader(NamedTuple):
    """A v2 batch header's fields, in Kafka's order (see the module docstring)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self):
        """The whole batch in bytes, the 12-byte baseOffset and batchLength included."""
        return self[1] + LOG_OVERHEAD

    @property
    def last_offset(self):
        return self[0] + self[6]

    @property
    def compression(self):
        """The codec id of attribute bits 0-2 (constants.CODEC_*)."""
        return self[5] & CODEC_MASK

    @property
    def timestamp_type(self):
        """0 CreateTime, 1 LogAppendTime (every record's time is ``max_timestamp``)."""
        return 1 if self[5] & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self):
        return bool(self[5] & TRANSACTIONAL_MASK)

    @property
    def is_control(self):
        """A control batch: its one record is a transaction marker, never a record a
        consumer sees (the marker's key and value are the transactions' codec)."""
        return bool(self[5] & CONTROL_MASK)

    @property
    def delete_horizon_ms(self):
        """The time after which compaction may drop this batch's tombstones and markers
        (KIP-534: ``base_timestamp`` when attribute bit 6 is set), else None."""
        return self[7] if self[5] & DELETE_HORIZON_MASK else None

    @property
    def last_sequence(self):
        """The sequence of the batch's last offset (sequences wrap after 2**31 - 1, as
        Kafka's ``DefaultRecordBatch.incrementSequence``), or -1 without one."""
        if self[11] < 0:
            return -1
        return (self[11] + self[6]) % (_INT32_MAX + 1)

    def encode(self):
        """The 61 bytes of this header, every field as it is (a bytearray: baseOffset and
        partitionLeaderEpoch may be rewritten in place, outside the CRC)."""
        return bytearray(LAYOUT.pack(*self))

    def encode_for(self, records):
        """The header of the batch whose records section (as stored: compressed when the
        batch is) is ``records``: ``batch_length`` and ``crc`` are computed from it, the
        other fields are as they are. A bytearray, as :meth:`encode`."""
        head = bytearray(LAYOUT.pack(self[0], BATCH_OVERHEAD - LOG_OVERHEAD + len(records),
                                     *self[2:4], 0, *self[5:]))
        crc = _native.crc32c(records, _native.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
        _CRC.pack_into(head, CRC_OFFSET, crc)
        return head


def parse_header(buf, pos=0):
    """The :class:`BatchHeader` of the v2 batch at ``buf[pos:]`` (the CRC is not checked:
    ``batch.verify_crc``). CorruptRecordError when fewer than 61 bytes are left or the
    magic is not 2."""
    if len(buf) - pos < BATCH_OVERHEAD:
        raise CorruptRecordError(f"{len(buf) - pos} bytes is shorter than a batch header",
                                 position=pos)
    fields = LAYOUT.unpack_from(buf, pos)
    if fields[3] != MAGIC_V2:
        raise CorruptRecordError(f"magic {fields[3]} is not a v2 record batch", position=pos)
    return _new(BatchHeader, fields)
