"""FindCoordinator and committed offsets: OffsetCommit and OffsetFetch.

Commits are checked against the group's generation by the coordinator, then stored in
``__consumer_offsets`` through its committed offsets (coordinator/group/offsets.py: on a
single broker, the data dir's, shared with the embedded API): offset, leader epoch,
metadata and commit timestamp, as Kafka's OffsetCommitValue holds them. Which broker
coordinates a group is the coordinator runtime's answer; a broker that does not
coordinate the group answers NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it
loads it).

Version notes (Kafka 3.9's KafkaApis): OffsetCommit v0 and OffsetFetch v0 were served from
ZooKeeper, outside any group: a v0 commit is checked against nothing but the metadata size,
and a v0 fetch answers no metadata. kqlite keeps them in the one offsets store, so v0 and
later clients of a group see the same offsets.

Authorization comes before the coordinator is asked anything (Kafka's KafkaApis):
FindCoordinator needs DESCRIBE on the group or the transactional id (GROUP_ /
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that key), and CLUSTER_ACTION for a share
group's key (CLUSTER_AUTHORIZATION_FAILED). OffsetCommit needs READ on the group (every
partition GROUP_AUTHORIZATION_FAILED) and READ on each topic (its partitions
TOPIC_AUTHORIZATION_FAILED, before UNKNOWN_TOPIC_OR_PARTITION); nothing is committed for
a refused partition. OffsetFetch needs DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED
for that group) and DESCRIBE on each topic: a topic asked by name is answered
TOPIC_AUTHORIZATION_FAILED, and a request for all of a group's offsets silently leaves
out the topics the principal may not describe.
"""

import functools
import logging

from ...errors import KqliteError
from ...format.batch import now_ms
from ...format.offset_records import OffsetAndMetadata
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, Resource, ResourceType
from ..authorization import refusal_message
from ..coordinator.group.events import Commit
from ..partition import PartitionError

log = logging.getLogger("kqlite.server")

# Kafka's offset.metadata.max.bytes default; Kafka compares it with the metadata's Java
# String length (UTF-16 code units).
OFFSET_METADATA_MAX = 4096

# WIRE: Kafka-defined coordinator key types (FindCoordinatorRequest.CoordinatorType).
KEY_GROUP, KEY_TRANSACTION, KEY_SHARE = 0, 1, 2

# Errors.message() of the codes FindCoordinator answers with (the text Kafka sends).
_MESSAGES = {
    ErrorCode.NONE: "NONE",
    **{code: refusal_message(code) for code in (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED)},
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed "
                               "by the client library or the message was sent to an "
                               "incompatible broker. See the broker logs for more details.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
}


def _find_refusal(broker, context, version, key_type, key):
    """The refusal of one FindCoordinator key before any lookup (Kafka's getCoordinator
    order: the group's or transactional id's DESCRIBE, then a share key's version and
    CLUSTER_ACTION), else None."""
    authorizer = broker.authorizer
    if key_type == KEY_GROUP and not authorizer.authorize(
            context, AclOperation.DESCRIBE, Resource.group(key)):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if key_type == KEY_TRANSACTION and not authorizer.authorize(
            context, AclOperation.DESCRIBE, Resource.transactional_id(key)):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if key_type == KEY_SHARE and version >= 6 and not authorizer.authorize(
            context, AclOperation.CLUSTER_ACTION, CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


async def _coordinator_for(broker, context, version, key_type, key):
    """(error, node id, host, port) of the coordinator for one key of ``key_type``."""
    refused = _find_refusal(broker, context, version, key_type, key)
    if refused is not None:
        return refused, -1, "", -1
    if key_type == KEY_GROUP:
        try:
            return await broker.coordinator.runtime.coordinator_for(key)
        except KqliteError as exc:
            # Kafka's answer when it cannot place the group (in a cluster: the offsets
            # topic cannot be created or read while ZooKeeper is unreachable).
            log.warning("FindCoordinator for group %r: %s", key, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    if key_type == KEY_TRANSACTION:
        # No transaction coordinator: the error a transactional producer treats as fatal
        # (librdkafka, the Java client, kafka-python, aiokafka), the same that Produce and
        # InitProducerId give a transactional id. A retriable one would leave
        # init_transactions() retrying until its timeout.
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif key_type == KEY_SHARE and version >= 6:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE  # Kafka 3.9 has no share coordinator yet
    else:
        error = ErrorCode.INVALID_REQUEST  # share keys before v6, unknown key types
    return error, -1, "", -1


def _on_listener(broker, context, found):
    """The coordinator's address on the listener the request arrived on (Kafka answers
    each client with that listener's endpoints); COORDINATOR_NOT_AVAILABLE when the
    coordinator has no such listener."""
    error, node, host, port = found
    if error:
        return found
    address = broker.address_of(node, context.listener_name)
    if address is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return error, node, *address


async def find_coordinator(broker, context, request):
    body = request.body
    version = request.api_version
    key_type = body.get("key_type", KEY_GROUP)
    if version >= 4:
        coordinators = []
        for key in body["coordinator_keys"]:
            error, node, host, port = _on_listener(broker, context, await _coordinator_for(
                broker, context, version, key_type, key))
            coordinators.append({"key": key, "node_id": node, "host": host, "port": port,
                                 "error_code": error,
                                 "error_message": _MESSAGES[error] if error else None})
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    error, node, host, port = _on_listener(broker, context, await _coordinator_for(
        broker, context, version, key_type, body["key"]))
    if error:
        log.debug("FindCoordinator v%d for %r (key type %d) from %s: error %s", version,
                  body["key"], key_type, request.client_id, error.name)
    return {"throttle_time_ms": 0, "error_code": error, "error_message": _MESSAGES[error],
            "node_id": node, "host": host, "port": port}


def _too_large(metadata):
    # Code points never outnumber UTF-16 units: a long string is refused without encoding it.
    return metadata is not None and (len(metadata) > OFFSET_METADATA_MAX or
                                     len(metadata.encode("utf-16-le")) // 2 > OFFSET_METADATA_MAX)


async def partitions_exist(broker, topics, key="partitions", index="partition_index"):
    """{(topic, partition): exists} for every partition named in a request's topics (one
    lookup per topic, however many partitions the request names)."""
    counts = {}
    out = {}
    for t in topics:
        name = t["name"]
        if name not in counts:
            try:
                counts[name] = len((await broker.replicas.topic(name)).partitions)
            except PartitionError:
                counts[name] = 0
        for p in t[key]:
            i = p if index is None else p[index]
            out[(name, i)] = 0 <= i < counts[name]
    return out


async def offset_commit(broker, context, request):
    body = request.body
    version = request.api_version
    group_id = body["group_id"]
    authorizer = broker.authorizer
    if not authorizer.authorize(context, AclOperation.READ, Resource.group(group_id)):
        return _offset_commit_error(body, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = authorizer.authorized_names(context, AclOperation.READ, ResourceType.TOPIC,
                                           (t["name"] for t in body["topics"]))
    exists = await partitions_exist(broker, [t for t in body["topics"] if t["name"] in readable])
    code = broker.coordinator.owner_error(group_id) if any(exists.values()) else ErrorCode.NONE
    if not code and version >= 1 and any(exists.values()):
        generation = body.get("generation_id_or_member_epoch", -1)
        commit = Commit(body.get("member_id", ""), generation, body.get("group_instance_id"))
        code = broker.coordinator.check_commit(group_id, commit)
        if code:
            log.debug("group %s: OffsetCommit from %s (generation %d): error %d", group_id,
                      commit.member_id, generation, code)
    now = now_ms()
    answers = []
    store = {}
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            metadata = p.get("committed_metadata")
            if t["name"] not in readable:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not exists[tp]:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif code:
                err = code
            elif _too_large(metadata):
                err = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                err = ErrorCode.NONE
                timestamp = p.get("commit_timestamp", -1)  # only v1 carries one
                store[tp] = OffsetAndMetadata(
                    p["committed_offset"], p.get("committed_leader_epoch", -1), metadata or "",
                    now if timestamp == -1 else timestamp)
            parts.append({"partition_index": p["partition_index"], "error_code": err})
        answers.append({"name": t["name"], "partitions": parts})
    if store:
        stored = await broker.coordinator.offsets.commit(group_id, store, now)
        for t in answers:
            for p in t["partitions"]:
                p["error_code"] = stored.get((t["name"], p["partition_index"]), p["error_code"])
    return {"throttle_time_ms": 0, "topics": answers}


async def _group_offsets(broker, context, group_id, wanted, require_stable):
    """Answers for one group's OffsetFetch: topics with their partitions. ``wanted`` is
    [(topic, [partitions])], or None for every committed partition. Only the topics the
    principal may DESCRIBE are looked up: the others asked by name are answered
    TOPIC_AUTHORIZATION_FAILED, the others committed are left out."""
    describable = functools.partial(broker.authorizer.authorized_names, context,
                                    AclOperation.DESCRIBE, ResourceType.TOPIC)
    committed, pending = await broker.coordinator.offsets.fetch(group_id, require_stable)
    if wanted is None:
        by_topic = {}
        for t, p in sorted(committed):
            by_topic.setdefault(t, []).append(p)
        shown = describable(by_topic)
        wanted = [(t, ps) for t, ps in by_topic.items() if t in shown]
    else:
        shown = describable(name for name, _ in wanted)
    topics = []
    for name, partitions in wanted:
        parts = []
        for p in partitions:
            if name not in shown:
                parts.append(_partition(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            c = committed.get((name, p))
            if (name, p) in pending:  # a commit still being written: not stable yet
                parts.append(_partition(p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif c is None:
                parts.append(_partition(p, -1, -1, "", ErrorCode.NONE))
            else:
                parts.append(_partition(p, c.offset, c.leader_epoch, c.metadata, ErrorCode.NONE))
        topics.append({"name": name, "partitions": parts})
    return topics


def _partition(index, offset, epoch, metadata, error):
    return {"partition_index": index, "committed_offset": offset,
            "committed_leader_epoch": epoch, "metadata": metadata, "error_code": error}


def _wanted(topics):
    return None if topics is None else [(t["name"], t["partition_indexes"]) for t in topics]


async def offset_fetch(broker, context, request):
    body = request.body
    version = request.api_version
    require_stable = body.get("require_stable", False)
    if version >= 8:
        groups = []
        for g in body["groups"]:
            code = _fetch_refusal(broker, context, g["group_id"]) or \
                broker.coordinator.owner_error(g["group_id"])
            topics = [] if code else await _group_offsets(
                broker, context, g["group_id"], _wanted(g["topics"]), require_stable)
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": code})
        return {"throttle_time_ms": 0, "groups": groups}
    code = _fetch_refusal(broker, context, body["group_id"]) or \
        broker.coordinator.owner_error(body["group_id"])
    if code:
        return _offset_fetch_error(version, body, code)
    topics = await _group_offsets(broker, context, body["group_id"], _wanted(body["topics"]),
                                  require_stable)
    if version == 0:
        # Kafka's v0 (ZooKeeper) answer: no metadata, and nothing for partitions that
        # do not exist.
        exists = await partitions_exist(broker, body["topics"], "partition_indexes", None)
        for t in topics:
            for p in t["partitions"]:
                p["metadata"] = ""
                if not exists[(t["name"], p["partition_index"])]:
                    p["committed_offset"] = -1
    return {"throttle_time_ms": 0, "error_code": 0, "topics": topics}


def _fetch_refusal(broker, context, group_id):
    """GROUP_AUTHORIZATION_FAILED unless the principal may DESCRIBE the group."""
    if broker.authorizer.authorize(context, AclOperation.DESCRIBE, Resource.group(group_id)):
        return ErrorCode.NONE
    return ErrorCode.GROUP_AUTHORIZATION_FAILED


def _offset_commit_error(body, code):
    """A whole OffsetCommit refused with ``code`` in every partition it names
    (OffsetCommitRequest.getErrorResponse)."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in body["topics"]]}


def _offset_fetch_error(version, body, code):
    """A whole OffsetFetch (v0-7) refused with ``code``, in Kafka's layout of the version:
    v0 and v1 carry it in every partition asked for, later versions at the top."""
    if version >= 2:
        return {"throttle_time_ms": 0, "error_code": code, "topics": []}
    return {"throttle_time_ms": 0, "error_code": code, "topics": [
        {"name": t["name"], "partitions": [_partition(p, -1, -1, "", code)
                                           for p in t["partition_indexes"]]}
        for t in body["topics"] or ()]}


HANDLERS = {ApiKey.FIND_COORDINATOR: find_coordinator, ApiKey.OFFSET_COMMIT: offset_commit,
            ApiKey.OFFSET_FETCH: offset_fetch}
