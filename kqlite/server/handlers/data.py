"""Produce, Fetch, ListOffsets, DeleteRecords, InitProducerId, OffsetForLeaderEpoch.

The produce path never decodes records: the batch bytes are validated (framing
and CRC in C), offsets are assigned by rewriting baseOffset, and the bytes are
appended. Fetch answers with file regions of whole batches, sent with sendfile.
"""

import asyncio
import logging
import os
import time

from ... import _native
from ...errors import UnknownTopicError
from ...errors import (CorruptRecordError, InvalidRecordError, KqliteError,
                       OffsetOutOfRangeError, RecordTooLargeError)
from ...protocol import ErrorCode, FileRegion
from ..producer_state import PartitionProducerState, batch_producer_fields

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3

logger = logging.getLogger("kqlite.server")


def _partition_log(broker, topic, partition):
    try:
        return broker.db.log(topic, partition), ErrorCode.NONE
    except UnknownTopicError:
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _producer_state(broker, topic, partition, log):
    key = (topic, partition)
    state = broker.producer_states.get(key)
    if state is None:
        state = broker.producer_states[key] = PartitionProducerState()
        state.rebuild(log)
    return state


def _append(broker, topic, partition, records):
    """Append one partition's records; returns the partition response fields."""
    log, code = _partition_log(broker, topic, partition)
    if log is None:
        return {"error_code": code, "base_offset": -1}
    if not records:
        return {"error_code": ErrorCode.CORRUPT_MESSAGE, "base_offset": -1,
                "error_message": "empty record set"}
    data = bytes(records)
    batches, stop, status = _native.scan_batches(data, 0, len(data), True)
    if status != 0 or stop != len(data) or not batches:
        return {"error_code": ErrorCode.CORRUPT_MESSAGE, "base_offset": -1,
                "error_message": "record batch failed framing or CRC validation"}
    if any(b[5] != 2 for b in batches):
        return {"error_code": ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, "base_offset": -1,
                "error_message": "only record batch v2 (magic 2) is accepted"}
    state = _producer_state(broker, topic, partition, log)
    fields = [batch_producer_fields(data, b[0]) for b in batches]
    pid, epoch, seq, _count = fields[0]
    total = sum(f[3] for f in fields)
    error, duplicate = state.check(pid, epoch, seq, total)
    if error:
        return {"error_code": error, "base_offset": -1}
    if duplicate is not None:
        return {"error_code": 0, "base_offset": duplicate, "log_start_offset": log.start_offset}
    try:
        base = log.append_batches(data)
    except RecordTooLargeError as exc:
        return {"error_code": ErrorCode.MESSAGE_TOO_LARGE, "base_offset": -1,
                "error_message": str(exc)}
    except CorruptRecordError as exc:
        return {"error_code": ErrorCode.CORRUPT_MESSAGE, "base_offset": -1,
                "error_message": str(exc)}
    except InvalidRecordError as exc:  # e.g. a record without a key on a compacted topic
        return {"error_code": ErrorCode.INVALID_RECORD, "base_offset": -1,
                "error_message": str(exc)}
    except KqliteError as exc:
        return {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "base_offset": -1,
                "error_message": str(exc)}
    state.appended(pid, epoch, seq, total, base)
    broker.metrics.messages_in += total
    broker.metrics.bytes_in += len(data)
    return {"error_code": 0, "base_offset": base, "log_start_offset": log.start_offset}


async def produce(broker, conn, request):
    body = request.body
    acks = body["acks"]
    if acks not in (0, 1, -1):
        return _produce_error(body, ErrorCode.INVALID_REQUIRED_ACKS)
    if body.get("transactional_id"):
        return _produce_error(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    responses = []
    appended = False
    for topic in body["topic_data"]:
        parts = []
        for p in topic["partition_data"]:
            result = _append(broker, topic["name"], p["index"], p["records"])
            appended = appended or result["error_code"] == 0
            result.setdefault("log_start_offset", -1)
            result.setdefault("error_message", None)
            parts.append(dict(result, index=p["index"], log_append_time_ms=-1, record_errors=[]))
        responses.append({"name": topic["name"], "partition_responses": parts})
    if appended:
        await broker.notify_data()
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}


def _produce_error(body, code):
    return {"throttle_time_ms": 0, "responses": [
        {"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": code, "base_offset": -1, "log_start_offset": -1,
             "log_append_time_ms": -1, "record_errors": [], "error_message": None}
            for p in t["partition_data"]]} for t in body["topic_data"]]}


def _fetch_partition(broker, topic, p, budget):
    log, code = _partition_log(broker, topic, p["partition"])
    base = {"partition_index": p["partition"], "error_code": code, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": None}
    if log is None:
        return base, 0
    base.update(high_watermark=log.high_watermark, last_stable_offset=log.high_watermark,
                log_start_offset=log.start_offset)
    base["high_watermark"] = base["last_stable_offset"] = log.high_watermark
    try:
        region = log.fetch_region(p["fetch_offset"], min(p["partition_max_bytes"], budget))
    except OffsetOutOfRangeError:
        base["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        return base, 0
    except KqliteError as exc:    # a damaged segment fails this partition, not the connection
        logger.error("fetch %s-%d at %d: %s", topic, p["partition"], p["fetch_offset"], exc)
        base["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        return base, 0
    if region is None:
        base["records"] = b""
        return base, 0
    fd, position, length = region
    base["records"] = FileRegion(fd, position, length)
    return base, length


def _release(part):
    if isinstance(part["records"], FileRegion):
        os.close(part["records"].fd)
        part["records"] = b""


def _fetch_once(broker, body, version):
    budget = body.get("max_bytes", 0x7FFFFFFF) if version >= 3 else 0x7FFFFFFF
    responses = []
    total = 0
    for topic in body["topics"]:
        parts = []
        for p in topic["partitions"]:
            part, size = _fetch_partition(broker, topic["topic"], p, max(budget - total, 1)
                                          if total == 0 else budget - total)
            if total and size > budget - total:
                _release(part)
                part["records"] = b""
                size = 0
            total += size
            parts.append(part)
        responses.append({"topic": topic["topic"], "partitions": parts})
    return responses, total


async def fetch(broker, conn, request):
    body = request.body
    deadline = time.monotonic() + body["max_wait_ms"] / 1000.0
    min_bytes = max(1, body["min_bytes"])
    while True:
        responses, total = _fetch_once(broker, body, request.api_version)
        errors = any(p["error_code"] for t in responses for p in t["partitions"])
        left = deadline - time.monotonic()
        if total >= min_bytes or errors or left <= 0 or broker._stopping:
            break
        for t in responses:
            for part in t["partitions"]:
                _release(part)
        # Delayed fetch: wake on a produce here, or poll for appends by other processes.
        try:
            async with broker.data_arrived:
                await asyncio.wait_for(broker.data_arrived.wait(), min(left, 0.05))
        except asyncio.TimeoutError:
            pass
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}


async def list_offsets(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition_index": p["partition_index"], "error_code": 0,
                     "timestamp": -1, "offset": -1, "leader_epoch": 0, "old_style_offsets": []}
            log, code = _partition_log(broker, t["name"], p["partition_index"])
            if log is None:
                entry["error_code"] = code
            else:
                ts = p["timestamp"]
                if ts == EARLIEST:
                    entry["offset"] = log.start_offset
                elif ts == LATEST:
                    entry["offset"] = log.high_watermark
                elif ts == MAX_TIMESTAMP:
                    entry["offset"], entry["timestamp"] = _max_timestamp(log)
                else:
                    found = log.offset_for_time(ts)
                    if found is not None:
                        rec = next(iter(log.read(found, 1)))
                        entry["offset"], entry["timestamp"] = found, rec.timestamp
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _max_timestamp(log):
    best = (-1, -1)
    for seg in log._segments:
        if seg.max_timestamp > best[1]:
            best = (seg.offset_of_max_timestamp, seg.max_timestamp)
    return best


async def delete_records(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition_index": p["partition_index"], "low_watermark": -1,
                     "error_code": 0}
            log, code = _partition_log(broker, t["name"], p["partition_index"])
            if log is None:
                entry["error_code"] = code
            else:
                try:
                    target = log.high_watermark if p["offset"] == -1 else p["offset"]
                    entry["low_watermark"] = log.delete_records(target)
                except OffsetOutOfRangeError:
                    entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                except KqliteError as exc:
                    logger.error("delete records of %s-%d: %s", t["name"],
                                 p["partition_index"], exc)
                    entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def init_producer_id(broker, conn, request):
    if request.body.get("transactional_id"):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": broker.producer_ids.allocate(),
            "producer_epoch": 0}


async def offset_for_leader_epoch(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1,
                     "end_offset": -1}
            log, code = _partition_log(broker, t["topic"], p["partition"])
            if log is None:
                entry["error_code"] = code
            else:
                epoch, end = log.epochs.end_offset_for(p["leader_epoch"], log.end_offset)
                if epoch < 0 and not log.epochs.entries:
                    epoch, end = 0, log.end_offset  # no epochs recorded: one implicit epoch
                entry.update(leader_epoch=epoch, end_offset=end)
            parts.append(entry)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 21: delete_records, 22: init_producer_id,
            23: offset_for_leader_epoch}
