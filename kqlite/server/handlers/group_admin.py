"""DeleteGroups and OffsetDelete, with the answers of Kafka 3.9's GroupCoordinator.

A group exists while the coordinator holds it (members, or an Empty group that had some)
or while it has committed offsets. Only an Empty group can be deleted (NON_EMPTY_GROUP
otherwise); its offsets, and its GroupMetadata record when it had a generation, get
tombstones in ``__consumer_offsets``, so they stay deleted after a restart and for the
embedded API. OffsetDelete removes offsets of an Empty group, or of the topics a live
consumer group is not subscribed to (GROUP_SUBSCRIBED_TO_TOPIC for the others); an Empty
group left without offsets is gone, as in Kafka.

Authorization first (Kafka's KafkaApis): DeleteGroups needs DELETE on each group
(GROUP_AUTHORIZATION_FAILED for that group, which is left as it is); OffsetDelete needs
DELETE on the group (the whole request GROUP_AUTHORIZATION_FAILED) and READ on each topic
(its partitions TOPIC_AUTHORIZATION_FAILED, before UNKNOWN_TOPIC_OR_PARTITION, their
offsets kept).
"""

import logging
import struct

from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import AclOperation, Resource, ResourceType
from ..coordinator.group.state_machine import GroupState
from .group_offsets import partitions_exist

log = logging.getLogger("kqlite.server")

CONSUMER_PROTOCOL = "consumer"  # WIRE: Kafka-defined (ConsumerProtocol.PROTOCOL_TYPE)


def _subscribed_topics(group):
    """The topics the members of a live consumer group subscribe to, or None when unknown
    (no protocol chosen yet, or metadata that is not Kafka's ConsumerProtocol): Kafka then
    counts every topic as subscribed."""
    if group.protocol_name is None:
        return None
    topics = set()
    for member in group.members():
        parsed = _subscription_topics(member.metadata)
        if parsed is None:
            return None
        topics.update(parsed)
    return topics


def _subscription_topics(data):
    """The topics of a ConsumerProtocolSubscription, read with its v0 layout (int16
    version, [string] topics), which every later version extends; None if it does not
    parse."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if count < 0 or count > len(data):
            return None
        topics = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            if n < 0 or pos + 2 + n > len(data):
                return None
            topics.append(bytes(data[pos + 2:pos + 2 + n]).decode("utf-8"))
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


async def delete_groups(broker, context, request):
    results = []
    for group_id in dict.fromkeys(request.body["groups_names"]):  # distinct, as Kafka
        if not broker.authorizer.authorize(context, AclOperation.DELETE,
                                           Resource.group(group_id)):
            results.append({"group_id": group_id,
                            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        # The coordinator removes an Empty group (and writes its GroupMetadata tombstone);
        # a group it does not hold exists only through its committed offsets.
        error = await broker.coordinator.delete(group_id)
        if error in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            _had, removed = await broker.coordinator.offsets.delete(group_id)
            if removed:
                error = ErrorCode.NONE
            if not error:
                log.info("group %s deleted (%d committed offsets removed)", group_id,
                         len(removed))
        results.append({"group_id": group_id, "error_code": error})
    return {"throttle_time_ms": 0, "results": results}


async def offset_delete(broker, context, request):
    body = request.body
    group_id = body["group_id"]
    authorizer = broker.authorizer
    if not authorizer.authorize(context, AclOperation.DELETE, Resource.group(group_id)):
        return _offset_delete_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = authorizer.authorized_names(context, AclOperation.READ, ResourceType.TOPIC,
                                           (t["name"] for t in body["topics"]))
    exists = await partitions_exist(broker, [t for t in body["topics"] if t["name"] in readable])
    code = broker.coordinator.owner_error(group_id)
    if code:
        return _offset_delete_error(code)
    await broker.coordinator.loaded()
    group = broker.coordinator.group(group_id)
    state = group.state if group is not None else None
    wanted = [tp for tp, ok in exists.items() if ok]
    errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp, ok in exists.items() if not ok}
    errors.update(((t["name"], p["partition_index"]), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                  for t in body["topics"] if t["name"] not in readable for p in t["partitions"])
    if state is GroupState.DEAD:
        return _offset_delete_error(ErrorCode.NOT_COORDINATOR)    # the broker is stopping
    if state not in (None, GroupState.EMPTY):
        if group.protocol_type not in (None, CONSUMER_PROTOCOL):
            return _offset_delete_error(ErrorCode.NON_EMPTY_GROUP)
        subscribed = _subscribed_topics(group)
        for tp in wanted:
            if subscribed is None or tp[0] in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        wanted = [tp for tp in wanted if tp not in errors]
    had, removed = await broker.coordinator.offsets.delete(group_id, wanted)
    had_offsets, left = bool(had), len(had) - len(removed)
    if group is None and not had_offsets:
        return _offset_delete_error(ErrorCode.GROUP_ID_NOT_FOUND)
    if state is GroupState.EMPTY and not left:
        # An Empty group without offsets is dead in Kafka; this only removes it if it is
        # still Empty.
        await broker.coordinator.delete(group_id)
    for tp in wanted:
        errors[tp] = ErrorCode.NONE
    topics = {}
    for t in body["topics"]:
        parts = topics.setdefault(t["name"], {})
        for p in t["partitions"]:
            parts[p["partition_index"]] = errors[(t["name"], p["partition_index"])]
    return {"error_code": 0, "throttle_time_ms": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": i, "error_code": e}
                                      for i, e in parts.items()]}
        for name, parts in topics.items()]}


def _offset_delete_error(code):
    return {"error_code": code, "throttle_time_ms": 0, "topics": []}


HANDLERS = {ApiKey.DELETE_GROUPS: delete_groups, ApiKey.OFFSET_DELETE: offset_delete}
