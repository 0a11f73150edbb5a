"""Group membership through the coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, ListGroups.

The handlers only translate: request bodies into the group state machine's inputs
(coordinator/group/events.py) and its results into response bodies, in the layout of every
version as the codec expects it. A group another broker coordinates is described with
NOT_COORDINATOR (and no state, as Kafka's EmptyGroup summary); ListGroups lists only the
groups this broker coordinates.

Authorization comes first (Kafka's KafkaApis): JoinGroup, SyncGroup, Heartbeat and
LeaveGroup need READ on the group, else the request is answered GROUP_AUTHORIZATION_FAILED
and the coordinator never sees it. DescribeGroups needs DESCRIBE on each group (a refused
one gets GROUP_AUTHORIZATION_FAILED in its entry, with no authorized operations); its
KIP-430 field is the authorizer's ``authorized_operations`` of the group. ListGroups lists
every group with DESCRIBE on the cluster, else only those the principal may DESCRIBE,
silently.
"""

import logging

from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, Resource
from ..coordinator.group.events import Heartbeat, Join, Leave, Sync
from ..coordinator.group.state_machine import GroupState

log = logging.getLogger("kqlite.server")

OPERATIONS_NOT_ASKED = -2147483648  # WIRE: Kafka-defined (DescribeGroups default)
GROUP_TYPE = "classic"              # WIRE: Kafka-defined (Group.GroupType.CLASSIC)


def _may_read(broker, context, group_id):
    return broker.authorizer.authorize(context, AclOperation.READ, Resource.group(group_id))


async def join_group(broker, context, request):
    body = request.body
    if not _may_read(broker, context, body["group_id"]):
        # JoinGroupRequest.getErrorResponse: no generation, leader, member or protocol.
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "generation_id": -1, "protocol_type": None,
                "protocol_name": None if request.api_version >= 7 else "", "leader": "",
                "skip_assignment": False, "member_id": "", "members": []}
    log.debug("group %s: JoinGroup v%d from %r", body["group_id"], request.api_version,
              body["member_id"])
    result = await broker.coordinator.join(body["group_id"], Join(
        member_id=body["member_id"],
        group_instance_id=body.get("group_instance_id"),
        client_id=request.client_id or "",
        client_host=context.client_host,
        session_timeout_ms=body["session_timeout_ms"],
        rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1),
        protocol_type=body["protocol_type"],
        protocols=tuple((p["name"], bytes(p["metadata"])) for p in body["protocols"]),
        require_known_member_id=request.api_version >= 4,  # KIP-394
        supports_skipping_assignment=request.api_version >= 9))  # KIP-814
    protocol_name = result.protocol_name
    if request.api_version < 7 and protocol_name is None:
        protocol_name = ""  # nullable only from v7 (KIP-559)
    return {"throttle_time_ms": 0, "error_code": result.error,
            "generation_id": result.generation, "protocol_type": result.protocol_type,
            "protocol_name": protocol_name, "leader": result.leader,
            "skip_assignment": result.skip_assignment, "member_id": result.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "metadata": m.metadata} for m in result.members]}


async def sync_group(broker, context, request):
    body = request.body
    if not _may_read(broker, context, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "protocol_type": None, "protocol_name": None, "assignment": b""}
    result = await broker.coordinator.sync(body["group_id"], Sync(
        body["member_id"], body["generation_id"],
        tuple((a["member_id"], bytes(a["assignment"])) for a in body["assignments"]),
        body.get("group_instance_id")))
    return {"throttle_time_ms": 0, "error_code": result.error,
            "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
            "assignment": result.assignment}


async def heartbeat(broker, context, request):
    body = request.body
    if not _may_read(broker, context, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    code = broker.coordinator.heartbeat(body["group_id"], Heartbeat(
        body["member_id"], body["generation_id"], body.get("group_instance_id")))
    if code:
        log.debug("group %s: heartbeat from %s (generation %d): error %d", body["group_id"],
                  body["member_id"], body["generation_id"], code)
    return {"throttle_time_ms": 0, "error_code": code}


async def leave_group(broker, context, request):
    body = request.body
    if not _may_read(broker, context, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "members": []}
    if request.api_version < 3:
        code, results = broker.coordinator.leave(body["group_id"], [Leave(body["member_id"])])
        return {"throttle_time_ms": 0, "error_code": code or results[0][1]}
    code, results = broker.coordinator.leave(body["group_id"], [
        Leave(m["member_id"], m.get("group_instance_id")) for m in body["members"]])
    return {"throttle_time_ms": 0, "error_code": code, "members": [
        {"member_id": leave.member_id, "group_instance_id": leave.group_instance_id,
         "error_code": member_code} for leave, member_code in results]}


async def describe_groups(broker, context, request):
    await broker.coordinator.loaded()
    asked = bool(request.body.get("include_authorized_operations"))
    out = []
    for group_id in request.body["groups"]:
        if not broker.authorizer.authorize(context, AclOperation.DESCRIBE,
                                           Resource.group(group_id)):
            out.append(_group_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        operations = broker.authorizer.authorized_operations(context, Resource.group(group_id)) \
            if asked else OPERATIONS_NOT_ASKED
        code = broker.coordinator.owner_error(group_id)
        if code:
            out.append({"error_code": code, "error_message": None, "group_id": group_id,
                        "group_state": "", "protocol_type": "", "protocol_data": "",
                        "members": [], "authorized_operations": operations})
            continue
        g = broker.coordinator.group(group_id)
        if g is None:
            committed, _ = await broker.coordinator.offsets.fetch(group_id)
            state = GroupState.EMPTY if committed else GroupState.DEAD
            out.append({"error_code": 0, "error_message": None, "group_id": group_id,
                        "group_state": state.value, "protocol_type": "", "protocol_data": "",
                        "members": [], "authorized_operations": operations})
            continue
        # As Kafka: the protocol, metadata and assignments only of a Stable group.
        stable = g.state is GroupState.STABLE
        out.append({"error_code": 0, "error_message": None, "group_id": group_id,
                    "group_state": g.state.value, "protocol_type": g.protocol_type or "",
                    "protocol_data": (g.protocol_name or "") if stable else "",
                    "authorized_operations": operations,
                    "members": [{"member_id": m.member_id,
                                 "group_instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "member_metadata": m.metadata if stable else b"",
                                 "member_assignment": m.assignment if stable else b""}
                                for m in g.members()]})
    return {"throttle_time_ms": 0, "groups": out}


def _group_error(group_id, code):
    """A DescribeGroups entry refused with ``code`` (Kafka's DescribeGroupsResponse.groupError):
    no state, protocol or members, and authorized operations omitted."""
    return {"error_code": code, "error_message": None, "group_id": group_id,
            "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": OPERATIONS_NOT_ASKED}


async def list_groups(broker, context, request):
    authorizer = broker.authorizer
    every_group = authorizer.authorize(context, AclOperation.DESCRIBE, CLUSTER,
                                       log_if_denied=False)
    await broker.coordinator.loaded()
    # Kafka compares states and types case-insensitively; every group here is classic.
    states = {s.lower() for s in request.body.get("states_filter") or ()}
    types = {t.lower() for t in request.body.get("types_filter") or ()}
    if types and GROUP_TYPE not in types:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": []}
    groups = {}
    for group_id in await broker.coordinator.offsets.groups():
        groups[group_id] = ("consumer", GroupState.EMPTY.value)
    for group_id, g in broker.coordinator.groups.items():
        groups[group_id] = (g.protocol_type or "consumer", g.state.value)
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if broker.coordinator.runtime.loading \
        else ErrorCode.NONE
    listed = [gid for gid, (_, state) in sorted(groups.items())
              if not states or state.lower() in states]
    if not every_group:
        listed = [gid for gid in listed if authorizer.authorize(
            context, AclOperation.DESCRIBE, Resource.group(gid), log_if_denied=False)]
    return {"throttle_time_ms": 0, "error_code": code, "groups": [
        {"group_id": gid, "protocol_type": groups[gid][0], "group_state": groups[gid][1],
         "group_type": GROUP_TYPE} for gid in listed]}


HANDLERS = {ApiKey.JOIN_GROUP: join_group, ApiKey.SYNC_GROUP: sync_group,
            ApiKey.HEARTBEAT: heartbeat, ApiKey.LEAVE_GROUP: leave_group,
            ApiKey.DESCRIBE_GROUPS: describe_groups, ApiKey.LIST_GROUPS: list_groups}
