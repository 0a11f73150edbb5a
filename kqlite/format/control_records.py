"""Transaction markers: the control record of a COMMIT or ABORT and the control batch
that carries it (Kafka's ``ControlRecordType``, ``EndTransactionMarker`` and
``MemoryRecords.withEndTransactionMarker``).

Theory of operation
-------------------
A transaction ends on each of its partitions with a *marker*: a v2 batch with the
transactional and control attribute bits (``0x0030``) holding one record, whose key
says COMMIT or ABORT and whose value carries the coordinator epoch of the transaction
coordinator that decided it. The leader of the partition builds the batch when the
coordinator asks it to (WriteTxnMarkers), stamps its own clock into it and appends it
as a COORDINATOR append; readers never return the record to an application, they use
it to tell which of a producer's batches were aborted.

The bytes (ON-DISK / WIRE, big-endian; docs/format.md works one through)::

    control record key     int16 version (0) | int16 type (0 ABORT, 1 COMMIT,
                           2-6 KRaft's own types)
    control record value   int16 version (0) | int32 coordinator epoch
    record                 length 16, attributes 0, timestampDelta 0, offsetDelta 0,
                           key length 4, key, value length 6, value, 0 headers:
                           17 bytes with its length varint
    batch                  61-byte header + that record = 78 bytes; batchLength 66,
                           attributes 0x0030, lastOffsetDelta 0, baseTimestamp =
                           maxTimestamp = the leader's clock, baseSequence -1,
                           recordsCount 1

Reading is as lenient as Kafka's (``ControlRecordType.parseTypeId``,
``EndTransactionMarker.deserializeValue``): a key shorter than 4 bytes, or with a
negative version, is invalid; a positive version other than 0 is read as version 0
(Kafka logs it at debug level); a type id Kafka does not know reads as UNKNOWN; a
value shorter than 6 bytes or with a negative version is invalid, a higher version is
read as version 0. librdkafka reads stricter (``rdkafka_msgset_reader.c``): it *skips*
a control record whose key version is not 0 and requires a key of exactly 4 bytes.
Every marker kqlite writes (:func:`build_control_batch`) is version 0 with a 4-byte key
and a 6-byte value, which both read the same way.
"""

import struct
from typing import NamedTuple

from ..errors import InvalidRecordError
from .batch import decode_records
from .constants import (BATCH_OVERHEAD, CONTROL_MASK, MAGIC_V2, NO_SEQUENCE,
                        TRANSACTIONAL_MASK)
from .header import BatchHeader, parse_header

__all__ = ["ABORT", "COMMIT", "UNKNOWN", "CONTROL_TYPE_NAMES", "EndTransactionMarker",
           "control_key", "control_type", "marker_value", "parse_marker_value",
           "build_control_batch", "read_marker", "CONTROL_BATCH_SIZE"]

# ON-DISK / WIRE: Kafka's ControlRecordType ids (2-6 are KRaft's, written to its metadata
# log only; -1 is how Kafka reads an id it does not know).
ABORT = 0
COMMIT = 1
UNKNOWN = -1
CONTROL_TYPE_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT", 2: "LEADER_CHANGE",
                      3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION",
                      6: "KRAFT_VOTERS", UNKNOWN: "UNKNOWN"}

_KEY = struct.Struct(">hh")          # version, type
_VALUE = struct.Struct(">hi")        # version, coordinator epoch
_KEY_VERSION = 0                     # ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION
_VALUE_VERSION = 0                   # EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION
# The one record of a marker, after its length varint (16 = zigzag 0x20): attributes,
# timestampDelta, offsetDelta, then the key and value lengths as zigzag varints (4 -> 0x08,
# 6 -> 0x0c) around them, and no headers.
_RECORD_LENGTH = 1 + 1 + 1 + 1 + _KEY.size + 1 + _VALUE.size + 1
CONTROL_BATCH_SIZE = BATCH_OVERHEAD + 1 + _RECORD_LENGTH      # 78
_MARKER_ATTRIBUTES = TRANSACTIONAL_MASK | CONTROL_MASK       # 0x0030


class EndTransactionMarker(NamedTuple):
    """What a marker says: its control type (ABORT, COMMIT) and the coordinator epoch of
    the coordinator that wrote it."""

    control_type: int
    coordinator_epoch: int

    @property
    def is_commit(self):
        return self.control_type == COMMIT

    @property
    def is_abort(self):
        return self.control_type == ABORT

    @property
    def name(self):
        return CONTROL_TYPE_NAMES.get(self.control_type, "UNKNOWN")


def control_key(control_type):
    """The 4 bytes of the control record key of ``control_type`` (version 0)."""
    return _KEY.pack(_KEY_VERSION, control_type)


def control_type(key):
    """The control type a control record's ``key`` names (Kafka's ``ControlRecordType.parse``):

    - a key shorter than 4 bytes: InvalidRecordError;
    - a negative version: InvalidRecordError ("may indicate data corruption");
    - any other version: read as version 0;
    - a type id other than 0-6: UNKNOWN."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"a control record key needs {_KEY.size} bytes, this one "
                                 f"has {0 if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version} is negative: the "
                                 f"record may be corrupt")
    return type_id if type_id in CONTROL_TYPE_NAMES else UNKNOWN


def marker_value(coordinator_epoch):
    """The 6 bytes of a marker's control record value (version 0)."""
    return _VALUE.pack(_VALUE_VERSION, coordinator_epoch)


def parse_marker_value(control, value):
    """The :class:`EndTransactionMarker` of a control record of type ``control`` whose value
    is ``value`` (Kafka's ``EndTransactionMarker.deserializeValue``):

    - a type other than COMMIT and ABORT is no transaction marker: InvalidRecordError;
    - a value shorter than 6 bytes, or with a negative version: InvalidRecordError;
    - any other version: read as version 0."""
    if control not in (ABORT, COMMIT):
        raise InvalidRecordError(f"control record type "
                                 f"{CONTROL_TYPE_NAMES.get(control, control)} is not a "
                                 f"transaction marker (COMMIT or ABORT)")
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError(f"a transaction marker value needs {_VALUE.size} bytes, "
                                 f"this one has {0 if value is None else len(value)}")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"transaction marker value version {version} is negative: "
                                 f"the record may be corrupt")
    return EndTransactionMarker(control, coordinator_epoch)


def build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, timestamp_ms,
                        *, base_offset=0, partition_leader_epoch=-1):
    """The 78-byte control batch of a COMMIT (``commit`` true) or ABORT marker of
    ``producer_id``/``producer_epoch`` decided by a coordinator of ``coordinator_epoch``,
    stamped ``timestamp_ms`` (the leader's clock), as a bytearray: the appender rewrites
    its base offset and partition leader epoch, which the CRC does not cover."""
    record = bytearray((_RECORD_LENGTH << 1, 0, 0, 0, _KEY.size << 1))
    record += control_key(COMMIT if commit else ABORT)
    record.append(_VALUE.size << 1)
    record += marker_value(coordinator_epoch)
    record.append(0)
    header = BatchHeader(base_offset, 0, partition_leader_epoch, MAGIC_V2, 0,
                         _MARKER_ATTRIBUTES, 0, timestamp_ms, timestamp_ms, producer_id,
                         producer_epoch, NO_SEQUENCE, 1)
    return header.encode_for(record) + record


def read_marker(buf, pos=0, header=None):
    """The :class:`EndTransactionMarker` of the control batch at ``buf[pos:]`` (its
    BatchHeader ``header`` if already parsed), as Kafka's ProducerAppendInfo reads it:
    its first record's key and value; None for a control batch without records (compaction
    emptied it). InvalidRecordError when it holds no transaction marker (a KRaft control
    type, or bytes that are not a marker); CorruptRecordError for records that do not
    decode. The CRC is not checked here."""
    if header is None:
        header = parse_header(buf, pos)
    if not header.is_control:
        raise InvalidRecordError(f"the batch at offset {header.base_offset} is not a control "
                                 f"batch")
    if header.records_count == 0:
        return None
    records = decode_records(buf, pos, header, verify=False)
    if not records:
        return None
    first = records[0]
    return parse_marker_value(control_type(first.key), first.value)
