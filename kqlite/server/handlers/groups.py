"""Group membership (via the coordinator) and committed offsets (via the data dir)."""

import logging

from ...errors import UnknownTopicError
from ...protocol import ErrorCode
from ..coordinator import EMPTY

log = logging.getLogger("kqlite.server")


async def join_group(broker, conn, request):
    response = await broker.coordinator.join(request, request.client_id, conn.host)
    if request.api_version < 7 and response["protocol_name"] is None:
        response["protocol_name"] = ""  # nullable only from v7 (KIP-559)
    return response


async def sync_group(broker, conn, request):
    return await broker.coordinator.sync(request)


async def heartbeat(broker, conn, request):
    return {"throttle_time_ms": 0, "error_code": broker.coordinator.heartbeat(request.body)}


async def leave_group(broker, conn, request):
    body = request.body
    if request.api_version < 3:
        (member, code), = broker.coordinator.leave(body["group_id"], [body["member_id"]])
        return {"throttle_time_ms": 0, "error_code": code}
    results = broker.coordinator.leave(body["group_id"], [m["member_id"] for m in body["members"]])
    return {"throttle_time_ms": 0, "error_code": 0, "members": [
        {"member_id": m, "group_instance_id": None, "error_code": code} for m, code in results]}


async def offset_commit(broker, conn, request):
    body = request.body
    generation = body.get("generation_id_or_member_epoch", body.get("generation_id", -1))
    code = broker.coordinator.check_commit(body["group_id"], generation, body.get("member_id", ""))
    if code:
        log.debug("group %s: OffsetCommit from %s (generation %d): error %d", body["group_id"],
                  body.get("member_id", ""), generation, code)
    topics = []
    commits = {}
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            err = code
            if not err:
                try:
                    if not 0 <= p["partition_index"] < broker.db.partitions_for(t["name"]):
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
        broker.db.offsets.commit(body["group_id"], offsets, metadata)
    return {"throttle_time_ms": 0, "topics": topics}


def _fetch_group(broker, group_id, topics):
    committed = broker.db.offsets.committed(group_id)
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
             "topics": _fetch_group(broker, g["group_id"], g.get("topics"))}
            for g in body["groups"]]}
    return {"throttle_time_ms": 0, "error_code": 0,
            "topics": _fetch_group(broker, body["group_id"], body.get("topics"))}


async def describe_groups(broker, conn, request):
    out = []
    for group_id in request.body["groups"]:
        g = broker.coordinator.group(group_id)
        if g is None:
            state = EMPTY if broker.db.offsets.committed(group_id) else "Dead"
            out.append({"error_code": 0, "error_message": None, "group_id": group_id,
                        "group_state": state, "protocol_type": "", "protocol_data": "",
                        "members": [], "authorized_operations": -2147483648})
            continue
        out.append({"error_code": 0, "error_message": None, "group_id": group_id,
                    "group_state": g.state, "protocol_type": g.protocol_type or "",
                    "protocol_data": g.protocol or "",
                    "authorized_operations": -2147483648,
                    "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "member_metadata": m.metadata_for(g.protocol),
                                 "member_assignment": m.assignment}
                                for m in g.members.values()]})
    return {"throttle_time_ms": 0, "groups": out}


async def list_groups(broker, conn, request):
    states = set(request.body.get("states_filter") or [])
    groups = {}
    for group_id in broker.db.offsets.groups():
        groups[group_id] = ("consumer", EMPTY)
    for group_id, g in broker.coordinator.groups.items():
        groups[group_id] = (g.protocol_type or "consumer", g.state)
    return {"throttle_time_ms": 0, "error_code": 0, "groups": [
        {"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": "classic"}
        for gid, (ptype, state) in sorted(groups.items()) if not states or state in states]}


HANDLERS = {11: join_group, 14: sync_group, 12: heartbeat, 13: leave_group, 8: offset_commit,
            9: offset_fetch, 15: describe_groups, 16: list_groups}
