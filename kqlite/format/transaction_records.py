"""Transaction state as records of ``__transaction_state``, as Kafka's transaction
coordinator writes and reads them.

A transaction coordinator writes one record per state change of a transactional id
(InitProducerId, the first AddPartitionsToTxn of a transaction, EndTxn's prepare, the
completion once every marker is written) to the id's partition of the compacted
``__transaction_state`` topic, before it acts on the change; a coordinator that takes
over the partition reads them back. The embedded API writes the same records, so that a
broker on the same data dir finds its transactions.

The records are Kafka's (``TransactionLogKey.json``, ``TransactionLogValue.json``), each
key and value prefixed with its int16 schema version:

- key, version 0 (the only one): string transactional id. A key of another version is
  not a transaction's: :func:`decode_transaction_key` answers None and readers skip it,
  as Kafka's TransactionLog does with a warning.
- value, version 0, what Kafka 3.9 writes (its ``transaction.version`` feature is 0):
  int64 producer id, int16 producer epoch, int32 transaction timeout (ms), int8
  transaction status (:class:`TransactionStatus`), the partitions as a nullable array
  (int32 count, -1 null) of {string topic, int32 count + int32 partition ids}, int64
  last update timestamp, int64 start timestamp (-1 until a partition is added).
  Empty writes the partitions as null; the Complete states as an empty array.
- value, version 1 (KIP-915's first flexible version, read, never written): the same
  fields with compact strings and arrays (length + 1 as an unsigned varint, 0 null) and
  a tagged-field section after the value and after each partition entry. Tags 0, 1 and
  2 (previous producer id, next producer id, client transaction version: later Kafkas')
  are read; others are skipped.
- a value of another version is refused (CorruptRecordError), as Kafka's loader fails
  on it.
- a null value (tombstone) is written when an id expires: the id is forgotten.

Which partition holds an id's records: ``internal_topics.transaction_partition_for``.
"""

import enum
import struct
from typing import NamedTuple, Optional

from ..errors import CorruptRecordError

__all__ = ["TransactionStatus", "TransactionLogValue", "encode_transaction_key",
           "decode_transaction_key", "encode_transaction_value", "decode_transaction_value",
           "group_partitions", "TRANSACTION_KEY_VERSION", "TRANSACTION_VALUE_VERSION"]

TRANSACTION_KEY_VERSION = 0     # WIRE: Kafka-defined (TransactionLogKey validVersions "0")
TRANSACTION_VALUE_VERSION = 0   # WIRE: what Kafka 3.9 writes (transaction.version 0)
_FLEXIBLE_VERSION = 1           # WIRE: TransactionLogValue flexibleVersions "1+"
# WIRE: TransactionLogValue's tagged fields (version 1+).
_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID, _TAG_CLIENT_TRANSACTION_VERSION = 0, 1, 2


class TransactionStatus(enum.IntEnum):
    """The TransactionStatus byte of a value (Kafka's ``TransactionState`` ids), with the
    state's name as DescribeTransactions and ListTransactions spell it."""
    # WIRE: Kafka-defined (TransactionState.id in TransactionMetadata.scala).
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self):
        return _STATE_NAMES[self]

    @classmethod
    def from_state_name(cls, name):
        """The status named ``name`` ("Ongoing", ...), or None for a name Kafka has not."""
        return _BY_NAME.get(name)


# WIRE: TransactionState.name, as DescribeTransactions and ListTransactions answer it.
_STATE_NAMES = {
    TransactionStatus.EMPTY: "Empty",
    TransactionStatus.ONGOING: "Ongoing",
    TransactionStatus.PREPARE_COMMIT: "PrepareCommit",
    TransactionStatus.PREPARE_ABORT: "PrepareAbort",
    TransactionStatus.COMPLETE_COMMIT: "CompleteCommit",
    TransactionStatus.COMPLETE_ABORT: "CompleteAbort",
    TransactionStatus.DEAD: "Dead",
    TransactionStatus.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: status for status, name in _STATE_NAMES.items()}


class TransactionLogValue(NamedTuple):
    """One value of ``__transaction_state``. ``partitions`` is a tuple of ``(topic,
    (partition ids))``, or None (what Empty writes). The last three fields exist only in
    version 1 values (their defaults otherwise)."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TransactionStatus
    partitions: Optional[tuple]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0

    def topic_partitions(self):
        """The partitions as a frozenset of ``(topic, partition)``."""
        return frozenset((topic, p) for topic, ids in self.partitions or () for p in ids)


def group_partitions(topic_partitions):
    """``(topic, (partition ids))`` pairs of a set of ``(topic, partition)``, in order (Kafka
    groups them by topic in hash order; readers do not rely on the order)."""
    by_topic = {}
    for topic, p in sorted(topic_partitions):
        by_topic.setdefault(topic, []).append(p)
    return tuple((topic, tuple(ids)) for topic, ids in by_topic.items())


# -- Encoding (key v0, value v0) --------------------------------------------------------------

def _string(s):
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit a Kafka string")
    return struct.pack(">h", len(raw)) + raw


def encode_transaction_key(transactional_id):
    return struct.pack(">h", TRANSACTION_KEY_VERSION) + _string(transactional_id)


def encode_transaction_value(value):
    """Value version 0 of ``value``. Empty is written with null partitions and must hold
    none (Kafka's TransactionLog.valueToBytes refuses it: IllegalStateException); Dead
    and PrepareEpochFence are never written (an expired id is a tombstone, a fence is
    written as the PrepareAbort it leads to): ValueError."""
    status = TransactionStatus(value.status)
    if status in (TransactionStatus.DEAD, TransactionStatus.PREPARE_EPOCH_FENCE):
        raise ValueError(f"the transaction state {status.state_name} is never written")
    if status is TransactionStatus.EMPTY:
        if value.partitions:
            raise ValueError("an Empty transaction state holds no partitions")
        partitions = struct.pack(">i", -1)
    else:
        entries = value.partitions or ()
        partitions = struct.pack(">i", len(entries)) + b"".join(
            _string(topic) + struct.pack(f">i{len(ids)}i", len(ids), *ids)
            for topic, ids in entries)
    return (struct.pack(">hqhib", TRANSACTION_VALUE_VERSION, value.producer_id,
                        value.producer_epoch, value.timeout_ms, status)
            + partitions + struct.pack(">qq", value.last_update_ms, value.start_ms))


# -- Decoding (key v0; value v0 and v1) -------------------------------------------------------

class _Reader:
    """Reads Kafka's primitive types from ``buf``; ``flexible`` picks the compact forms."""

    def __init__(self, buf, pos, flexible):
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def unpack(self, fmt):
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def uvarint(self):
        value = shift = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise CorruptRecordError("bad varint in a transaction log record")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def length(self):
        """An array's length, -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.unpack(">i")[0]

    def string(self):
        n = self.uvarint() - 1 if self.flexible else self.unpack(">h")[0]
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecordError("bad string in a transaction log record")
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8")

    def tags(self):
        """The tagged fields of a flexible struct: ``{tag: raw bytes}``."""
        found = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            if self.pos + size > len(self.buf):
                raise CorruptRecordError("bad tagged field in a transaction log record")
            found[tag] = bytes(self.buf[self.pos:self.pos + size])
            self.pos += size
        return found


def decode_transaction_key(data):
    """The transactional id of a key, or None for a key of another version (not a
    transaction's: skipped). CorruptRecordError for a version 0 key that does not parse."""
    if data is None or len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data, 0)
    if version != TRANSACTION_KEY_VERSION:
        return None
    try:
        reader = _Reader(data, 2, flexible=False)
        return reader.string()
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"bad transaction log key: {exc}") from None


def decode_transaction_value(data):
    """The :class:`TransactionLogValue` of a version 0 or 1 value; None for a tombstone.
    CorruptRecordError for another version or bytes that do not parse."""
    if data is None:
        return None
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version not in (TRANSACTION_VALUE_VERSION, _FLEXIBLE_VERSION):
            raise CorruptRecordError(f"unknown transaction log value version {version}")
        reader = _Reader(data, 2, flexible=version >= _FLEXIBLE_VERSION)
        producer_id, epoch, timeout_ms, status = reader.unpack(">qhib")
        count = reader.length()
        partitions = None
        if count >= 0:
            entries = []
            for _ in range(count):
                topic = reader.string()
                n = reader.length()
                if n < 0:
                    raise CorruptRecordError("null partition ids in a transaction log value")
                ids = reader.unpack(f">{n}i")
                if reader.flexible:
                    reader.tags()
                entries.append((topic, tuple(ids)))
            partitions = tuple(entries)
        last_update_ms, start_ms = reader.unpack(">qq")
        tags = reader.tags() if reader.flexible else {}
        extra = {}
        if _TAG_PREVIOUS_PRODUCER_ID in tags:
            extra["previous_producer_id"] = _tag_int(tags[_TAG_PREVIOUS_PRODUCER_ID], ">q")
        if _TAG_NEXT_PRODUCER_ID in tags:
            extra["next_producer_id"] = _tag_int(tags[_TAG_NEXT_PRODUCER_ID], ">q")
        if _TAG_CLIENT_TRANSACTION_VERSION in tags:
            extra["client_transaction_version"] = _tag_int(
                tags[_TAG_CLIENT_TRANSACTION_VERSION], ">h")
        try:
            status = TransactionStatus(status)
        except ValueError:
            raise CorruptRecordError(f"unknown transaction status {status}") from None
        return TransactionLogValue(producer_id, epoch, timeout_ms, status, partitions,
                                   last_update_ms, start_ms, **extra)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"bad transaction log value: {exc}") from None


def _tag_int(raw, fmt):
    if len(raw) != struct.calcsize(fmt):
        raise CorruptRecordError("bad tagged field in a transaction log value")
    return struct.unpack(fmt, raw)[0]
