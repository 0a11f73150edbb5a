"""ListOffsets, DeleteRecords, InitProducerId, OffsetForLeaderEpoch: the per-partition
offset questions and the producer-id handshake.

Each handler translates between the wire and the partition seam (``broker.replicas``);
storage calls run in storage threads.

ListOffsets serves Kafka 3.9's versions 0-9. v0 answers a list of offsets by segment
(``Partition.legacy_offsets``: storage/legacy_offsets.py, Kafka's
legacyFetchOffsetsBefore). From v1 each special timestamp needs the version that
introduced it (KafkaApis' timestampMinSupportedVersion), else UNSUPPORTED_VERSION: -2
earliest and -1 latest (v1), -3 max timestamp (v7), -4 earliest local (v8: the log
start, kqlite has no tiered storage) and -5 latest tiered (v9: offset -1, as a broker
without tiered storage answers). A partition named twice in one request gets
INVALID_REQUEST for each entry.

Authorization comes first, as in Kafka's KafkaApis, and refuses per topic with
TOPIC_AUTHORIZATION_FAILED before anything else is checked (an unknown topic the
principal may not use is refused the same way as a known one): ListOffsets needs
DESCRIBE on the topic, DeleteRecords DELETE; OffsetForLeaderEpoch needs CLUSTER_ACTION
(a follower), else DESCRIBE on each topic (a consumer checking for truncation, KIP-320).
InitProducerId needs WRITE on its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
or, for an idempotent producer, IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(CLUSTER_AUTHORIZATION_FAILED).

DeleteRecords on a mirror topic is taken from its mirror only (POLICY_VIOLATION
otherwise: kqlite/server/mirror_guard.py), checked with the topic's cleanup policy.
"""

import logging
from collections import Counter

from ...errors import KqliteError, UnknownTopicError
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, Resource, ResourceType
from ..coordinator.txn.transitions import ExpectedProducer
from ..partition import CONSUMER_REPLICA_ID, READ_UNCOMMITTED, PartitionError, isolation_of
from ..mirror_guard import is_mirror_client, refuse_admin
from ..replica_manager import INTERNAL_TOPICS

logger = logging.getLogger("kqlite.server")

# WIRE: ListOffsets' special timestamps and the first version serving each.
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
_TIMESTAMP_MIN_VERSION = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8,
                          LATEST_TIERED: 9}
_HIGH_WATERMARK = -1     # WIRE: DeleteRecords' offset meaning "up to the high watermark"
_FIRST_FENCED_VERSION = 4  # WIRE: InitProducerId v4+ know PRODUCER_FENCED (KIP-588)


async def list_offsets(broker, context, request):
    version = request.api_version
    body = request.body
    named = Counter((t["name"], p["partition_index"])
                    for t in body["topics"] for p in t["partitions"])
    duplicates = {key for key, times in named.items() if times > 1}
    describable = broker.authorizer.authorized_names(
        context, AclOperation.DESCRIBE, ResourceType.TOPIC, (t["name"] for t in body["topics"]))
    topics = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            if t["name"] not in describable:
                parts.append(_offsets_error(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif version == 0:
                parts.append(await _legacy_offsets(broker, t["name"], p, body["replica_id"]))
            elif (t["name"], p["partition_index"]) in duplicates:
                parts.append(_offsets_error(p, ErrorCode.INVALID_REQUEST))
            else:
                parts.append(await _offset_for(broker, t["name"], p, version, isolation_of(
                    body.get("replica_id", CONSUMER_REPLICA_ID),
                    body.get("isolation_level", READ_UNCOMMITTED))))
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _offsets_error(p, code):
    return {"partition_index": p["partition_index"], "error_code": code, "timestamp": -1,
            "offset": -1, "leader_epoch": -1, "old_style_offsets": []}


async def _offset_for(broker, topic, p, version, isolation):
    timestamp = p["timestamp"]
    if timestamp < 0 and _TIMESTAMP_MIN_VERSION.get(timestamp, version + 1) > version:
        return _offsets_error(p, ErrorCode.UNSUPPORTED_VERSION)
    entry = _offsets_error(p, ErrorCode.NONE)
    current_epoch = p.get("current_leader_epoch", -1)
    try:
        partition = await broker.replicas.get(topic, p["partition_index"])
        if timestamp == LATEST_TIERED:
            # Nothing is tiered: Kafka answers offset -1 and epoch -1 once the partition
            # and the leader epoch check out.
            code = partition.check_leader_epoch(current_epoch)
            if code:
                raise PartitionError(code)
            return entry
        if timestamp == EARLIEST_LOCAL:
            timestamp = EARLIEST      # the local log is the whole log
        # A replica (a broker id) reads to the log end: a follower resetting an
        # out-of-range position needs the leader's log end.
        entry["offset"], entry["timestamp"], entry["leader_epoch"] = \
            await partition.list_offset(timestamp, current_leader_epoch=current_epoch,
                                        isolation=isolation)
    except PartitionError as exc:
        return _offsets_error(p, exc.error_code)
    return entry


async def _legacy_offsets(broker, topic, p, replica_id):
    entry = _offsets_error(p, ErrorCode.NONE)
    if p["timestamp"] < EARLIEST:
        entry["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        return entry
    try:
        partition = await broker.replicas.get(topic, p["partition_index"])
        entry["old_style_offsets"] = await partition.legacy_offsets(
            p["timestamp"], p["max_num_offsets"], from_consumer=replica_id == CONSUMER_REPLICA_ID)
    except PartitionError as exc:
        entry["error_code"] = exc.error_code
    except ValueError as exc:
        # Kafka fails a negative max_num_offsets with an internal error.
        logger.debug("ListOffsets v0 of %s-%d: %s", topic, p["partition_index"], exc)
        entry["error_code"] = ErrorCode.UNKNOWN_SERVER_ERROR
    return entry


async def delete_records(broker, context, request):
    deletable = broker.authorizer.authorized_names(
        context, AclOperation.DELETE, ResourceType.TOPIC,
        (t["name"] for t in request.body["topics"]))
    from_mirror = is_mirror_client(broker.authorizer, context)
    topics = []
    for t in request.body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition_index": p["partition_index"], "low_watermark": -1,
                     "error_code": 0}
            if t["name"] not in deletable:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(entry)
                continue
            try:
                entry["low_watermark"] = await _delete_records(broker, t["name"],
                                                               p["partition_index"],
                                                               p["offset"], from_mirror)
            except PartitionError as exc:
                entry["error_code"] = exc.error_code
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def _delete_records(broker, topic, index, offset, from_mirror):
    """Kafka's ReplicaManager.deleteRecordsOnLocalLog and Partition.deleteRecordsOnLeader:
    internal topics are refused, then a topic without the delete policy (or a mirror
    topic, unless ``from_mirror``: mirror_guard.py), then an offset that is neither -1
    (the high watermark) nor >= 0; the log refuses one past the high watermark. A refused
    request deletes nothing."""
    if topic in INTERNAL_TOPICS:
        raise PartitionError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"cannot delete records of internal topic {topic}")
    partition = await broker.replicas.get(topic, index)
    try:
        _overrides, config = await broker.replicas.topic_config(topic)
    except UnknownTopicError:
        raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) from None
    if "delete" not in config["cleanup.policy"]:
        raise PartitionError(ErrorCode.POLICY_VIOLATION,
                             f"records of {topic} cannot be deleted: its cleanup.policy is "
                             f"{config['cleanup.policy']}")
    refuse_admin(config, topic, "delete its records", from_mirror)
    if offset < 0 and offset != _HIGH_WATERMARK:
        raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"the offset {offset} for partition {topic}-{index} is not valid")
    return await partition.delete_records(offset)


async def init_producer_id(broker, context, request):
    body = request.body
    version = request.api_version
    transactional_id = body.get("transactional_id")
    refusal = _init_producer_id_refusal(broker.authorizer, context, transactional_id)
    if refusal is not None:
        return _init_producer_id_error(refusal)
    producer_id, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
    if (producer_id == -1) != (epoch == -1):
        # Kafka's KafkaApis: both or neither.
        return _init_producer_id_error(ErrorCode.INVALID_REQUEST)
    if transactional_id is not None:
        if broker.transactions is None:
            # No transaction coordinator: the error a transactional producer treats as
            # fatal, as Produce and FindCoordinator answer it.
            return _init_producer_id_error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        expected = None if producer_id == -1 else ExpectedProducer(producer_id, epoch)
        code, pid, epoch = await broker.transactions.init_producer_id(
            transactional_id, body["transaction_timeout_ms"], expected)
        if code == ErrorCode.PRODUCER_FENCED and version < _FIRST_FENCED_VERSION:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": pid,
                "producer_epoch": epoch}
    # Every thousandth id reserves a new block on disk (a file lock and an fsync), or in a
    # cluster in ZooKeeper, which may be unreachable: then Kafka's ZkProducerIdManager
    # fails the request with the exception's code, UNKNOWN_SERVER_ERROR.
    try:
        producer_id = await broker.io.run(broker.producer_ids.allocate)
    except KqliteError as exc:
        logger.warning("InitProducerId: no producer id: %s", exc)
        return _init_producer_id_error(ErrorCode.UNKNOWN_SERVER_ERROR)
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
            "producer_epoch": 0}


def _init_producer_id_refusal(authorizer, context, transactional_id):
    """Kafka's checks of an InitProducerId: WRITE on the transactional id, or for an
    idempotent producer IDEMPOTENT_WRITE on the cluster (its refusal not audited, as a
    fallback follows) or else WRITE on at least one topic. The code of a refusal, or None."""
    if transactional_id is not None:
        if not authorizer.authorize(context, AclOperation.WRITE,
                                    Resource.transactional_id(transactional_id)):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None
    if authorizer.authorize(context, AclOperation.IDEMPOTENT_WRITE, CLUSTER,
                            log_if_denied=False) or \
            authorizer.authorize_by_resource_type(context, AclOperation.WRITE,
                                                  ResourceType.TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _init_producer_id_error(code):
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1,
            "producer_epoch": -1}


async def offset_for_leader_epoch(broker, context, request):
    body = request.body
    authorizer = broker.authorizer
    if authorizer.authorize(context, AclOperation.CLUSTER_ACTION, CLUSTER, log_if_denied=False):
        describable = {t["topic"] for t in body["topics"]}
    else:
        describable = authorizer.authorized_names(context, AclOperation.DESCRIBE,
                                                  ResourceType.TOPIC,
                                                  (t["topic"] for t in body["topics"]))
    topics = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1,
                     "end_offset": -1}
            if t["topic"] not in describable:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(entry)
                continue
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


HANDLERS = {ApiKey.LIST_OFFSETS: list_offsets, ApiKey.DELETE_RECORDS: delete_records,
            ApiKey.INIT_PRODUCER_ID: init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch}
