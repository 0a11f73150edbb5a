"""Produce, Fetch, ListOffsets, DeleteRecords, InitProducerId, OffsetForLeaderEpoch.

These handlers only translate between the wire and the partition seam
(``broker.replicas``, replica_manager.py and partition.py): they never touch a Log,
and every storage call behind them runs in a storage thread. The produce path never
decodes records: storage validates the batch bytes once (framing, CRC and Kafka's
LogValidator rules, record boundaries walked in C), the partition stamps its leader
epoch, and offsets are assigned by rewriting baseOffset before the bytes are appended.
Fetch answers with file regions of whole batches, sent with sendfile.
"""

import asyncio

from ...protocol import ErrorCode
from ..partition import AppendResult, PartitionError
from ..replica_manager import FetchPartition


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


async def fetch(broker, conn, request):
    body = request.body
    fetches = [FetchPartition(t["topic"], p["partition"], p["fetch_offset"],
                              p["partition_max_bytes"], p.get("current_leader_epoch", -1))
               for t in body["topics"] for p in t["partitions"]]
    max_bytes = body.get("max_bytes", 0x7FFFFFFF) if request.api_version >= 3 else 0x7FFFFFFF
    results = iter(await broker.replicas.fetch_messages(
        fetches, max_bytes=max_bytes, min_bytes=max(1, body["min_bytes"]),
        max_wait_ms=body["max_wait_ms"], replica_id=body.get("replica_id", -1)))
    responses = []
    for topic in body["topics"]:
        parts = []
        for p in topic["partitions"]:
            r = next(results)
            parts.append({"partition_index": p["partition"], "error_code": r.error_code,
                          "high_watermark": r.high_watermark,
                          "last_stable_offset": r.last_stable_offset,
                          "log_start_offset": r.log_start_offset, "aborted_transactions": None,
                          "preferred_read_replica": -1, "records": r.records})
        responses.append({"topic": topic["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}


async def list_offsets(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition_index": p["partition_index"], "error_code": 0,
                     "timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
            try:
                partition = await broker.replicas.get(t["name"], p["partition_index"])
                entry["offset"], entry["timestamp"], entry["leader_epoch"] = \
                    await partition.list_offset(
                        p["timestamp"], current_leader_epoch=p.get("current_leader_epoch", -1))
            except PartitionError as exc:
                entry["error_code"] = exc.error_code
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def delete_records(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition_index": p["partition_index"], "low_watermark": -1,
                     "error_code": 0}
            try:
                partition = await broker.replicas.get(t["name"], p["partition_index"])
                entry["low_watermark"] = await partition.delete_records(p["offset"])
            except PartitionError as exc:
                entry["error_code"] = exc.error_code
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def init_producer_id(broker, conn, request):
    if request.body.get("transactional_id"):
        return {"throttle_time_ms": 0,
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    # Every thousandth id reserves a new block on disk (a file lock and an fsync).
    producer_id = await broker.io.run(broker.producer_ids.allocate)
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
            "producer_epoch": 0}


async def offset_for_leader_epoch(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1,
                     "end_offset": -1}
            try:
                partition = await broker.replicas.get(t["topic"], p["partition"])
                entry["leader_epoch"], entry["end_offset"] = \
                    await partition.end_offset_for_epoch(
                        p["leader_epoch"], current_leader_epoch=p.get("current_leader_epoch", -1))
            except PartitionError as exc:
                entry["error_code"] = exc.error_code
            parts.append(entry)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 21: delete_records, 22: init_producer_id,
            23: offset_for_leader_epoch}
