"""Produce: batches in, offsets out.

The handler only translates between the wire and the partition seam
(``broker.replicas``, replica_manager.py and partition.py): it never touches a Log, and
every storage call behind it runs in a storage thread. The produce path never decodes
records: storage validates the batch bytes once (framing, CRC and Kafka's LogValidator
rules, record boundaries walked in C), the partition stamps its leader epoch, and offsets
are assigned by rewriting baseOffset before the bytes are appended.

Versions (Kafka 3.9 serves 0-11): v3+ carry exactly one record batch v2. v0-2 carry what
pre-0.11 producers send, message sets of magic 0 or 1, which are up-converted to one v2
batch in a storage thread (format/up_convert.py, Kafka's LogValidator conversion) and then
take the same path; Kafka does not check the magic of v0-2 requests, so a v2 batch in one
is appended as it is. zstd needs v7+ (KIP-110).

Authorization, before anything is appended (Kafka's KafkaApis.handleProduceRequest): a
request holding transactional batches needs WRITE on its transactional id, or the whole
request is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition); then each
topic needs WRITE, else its partitions get TOPIC_AUTHORIZATION_FAILED, whether the topic
exists or not (authorization before existence). No IDEMPOTENT_WRITE is asked (KIP-679).
kqlite has no transactions yet: a request with a transactional id that passes these
checks is still refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the error every
transactional producer treats as fatal; transactional batches without one are refused
by storage (INVALID_TXN_STATE, format/validate.py), where Kafka answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

import asyncio

from ...errors import CorruptRecordError, InvalidRecordError, UnsupportedCodecError
from ...format.constants import ATTRIBUTES_OFFSET, CODEC_MASK, CODEC_ZSTD, LENGTH_OFFSET, \
    LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, TRANSACTIONAL_MASK
from ...format.up_convert import is_legacy, up_convert
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import AclOperation, Resource, ResourceType
from ..partition import AppendResult, PartitionError

_FIRST_V2_VERSION = 3        # WIRE: Produce v3 brought record batches v2 (KIP-98)
_FIRST_ZSTD_VERSION = 7      # WIRE: KIP-110
# The up-converter's refusals, as Kafka answers them (nothing is appended).
_CONVERSION_REFUSALS = (
    (InvalidRecordError, ErrorCode.INVALID_RECORD),
    (CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    (UnsupportedCodecError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
)
_CONVERSION_ERRORS = tuple(kind for kind, _code in _CONVERSION_REFUSALS)


async def _append(broker, topic, index, records, acks, timeout_ms, version):
    try:
        partition = await broker.replicas.get(topic, index)
    except PartitionError as exc:
        return AppendResult(exc.error_code)
    if records is None:
        return AppendResult(ErrorCode.INVALID_RECORD,
                            error_message="the partition's records are null")
    if version < _FIRST_V2_VERSION and is_legacy(records):
        try:
            records = await broker.io.run(up_convert, records)
        except _CONVERSION_ERRORS as exc:
            code = next(code for kind, code in _CONVERSION_REFUSALS if isinstance(exc, kind))
            return AppendResult(code, error_message=str(exc))
    elif _FIRST_V2_VERSION <= version < _FIRST_ZSTD_VERSION and _is_zstd_batch(records):
        return AppendResult(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                            error_message=f"Produce v{version} cannot carry zstd-compressed "
                                          f"records; zstd needs v{_FIRST_ZSTD_VERSION}+")
    result = await partition.append(records, acks=acks, timeout_ms=timeout_ms)
    broker.metrics.messages_in += result.record_count
    broker.metrics.bytes_in += result.size
    return result


async def produce(broker, context, request):
    body = request.body
    acks = body["acks"]
    authorizer = broker.authorizer
    transactional_id = body.get("transactional_id")
    if transactional_id is not None and _has_transactional_batches(body) and \
            not authorizer.authorize(context, AclOperation.WRITE,
                                     Resource.transactional_id(transactional_id)):
        return _produce_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    writable = authorizer.authorized_names(context, AclOperation.WRITE, ResourceType.TOPIC,
                                           (t["name"] for t in body["topic_data"]))
    if acks not in (0, 1, -1):
        return _produce_error(body, ErrorCode.INVALID_REQUIRED_ACKS, writable)
    if transactional_id:
        return _produce_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, writable)
    entries = [(t["name"], p["index"], p["records"])
               for t in body["topic_data"] for p in t["partition_data"]]
    # Partitions are appended to (and, with acks=-1, waited for) concurrently; a
    # partition named twice keeps its entries' order.
    by_partition = {}
    for i, (name, index, _records) in enumerate(entries):
        by_partition.setdefault((name, index), []).append(i)
    results = [None] * len(entries)

    async def append_in_order(positions):
        for i in positions:
            name, index, records = entries[i]
            if name not in writable:
                results[i] = AppendResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            results[i] = await _append(broker, name, index, records, acks, body["timeout_ms"],
                                       request.api_version)

    await asyncio.gather(*(append_in_order(ix) for ix in by_partition.values()))
    if acks == 0:
        return None
    answers = iter(results)
    responses = []
    for topic in body["topic_data"]:
        parts = []
        for p in topic["partition_data"]:
            r = next(answers)
            parts.append({"index": p["index"], "error_code": r.error_code,
                          "base_offset": r.base_offset, "log_start_offset": r.log_start_offset,
                          "log_append_time_ms": r.log_append_time, "record_errors": [],
                          "error_message": r.error_message})
        responses.append({"name": topic["name"], "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": 0}


def _is_zstd_batch(records):
    """Whether the first entry is a v2 batch compressed with zstd (what ProduceRequest.
    validateRecords refuses before v7)."""
    return (len(records) > ATTRIBUTES_OFFSET + 1 and records[MAGIC_OFFSET] == MAGIC_V2
            and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == CODEC_ZSTD)


def _has_transactional_batches(body):
    """Whether any partition's records hold a v2 batch with the transactional bit (Kafka's
    RequestUtils.hasTransactionalRecords reads every batch; legacy message sets have no
    such bit). Malformed framing stops the walk: storage refuses those bytes."""
    for t in body["topic_data"]:
        for p in t["partition_data"]:
            records = p["records"] or b""
            pos = 0
            while pos + ATTRIBUTES_OFFSET + 2 <= len(records):
                if records[pos + MAGIC_OFFSET] == MAGIC_V2 and \
                        records[pos + ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK:
                    return True
                length = int.from_bytes(records[pos + LENGTH_OFFSET:pos + LOG_OVERHEAD],
                                        "big", signed=True)
                if length <= 0:
                    break
                pos += LOG_OVERHEAD + length
    return False


def _produce_error(body, code, writable=None):
    """Every partition answered ``code``; with ``writable`` (the topics the principal may
    write), the others' partitions TOPIC_AUTHORIZATION_FAILED."""
    def error(topic):
        return code if writable is None or topic in writable \
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return {"throttle_time_ms": 0, "responses": [
        {"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": error(t["name"]), "base_offset": -1,
             "log_start_offset": -1, "log_append_time_ms": -1, "record_errors": [],
             "error_message": None}
            for p in t["partition_data"]]} for t in body["topic_data"]]}


HANDLERS = {ApiKey.PRODUCE: produce}
