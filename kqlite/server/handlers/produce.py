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

One storage-thread call per request (``_append_all``): every partition is judged on its
own first, in Kafka's order -- authorization, the partition (unknown here?), KIP-890's
verification, null records, the up-conversion of v0-2, zstd before v7 -- and a refusal is
that partition's answer; the rest, on the single broker, are appended in one call for the
whole request (``ReplicaManager.append_gathered``), where storage judges each partition's
batches (validation, mirror topic, sequences, size) and refuses them alone, as separate
calls would. A partition met already, outside a verified transaction, needs no wait and
is judged on the event loop; only the others (a first lookup, a verification, an
up-conversion) are prepared concurrently first. A cluster's partitions keep one call
each (``gathers_appends`` is False: the leader checks its role and the ISR around the
append), and so do logs that fsync every append (their fsyncs run at once that way).

Per-record refusals (KIP-467, Produce v8+): when storage refuses a batch because of some
of its records (a keyless record for a compacted topic, a producer's LogAppendTime batch
for a LogAppendTime topic: format/validate.py), the partition's answer carries
``record_errors``, each refused record's index in the batch with LogValidator's message,
and ``error_message``, Kafka's summary of them; the error code is the partition's
(INVALID_RECORD, or INVALID_TIMESTAMP when a timestamp is at fault). Nothing of the batch
is appended, as in Kafka; a client fails the named records and may send the others again.
Below v8 the answer has no place for them and carries the error code alone.

Authorization, before anything is appended (Kafka's KafkaApis.handleProduceRequest): a
request holding transactional batches needs a transactional id with WRITE on it, or the
whole request is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition); then
each topic needs WRITE, else its partitions get TOPIC_AUTHORIZATION_FAILED, whether the
topic exists or not (authorization before existence). No IDEMPOTENT_WRITE is asked
(KIP-679).

A Produce whose transactional id is kqlite's ``MIRROR_APPEND_ID`` is an offset-preserving
mirror's append, served by mirror_produce.py (kqlite/server/mirror_append.py says why it
travels in a Produce); a producer's append to a mirror topic is refused there too.

Transactional batches (Kafka's ReplicaManager.handleProduceAppend):

- one request's transactional batches must all be one producer's, else the whole request
  is answered INVALID_PRODUCER_ID_MAPPING;
- KIP-890 part 1 (``transaction.partition.verification.enable``): a partition where the
  producer has no transaction open gives a verification guard
  (``Partition.begin_verification``), and the transaction coordinator is asked whether
  the partition is in the producer's transaction (``broker.txn_verification``,
  coordinator/txn/verification.py: AddPartitionsToTxn v4 VerifyOnly to the id's
  coordinator, wherever it is); the batch is appended with that guard, which
  storage checks is still the current one. A refusal is answered as Kafka's leader
  answers it: PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE as
  INVALID_TXN_STATE below v11, INVALID_TXN_STATE with "Partition was not added to the
  transaction", and the coordinator's retriable answers (CONCURRENT_TRANSACTIONS,
  COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) as
  NOT_ENOUGH_REPLICAS, which every client retries without refreshing its metadata.
- a broker without a transaction coordinator (``transactions=False``) refuses a
  transactional id with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the error every
  transactional producer treats as fatal.
"""

import asyncio
import struct

from ...errors import CorruptRecordError, InvalidRecordError, UnsupportedCodecError
from ...format.constants import ATTRIBUTES_OFFSET, BASE_SEQUENCE_OFFSET, CODEC_MASK, \
    CODEC_ZSTD, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, PRODUCER_ID_OFFSET, \
    TRANSACTIONAL_MASK
from ...format.up_convert import is_legacy, up_convert
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import AclOperation, Resource, ResourceType
from ..mirror_append import MIRROR_APPEND_ID
from ..partition import NO_VERIFICATION, AppendResult, PartitionError
from .mirror_produce import mirror_produce

_FIRST_V2_VERSION = 3        # WIRE: Produce v3 brought record batches v2 (KIP-98)
_FIRST_ZSTD_VERSION = 7      # WIRE: KIP-110
_FIRST_ABORTABLE_VERSION = 11  # WIRE: Produce v11 knows TRANSACTION_ABORTABLE (KIP-890)
_PRODUCER = struct.Struct(">qhi")  # WIRE: a v2 batch's producer id, epoch, base sequence
# The coordinator's retriable answers to a verification, which clients that do not know
# them might not retry: Kafka answers NOT_ENOUGH_REPLICAS instead.
_RETRIED_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR})
# The up-converter's refusals, as Kafka answers them (nothing is appended).
_CONVERSION_REFUSALS = (
    (InvalidRecordError, ErrorCode.INVALID_RECORD),
    (CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    (UnsupportedCodecError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
)
_CONVERSION_ERRORS = tuple(kind for kind, _code in _CONVERSION_REFUSALS)


async def _prepare(broker, topic, index, records, version, transaction):
    """Everything before one partition's append, in Kafka's order: the partition (unknown
    here?), KIP-890's verification, then the records' own refusals (:func:`_refusal`,
    after an up-conversion in a storage thread for v0-2). ``(partition, records,
    verification guard)`` to append, or the refusing AppendResult."""
    try:
        partition = await broker.replicas.get(topic, index)
    except PartitionError as exc:
        return AppendResult(exc.error_code)
    guard = None
    if transaction is NO_VERIFICATION:
        guard = NO_VERIFICATION
    elif transaction is not None:
        refusal, guard = await _verify(broker, partition, records, version, transaction)
        if refusal is not None:
            return refusal
    if records is not None and version < _FIRST_V2_VERSION and is_legacy(records):
        try:
            records = await broker.io.run(up_convert, records)
        except _CONVERSION_ERRORS as exc:
            code = next(code for kind, code in _CONVERSION_REFUSALS if isinstance(exc, kind))
            return AppendResult(code, error_message=str(exc))
    return _refusal(records, version) or (partition, records, guard)


def _prepared_now(broker, topic, index, records, version, transaction):
    """:func:`_prepare` of a partition that needs no wait before its append (met already,
    no verification asked, no up-conversion), on the event loop; None for the others."""
    if transaction is not None and transaction is not NO_VERIFICATION:
        return None
    partition = broker.replicas.hosted(topic, index)
    if partition is None or records is not None and version < _FIRST_V2_VERSION \
            and is_legacy(records):
        return None
    return _refusal(records, version) or (partition, records, transaction)


def _refusal(records, version):
    """The AppendResult refusing a partition's records before storage sees them, or None:
    null records, and zstd before v7 (Kafka's ProduceRequest.validateRecords)."""
    if records is None:
        return AppendResult(ErrorCode.INVALID_RECORD,
                            error_message="the partition's records are null")
    if _FIRST_V2_VERSION <= version < _FIRST_ZSTD_VERSION and _is_zstd_batch(records):
        return AppendResult(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                            error_message=f"Produce v{version} cannot carry zstd-compressed "
                                          f"records; zstd needs v{_FIRST_ZSTD_VERSION}+")
    return None


def _count_in(broker, result):
    broker.metrics.messages_in += result.record_count
    broker.metrics.bytes_in += result.size
    return result


async def _verify(broker, partition, records, version, transaction):
    """KIP-890's verification of the partition's first transactional batch: ``(refusal
    AppendResult or None, guard)``; see the module docstring."""
    transactional_id, producer_id, epoch = transaction
    first = _transactional_batches(records)
    if not first:
        return None, None
    sequence = first[0][2]
    try:
        guard = await partition.begin_verification(producer_id, sequence, epoch)
    except PartitionError as exc:
        return AppendResult(exc.error_code), None
    if guard is None:        # a transaction of this producer is open there: nothing to verify
        return None, None
    answer = await broker.txn_verification.verify(transactional_id, producer_id, epoch,
                                                  {partition.key})
    code = answer[partition.key]
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    elif code == ErrorCode.TRANSACTION_ABORTABLE and version < _FIRST_ABORTABLE_VERSION:
        code = ErrorCode.INVALID_TXN_STATE
    if code in _RETRIED_AS_NOT_ENOUGH_REPLICAS:
        return AppendResult(ErrorCode.NOT_ENOUGH_REPLICAS, error_message=(
            f"Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {ErrorCode(code).name}")), None
    if code == ErrorCode.INVALID_TXN_STATE:
        return AppendResult(code, error_message="Partition was not added to the "
                                                "transaction"), None
    if code:
        return AppendResult(code), None
    return None, guard


async def produce(broker, context, request):
    body = request.body
    acks = body["acks"]
    authorizer = broker.authorizer
    transactional_id = body.get("transactional_id")
    if transactional_id == MIRROR_APPEND_ID:
        return await mirror_produce(broker, context, request)
    producers = {b[:2] for t in body["topic_data"] for p in t["partition_data"]
                 for b in _transactional_batches(p["records"])}
    if producers and (transactional_id is None or not authorizer.authorize(
            context, AclOperation.WRITE, Resource.transactional_id(transactional_id))):
        return _produce_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    writable = authorizer.authorized_names(context, AclOperation.WRITE, ResourceType.TOPIC,
                                           (t["name"] for t in body["topic_data"]))
    if acks not in (0, 1, -1):
        return _produce_error(body, ErrorCode.INVALID_REQUIRED_ACKS, writable)
    if transactional_id and broker.transactions is None:
        return _produce_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, writable)
    if len(producers) > 1:
        # Kafka: "Transactional records contained more than one producer ID".
        return _produce_error(body, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    transaction = None
    if producers:
        ((producer_id, epoch),) = producers
        transaction = (transactional_id, producer_id, epoch) \
            if broker.transactions.config.partition_verification else NO_VERIFICATION
    entries = [(t["name"], p["index"], p["records"])
               for t in body["topic_data"] for p in t["partition_data"]]
    results = await _append_all(broker, entries, writable, acks, body["timeout_ms"],
                                request.api_version, transaction)
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
                          "log_append_time_ms": r.log_append_time,
                          "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                                            for i, m in r.record_errors],
                          "error_message": r.error_message})
        responses.append({"name": topic["name"], "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": 0}


async def _append_all(broker, entries, writable, acks, timeout_ms, version, transaction):
    """The AppendResult of each entry ``(topic, index, records)``, in order.

    Each entry is judged on its own, in Kafka's order (authorization, then
    :func:`_prepare`); a refusal is that partition's answer and the others go on. The
    entries that pass, to partitions that gather their appends (the single broker's),
    are appended in one storage-thread call for the whole request
    (``ReplicaManager.append_gathered``); entries that need a wait first (a lookup, a
    verification, an up-conversion) are prepared concurrently, and those of other
    partitions appended each on its own, concurrently. A partition named twice keeps
    its entries' order: its entries are prepared and appended one after the other,
    each on its own (a verification guard is the partition's latest only)."""
    results = [None] * len(entries)
    by_partition = {}
    for i, (name, index, _records) in enumerate(entries):
        by_partition.setdefault((name, index), []).append(i)
    gathered = []       # (entry position, partition, records, verification guard)
    waiting = []        # the entry positions of a partition, to prepare with waits

    for positions in by_partition.values():
        name, index, records = entries[positions[0]]
        if len(positions) > 1:
            waiting.append(positions)
        elif name not in writable:
            results[positions[0]] = AppendResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        else:
            ready = _prepared_now(broker, name, index, records, version, transaction)
            if ready is None:
                waiting.append(positions)
            elif isinstance(ready, AppendResult):
                results[positions[0]] = ready
            elif ready[0].gathers_appends:
                gathered.append((positions[0],) + ready)
            else:
                waiting.append(positions)

    async def prepare_in_order(positions):
        for i in positions:
            name, index, records = entries[i]
            if name not in writable:
                results[i] = AppendResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            ready = await _prepare(broker, name, index, records, version, transaction)
            if isinstance(ready, AppendResult):
                results[i] = ready
            elif ready[0].gathers_appends and len(positions) == 1:
                gathered.append((i,) + ready)
            else:
                partition, records, guard = ready
                results[i] = _count_in(broker, await partition.append(
                    records, acks=acks, timeout_ms=timeout_ms, verification_guard=guard))

    if waiting:
        await asyncio.gather(*(prepare_in_order(ix) for ix in waiting))
    if gathered:
        gathered.sort()       # request order (the ones that waited were added late)
        appended = await broker.replicas.append_gathered(
            [(partition, records, guard) for _, partition, records, guard in gathered])
        if acks != -1:
            for (i, _, _, _), result in zip(gathered, appended):
                results[i] = _count_in(broker, result)
            return results
        # One deadline for the request's acks=-1 waits, as when they waited side by side.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        for (i, partition, _, _), result in zip(gathered, appended):
            left_ms = (deadline - loop.time()) * 1000.0
            results[i] = _count_in(broker, await partition.await_acks(
                result, acks, max(left_ms, 0.0)))
    return results


def _is_zstd_batch(records):
    """Whether the first entry is a v2 batch compressed with zstd (what ProduceRequest.
    validateRecords refuses before v7)."""
    return (len(records) > ATTRIBUTES_OFFSET + 1 and records[MAGIC_OFFSET] == MAGIC_V2
            and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == CODEC_ZSTD)


def _transactional_batches(records):
    """``[(producer id, epoch, base sequence)]`` of the v2 batches with the transactional bit
    in ``records`` (Kafka reads every batch; legacy message sets have no such bit).
    Malformed framing stops the walk: storage refuses those bytes."""
    found = []
    records = records or b""
    pos = 0
    while pos + BASE_SEQUENCE_OFFSET + 4 <= len(records):
        if records[pos + MAGIC_OFFSET] == MAGIC_V2 and \
                records[pos + ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK:
            found.append(_PRODUCER.unpack_from(records, pos + PRODUCER_ID_OFFSET))
        length = int.from_bytes(records[pos + LENGTH_OFFSET:pos + LOG_OVERHEAD], "big",
                                signed=True)
        if length <= 0:
            break
        pos += LOG_OVERHEAD + length
    return found


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
