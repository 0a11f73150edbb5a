"""Validation of v2 record batches on the append path: Kafka's LogValidator rules.

``validate_batches(data, *, origin=AppendOrigin.CLIENT, max_batch_size=None,
compacted=False, max_uncompressed=DEFAULT_MAX_OUTPUT) -> list[BatchHeader]``
checks bytes that are about to be appended and returns the header of each batch
(they lie one after the other from byte 0, each ``size`` bytes), or raises the error
whose Kafka code the producer must be answered with.

Theory of operation. The bytes are read once at batch level by
``_native.scan_batches`` (framing and CRC-32C, in C), then each 61-byte header is
decoded (``header.parse_header``) and checked, then the records region is walked
record by record by ``_native.walk_records`` (in C: no Python object per record),
after decompression when the batch is compressed. Nothing is decoded into Record
objects, and the bytes are never modified: assigning offsets and the leader epoch
stays the appender's job.

How much is checked depends on who appends (Kafka's ``AppendOrigin``):

``CLIENT``
    a producer, through the broker's Produce handler: every rule below.
``LOCAL``
    the embedded API (``Log.append_batches``): the rules that keep the log readable
    (offsets, counts, records, keys of a compacted log), not the ones about what a
    Kafka client may send (one batch, baseOffset 0, control, sequence bits): an
    application may copy batches out of another log, holes left by compaction,
    producer fields and markers included.
``COORDINATOR``
    the broker's own appends for a transaction coordinator: the markers it writes
    (``Log.append_marker``) and the group coordinator's transactional offset commits.
    The same rules as LOCAL, as Kafka's LogValidator applies its client-only rules to
    CLIENT alone.
``REPLICATION``
    a follower copying its leader's bytes: framing, CRC, v2 and offsets that
    increase from batch to batch (Kafka's follower append), nothing inside records.

Rules, in the order they are checked (the first failure is raised). Origins:
C = CLIENT, L = LOCAL and COORDINATOR, R = REPLICATION. The last column is the Kafka
error the exception stands for, which the broker answers the producer with.

=======================================  ===  =====================  =======================
rule                                     C/L  raises                 Kafka error (code)
                                         /R
=======================================  ===  =====================  =======================
at least one batch                       CLR  InvalidRecordError     INVALID_RECORD (87)
length field >= the magic's minimum,     CLR  CorruptRecordError     CORRUPT_MESSAGE (2)
known magic, no partial batch at the
end [1]
whole size <= ``max_batch_size``         CLR  RecordTooLargeError    MESSAGE_TOO_LARGE (10)
CRC-32C                                  CLR  CorruptRecordError     CORRUPT_MESSAGE (2)
magic 2 (record batch v2)                CLR  InvalidRecordError     INVALID_RECORD (87)
exactly one batch                        C    InvalidRecordError     INVALID_RECORD (87)
baseOffset 0                             C    InvalidRecordError     INVALID_RECORD (87)
lastOffsetDelta >= 0                     CLR  InvalidRecordError     INVALID_RECORD (87)
each batch starts after the previous     R    InvalidRecordError     (the follower's fetch
one's last offset                                                    fails)
recordCount > 0 (L: >= 0)                CL   InvalidRecordError     INVALID_RECORD (87)
recordCount == lastOffsetDelta + 1       CL   InvalidRecordError     INVALID_RECORD (87)
(L: <=, compaction leaves holes)
not a control batch                      C    InvalidRecordError     INVALID_RECORD (87)
producerId >= 0 needs baseSequence >= 0  C    InvalidRecordError     INVALID_RECORD (87)
codec id 0-4, its package installed      CL   UnsupportedCodecError  UNSUPPORTED_COMPRESSION
                                                                     _TYPE (76) [2]
compressed records decompress within     CL   CorruptRecordError     CORRUPT_MESSAGE (2) [2]
``max_uncompressed``
exactly recordCount records, each        CL   InvalidRecordError     INVALID_RECORD (87)
length inside its record, no bytes
left over [3]
compacted log: every record has a key    CL   InvalidRecordError     INVALID_RECORD (87)
(control batches excepted) [4]
=======================================  ===  =====================  =======================

Sources: ``ProduceRequest.validateRecords`` (one batch, v2), ``UnifiedLog.
analyzeAndValidateRecords`` (baseOffset 0, size, CRC), ``LogValidator.validateBatch``
and ``validateRecord`` (offsets, counts, control, sequence, keys),
and ``DefaultRecordBatch``/``DefaultRecord`` (record structure).

[1] Kafka drops a partial batch at the end of a produce request silently; no
real client sends one, so kqlite refuses it.
[2] Kafka itself fails these with an internal error (UNKNOWN_SERVER_ERROR); the
codes above say what went wrong.
[3] Stricter than Kafka, which reads any negative key or value length as null,
decodes header keys leniently and lets a timestamp wrap: kqlite's own reader
(``decode_records``) refuses those, and a stored batch a reader refuses stalls
every consumer at its offset. Per-record offsetDelta values are not checked
(Kafka does not check them in uncompressed v2 batches either).

[4] A per-record refusal (KIP-467): the error's ``record_errors`` lists every keyless
record as ``(index in the batch, message)``, and its message is Kafka's summary of
them (``record_errors_message``), as LogValidator.processRecordErrors words it; the
Produce handler answers them in ``record_errors`` and ``error_message`` (v8+), so a
client fails only those records. A producer's LogAppendTime batch for a LogAppendTime
topic is refused the same way, every record named (``timestamp_type_refusal``, applied
by the appender, which knows the topic's timestamp type).

Not here: timestamp rules (Kafka's message.timestamp.* defaults accept any
timestamp; LogAppendTime is applied by the appender), zstd before Produce v7
(only the handler knows the API version), and everything that depends on what the
partition holds: producer sequences and epochs, transactions (a transactional batch
outside an open transaction, a non-transactional one inside, a marker's epochs:
``kqlite.storage.producer_state``, Kafka's ``UnifiedLog.analyzeAndValidateProducerState``
and ``ProducerAppendInfo``). What a marker's record says is read there too
(``control_records.read_marker``).
"""

import enum

from .. import _native
from ..errors import (CorruptRecordError, InvalidRecordError, InvalidTimestampError,
                      RecordTooLargeError, UnsupportedCodecError)
from . import compression
from .batch import decode_records, entry_size
from .constants import (
    ATTRIBUTES_OFFSET, BATCH_OVERHEAD, CODEC_MASK, CODEC_NAMES, CODEC_NONE, CONTROL_MASK,
    LEGACY_MAGIC_OFFSET, LOG_OVERHEAD, MAGIC_V2,
)
from .header import parse_header
from .legacy import legacy_header

__all__ = ["AppendOrigin", "validate_batches", "record_errors_message",
           "timestamp_type_refusal"]

_MIN_LENGTH = {0: 14, 1: 22, 2: 49}           # smallest legal length field per magic
_MIN_RECORD_SIZE = 7                          # a record with every field empty


class AppendOrigin(enum.Enum):
    """Who appends the bytes, which decides how much is checked (see the module doc)."""

    CLIENT = "client"
    LOCAL = "local"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


def validate_batches(data, *, origin=AppendOrigin.CLIENT, max_batch_size=None, compacted=False,
                     max_uncompressed=compression.DEFAULT_MAX_OUTPUT, partition=None):
    """Check the v2 batches in ``data`` (any contiguous buffer) for an append from
    ``origin``; return the BatchHeader of each batch, in order, or raise (see the module
    doc). The headers are as the sender wrote them (offsets, leader epoch).

    ``max_batch_size`` bounds each batch's whole size, 12-byte prefix included, as
    Kafka compares a batch's ``sizeInBytes`` with ``max.message.bytes``; None: no
    bound. ``compacted``: the log's cleanup.policy includes compact.
    ``max_uncompressed`` bounds what one compressed batch may expand to.
    ``partition``: the log's ``topic-partition`` name, which per-record messages quote.
    """
    origin = AppendOrigin(origin)
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    try:
        return _validate(view, origin, max_batch_size, compacted, max_uncompressed, partition)
    finally:
        view.release()      # an mmap cannot be closed while a view of it is alive


def _validate(view, origin, max_batch_size, compacted, max_uncompressed, partition):
    size = len(view)
    if not size:
        raise InvalidRecordError("no record batch to append: the records are empty")
    found, stop, status = _native.scan_batches(view, 0, size, True, None, max_batch_size)
    if status != _native.SCAN_OK or stop != size:
        raise _framing_error(view, stop, status, max_batch_size)
    client = origin is AppendOrigin.CLIENT
    if client and len(found) > 1:
        if found[0][5] != MAGIC_V2:
            raise _not_v2(found[0])
        raise InvalidRecordError(f"a produce request may carry exactly one record batch per "
                                 f"partition, not {len(found)}")
    batches = []
    previous_last = None
    for entry in found:
        pos, base, last, _max_ts, batch_size, magic = entry
        if magic != MAGIC_V2:
            raise _not_v2(entry)
        header = parse_header(view, pos)
        (_, _, _, _, _, attributes, delta, first_ts, _, producer_id, _, base_sequence,
         count) = header
        where = f"the record batch at byte {pos}"
        if client and base != 0:
            raise InvalidRecordError(f"{where} has baseOffset {base}; a producer's batch "
                                     f"starts at 0 (the broker assigns offsets)")
        if delta < 0:
            raise InvalidRecordError(f"{where} has lastOffsetDelta {delta}: its offset range "
                                     f"[{base}, {last}] holds no offset")
        if origin is AppendOrigin.REPLICATION:
            if previous_last is not None and base <= previous_last:
                raise InvalidRecordError(f"{where} starts at offset {base}, not after the "
                                         f"previous batch's last offset {previous_last}")
        else:
            _check_header(where, client, delta, count, attributes, producer_id, base_sequence)
            null_keys = _check_records(view, pos, batch_size, attributes, count, first_ts,
                                       max_uncompressed, where)
            if compacted and null_keys and not attributes & CONTROL_MASK:
                raise _keyless_refusal(view, pos, header, max_uncompressed, partition)
        previous_last = last
        batches.append(header)
    return batches


def record_errors_message(record_errors):
    """Kafka's summary of a batch's per-record refusals (LogValidator.processRecordErrors):
    how many, and the first three as Java's ``RecordError.toString`` prints them."""
    shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                      for index, message in record_errors[:3])
    return (f"One or more records have been rejected due to {len(record_errors)} record "
            f"errors in total, and only showing the first three errors at most: [{shown}]")


def _keyless_refusal(view, pos, header, max_uncompressed, partition):
    """The InvalidRecordError naming each record of the batch at ``pos`` without a key
    (LogValidator.validateKey's message). Only a refused batch is decoded."""
    records = decode_records(bytes(view[pos:pos + header.size]), 0, header, verify=False,
                             max_output=max_uncompressed)
    message = f"Compacted topic cannot accept message without key in topic partition {partition}"
    errors = [(i, message) for i, r in enumerate(records) if r.key is None]
    return InvalidRecordError(record_errors_message(errors), record_errors=errors)


def timestamp_type_refusal(data, pos):
    """The InvalidTimestampError for a producer's LogAppendTime batch at ``pos`` of a
    LogAppendTime topic: every record is named, with LogValidator.validateTimestamp's
    message (the record as Java's DefaultRecord.toString prints it), and the whole
    error reads as LogValidator.processRecordErrors' timestamp summary."""
    header = parse_header(data, pos)
    records = decode_records(bytes(data[pos:pos + header.size]), 0, header, verify=False)
    errors = [(i, _timestamp_type_message(r)) for i, r in enumerate(records)]
    return InvalidTimestampError("One or more records have been rejected due to invalid "
                                 "timestamp", record_errors=errors)


def _timestamp_type_message(record):
    return (f"Invalid timestamp type in message DefaultRecord(offset={record.offset}, "
            f"timestamp={record.timestamp}, key={len(record.key or b'')} bytes, "
            f"value={len(record.value or b'')} bytes). Producer should not set timestamp "
            f"type to LogAppendTime.")


def _not_v2(entry):
    pos, magic = entry[0], entry[5]
    return InvalidRecordError(f"the entry at byte {pos} is a magic-{magic} message set; only "
                              f"record batches v2 (magic 2) can be appended")


def _check_header(where, client, delta, count, attributes, producer_id, base_sequence):
    if count < 0 or (client and count == 0):
        raise InvalidRecordError(f"{where} declares an invalid record count {count}")
    if client:
        if count != delta + 1:
            raise InvalidRecordError(f"{where} declares {count} records for an offset range "
                                     f"of {delta + 1} (lastOffsetDelta {delta})")
        if attributes & CONTROL_MASK:
            raise InvalidRecordError(f"{where} is a control batch; clients may not write "
                                     f"control records")
        if producer_id >= 0 and base_sequence < 0:
            raise InvalidRecordError(f"{where} has producerId {producer_id} but the invalid "
                                     f"baseSequence {base_sequence}")
    elif count > delta + 1:
        raise InvalidRecordError(f"{where} declares {count} records for an offset range of "
                                 f"{delta + 1} (lastOffsetDelta {delta})")


def _check_records(view, pos, batch_size, attributes, count, first_ts, max_uncompressed,
                   where):
    """Walk the records region of one batch; return how many records have no key."""
    codec = attributes & CODEC_MASK
    start, end = pos + BATCH_OVERHEAD, pos + batch_size
    buf = view
    if codec != CODEC_NONE:
        if codec not in CODEC_NAMES:
            raise UnsupportedCodecError(f"{where} uses compression codec id {codec}, which "
                                        f"Kafka does not define")
        if count == 0 and start == end:
            return 0        # an empty batch left by compaction holds no compressed data
        try:
            buf = compression.decompress(codec, view[start:end], max_uncompressed)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}: {exc.reason}", position=pos) from None
        start, end = 0, len(buf)
    status, walked, null_keys, at, _ = _native.walk_records(buf, count, start, end, first_ts)
    if status == _native.WALK_OK:
        return null_keys
    region = "records" if codec == CODEC_NONE else f"{CODEC_NAMES[codec]}-decompressed records"
    if status == _native.WALK_MISSING:
        fault = f"only {walked} are present"
    elif status == _native.WALK_TRAILING:
        fault = f"{end - at} bytes of its {region} are left after the last one"
    elif status == _native.WALK_COUNT and walked == 0 and at == start and \
            count > (end - start) // _MIN_RECORD_SIZE:
        fault = f"{end - start} bytes of {region} cannot hold that many"
    else:
        fault = f"record {walked} (byte {at - start} of the {region}): " \
                f"{_native.WALK_TEXT[status]}"
    raise InvalidRecordError(f"{where} declares {count} records, but {fault}")


def _framing_error(view, pos, status, max_batch_size):
    """The exception for the entry at ``pos`` that scan_batches stopped at."""
    left = len(view) - pos
    if status == _native.SCAN_OK or left < 17:
        return CorruptRecordError(f"{left} bytes at the end are too few for a record batch",
                                  position=pos)
    size = entry_size(view, pos)
    length = size - LOG_OVERHEAD
    magic = view[pos + 16]
    if status == _native.SCAN_TRUNCATED:
        return CorruptRecordError(f"the record batch declares {size} bytes but only {left} "
                                  f"follow", position=pos)
    if status == _native.SCAN_CORRUPT_CRC:
        if magic == MAGIC_V2:
            stored = parse_header(view, pos).crc
            actual = _native.crc32c(view[pos + ATTRIBUTES_OFFSET:pos + size])
        else:
            stored = legacy_header(view, pos).crc
            actual = _native.crc32(view[pos + LEGACY_MAGIC_OFFSET:pos + size])
        return CorruptRecordError(f"CRC mismatch: stored 0x{stored:08x}, computed "
                                  f"0x{actual:08x}", position=pos)
    minimum = _MIN_LENGTH.get(magic)
    if minimum is None:
        return CorruptRecordError(f"unknown magic {magic}", position=pos)
    if length < minimum:
        return CorruptRecordError(f"length field {length} is below the {minimum} bytes of the "
                                  f"smallest magic-{magic} entry", position=pos)
    if max_batch_size is not None and size > max_batch_size:
        return RecordTooLargeError(size, max_batch_size)
    return CorruptRecordError("the last offset of the record batch does not fit in 64 bits",
                              position=pos)
