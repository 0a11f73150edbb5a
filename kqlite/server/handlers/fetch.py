"""Fetch: reads for consumers and followers, answered with file regions of whole
batches that the connection sends with sendfile.

The handler only translates between the wire and the replica manager's
``fetch_messages``, which reads in storage threads and parks a fetch in the purgatory
until enough bytes arrive.
"""

from ..replica_manager import FetchPartition


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


HANDLERS = {1: fetch}
