"""ListOffsets, DeleteRecords, InitProducerId, OffsetForLeaderEpoch: the per-partition
offset questions and the producer-id handshake.

Each handler translates between the wire and the partition seam (``broker.replicas``);
storage calls run in storage threads.
"""

from ...protocol import ErrorCode
from ..partition import PartitionError


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


HANDLERS = {2: list_offsets, 21: delete_records, 22: init_producer_id,
            23: offset_for_leader_epoch}
