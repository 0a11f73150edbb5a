"""FindCoordinator and committed offsets: OffsetCommit and OffsetFetch.

Commits are checked against the group's generation by the coordinator, then stored in
``__consumer_offsets`` through the data dir (a storage thread), shared with the embedded
API.
"""

import logging

from ...errors import UnknownTopicError
from ...protocol import ErrorCode
from ..group_events import Commit

log = logging.getLogger("kqlite.server")


async def find_coordinator(broker, conn, request):
    body = request.body
    me = {"node_id": broker.broker_id, "host": broker.advertised_host, "port": broker.port}
    if request.api_version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            dict(me, key=k, error_code=0, error_message=None) for k in body["coordinator_keys"]]}
    key_type = body.get("key_type", 0)
    if key_type != 0:  # transactions are not supported
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "error_message": "kqlite has no transaction coordinator", "node_id": -1,
                "host": "", "port": -1}
    return dict(me, throttle_time_ms=0, error_code=0, error_message=None)


async def offset_commit(broker, conn, request):
    body = request.body
    generation = body.get("generation_id_or_member_epoch", body.get("generation_id", -1))
    code = broker.coordinator.check_commit(body["group_id"],
                                           Commit(body.get("member_id", ""), generation))
    if code:
        log.debug("group %s: OffsetCommit from %s (generation %d): error %d", body["group_id"],
                  body.get("member_id", ""), generation, code)
    topics = await broker.io.run(_store_commits, broker.db, body["group_id"], body["topics"],
                                 code)
    return {"throttle_time_ms": 0, "topics": topics}


def _store_commits(db, group_id, request_topics, code):
    """Validate and store one OffsetCommit's offsets (a storage thread: the topic files
    and the __consumer_offsets append touch the disk); the per-partition answers."""
    topics = []
    commits = {}
    for t in request_topics:
        parts = []
        for p in t["partitions"]:
            err = code
            if not err:
                try:
                    if not 0 <= p["partition_index"] < db.partitions_for(t["name"]):
                        raise UnknownTopicError(t["name"])
                    commits[(t["name"], p["partition_index"])] = \
                        (p["committed_offset"], p.get("committed_metadata") or "")
                except UnknownTopicError:
                    err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            parts.append({"partition_index": p["partition_index"], "error_code": err})
        topics.append({"name": t["name"], "partitions": parts})
    by_metadata = {}
    for tp, (offset, metadata) in commits.items():
        by_metadata.setdefault(metadata, {})[tp] = offset
    for metadata, offsets in by_metadata.items():
        db.offsets.commit(group_id, offsets, metadata)
    return topics


def _fetch_group(db, group_id, topics):
    committed = db.offsets.committed(group_id)     # may read __consumer_offsets: a storage thread
    if topics is None:
        wanted = {}
        for (t, p) in sorted(committed):
            wanted.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in wanted.items()]
    out = []
    for t in topics:
        out.append({"name": t["name"], "partitions": [
            {"partition_index": p, "committed_offset": committed.get((t["name"], p), -1),
             "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
            for p in t["partition_indexes"]]})
    return out


async def offset_fetch(broker, conn, request):
    body = request.body
    if request.api_version >= 8:
        return {"throttle_time_ms": 0, "groups": [
            {"group_id": g["group_id"], "error_code": 0,
             "topics": await broker.io.run(_fetch_group, broker.db, g["group_id"],
                                           g.get("topics"))}
            for g in body["groups"]]}
    return {"throttle_time_ms": 0, "error_code": 0,
            "topics": await broker.io.run(_fetch_group, broker.db, body["group_id"],
                                          body.get("topics"))}


HANDLERS = {10: find_coordinator, 8: offset_commit, 9: offset_fetch}
