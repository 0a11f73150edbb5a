"""Produce: batches in, offsets out.

The handler only translates between the wire and the partition seam
(``broker.replicas``, replica_manager.py and partition.py): it never touches a Log, and
every storage call behind it runs in a storage thread. The produce path never decodes
records: storage validates the batch bytes once (framing, CRC and Kafka's LogValidator
rules, record boundaries walked in C), the partition stamps its leader epoch, and offsets
are assigned by rewriting baseOffset before the bytes are appended.
"""

import asyncio

from ...protocol import ErrorCode
from ..partition import AppendResult, PartitionError


async def _append(broker, topic, index, records, acks, timeout_ms):
    try:
        partition = await broker.replicas.get(topic, index)
    except PartitionError as exc:
        return AppendResult(exc.error_code)
    result = await partition.append(records, acks=acks, timeout_ms=timeout_ms)
    broker.metrics.messages_in += result.record_count
    broker.metrics.bytes_in += result.size
    return result


async def produce(broker, conn, request):
    body = request.body
    acks = body["acks"]
    if acks not in (0, 1, -1):
        return _produce_error(body, ErrorCode.INVALID_REQUIRED_ACKS)
    if body.get("transactional_id"):
        return _produce_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
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
            results[i] = await _append(broker, name, index, records, acks, body["timeout_ms"])

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
                          "log_append_time_ms": -1, "record_errors": [],
                          "error_message": r.error_message})
        responses.append({"name": topic["name"], "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": 0}


def _produce_error(body, code):
    return {"throttle_time_ms": 0, "responses": [
        {"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": code, "base_offset": -1, "log_start_offset": -1,
             "log_append_time_ms": -1, "record_errors": [], "error_message": None}
            for p in t["partition_data"]]} for t in body["topic_data"]]}


HANDLERS = {0: produce}
