"""ApiVersions, Metadata, topic administration, DescribeConfigs.

Topics and partitions come from the replica manager (``broker.replicas``), which reads
and changes topic definitions in a storage thread; Metadata reports each partition's
leadership (leader, leader epoch, replicas, ISR) as the partition states it.
"""

from ...errors import ConfigError, KqliteError, TopicExistsError, UnknownTopicError
from ...protocol import SUPPORTED, ErrorCode
from ...storage.config import DEFAULTS
from ..partition import PartitionError


async def api_versions(broker, conn, request):
    return {"error_code": 0, "throttle_time_ms": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())]}


def _broker_entry(broker):
    return {"node_id": broker.broker_id, "host": broker.advertised_host, "port": broker.port,
            "rack": None}


async def topic_metadata(broker, name, auto_create):
    """The Metadata entry of one topic, auto-creating it if allowed."""
    try:
        info = await broker.replicas.topic(name,
                                           auto_create=auto_create and broker.auto_create_topics)
    except PartitionError as exc:
        return {"error_code": exc.error_code, "name": name, "is_internal": False,
                "partitions": []}
    return {"error_code": 0, "name": name, "is_internal": info.internal,
            "topic_id": info.topic_id,
            "partitions": [{"error_code": 0, "partition_index": p.index,
                            "leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
                            "replica_nodes": p.replicas, "isr_nodes": p.isr,
                            "offline_replicas": p.offline_replicas}
                           for p in info.partitions]}


async def metadata(broker, conn, request):
    body = request.body
    topics = body.get("topics")
    auto = body.get("allow_auto_topic_creation", True) if request.api_version >= 4 else True
    if topics is None or (request.api_version == 0 and not topics):
        names = await broker.replicas.topic_names()
        auto = False
    else:
        names = [t["name"] for t in topics if t.get("name")]
    return {"throttle_time_ms": 0, "brokers": [_broker_entry(broker)],
            "cluster_id": broker.cluster_id, "controller_id": broker.broker_id,
            "topics": [await topic_metadata(broker, n, auto) for n in names]}


def _kafka_error(exc):
    if isinstance(exc, TopicExistsError):
        return ErrorCode.TOPIC_ALREADY_EXISTS
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, ConfigError):
        return ErrorCode.INVALID_CONFIG
    return ErrorCode.UNKNOWN_SERVER_ERROR


async def create_topics(broker, conn, request):
    body = request.body
    results = []
    for t in body["topics"]:
        name, count = t["name"], t["num_partitions"]
        configs = {c["name"]: c["value"] for c in t.get("configs") or []}
        result = {"name": name, "error_code": 0, "error_message": None,
                  "num_partitions": count, "replication_factor": 1, "configs": None}
        try:
            if t["replication_factor"] not in (-1, 1):
                result.update(error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
                              error_message="a single kqlite broker keeps one replica")
            elif t.get("assignments"):
                result.update(error_code=ErrorCode.INVALID_REQUEST,
                              error_message="replica assignments are not supported")
            else:
                if count == -1:
                    count = result["num_partitions"] = broker.default_partitions
                if count < 1:
                    raise ConfigError("the partition count must be positive")
                topic_id = await broker.replicas.create_topic(
                    name, count, configs, validate_only=bool(body.get("validate_only")))
                if topic_id is not None:
                    result["topic_id"] = topic_id
        except KqliteError as exc:
            code = ErrorCode.INVALID_PARTITIONS if "partition" in str(exc) and \
                isinstance(exc, ConfigError) else _kafka_error(exc)
            result.update(error_code=code, error_message=str(exc))
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


async def delete_topics(broker, conn, request):
    body = request.body
    names = body.get("topic_names") if request.api_version < 6 else \
        [t.get("name") for t in body.get("topics", [])]
    responses = []
    for name in names:
        entry = {"name": name, "error_code": 0, "error_message": None}
        try:
            if name is None:
                raise UnknownTopicError("deleting topics by id is not supported")
            await broker.replicas.delete_topic(name)
        except KqliteError as exc:
            entry.update(error_code=_kafka_error(exc), error_message=str(exc))
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


async def create_partitions(broker, conn, request):
    results = []
    for t in request.body["topics"]:
        entry = {"name": t["name"], "error_code": 0, "error_message": None}
        try:
            if not request.body.get("validate_only"):
                await broker.replicas.create_partitions(t["name"], t["count"])
        except ConfigError as exc:
            entry.update(error_code=ErrorCode.INVALID_PARTITIONS, error_message=str(exc))
        except KqliteError as exc:
            entry.update(error_code=_kafka_error(exc), error_message=str(exc))
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


async def describe_configs(broker, conn, request):
    results = []
    for res in request.body["resources"]:
        keys = res.get("configuration_keys")
        entry = {"error_code": 0, "error_message": None, "resource_type": res["resource_type"],
                 "resource_name": res["resource_name"], "configs": []}
        if res["resource_type"] == RESOURCE_TOPIC:
            try:
                overrides, effective = await broker.replicas.topic_config(res["resource_name"])
            except UnknownTopicError as exc:
                entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             error_message=str(exc))
                results.append(entry)
                continue
            for name, value in sorted(effective.items()):
                if keys is not None and name not in keys:
                    continue
                # ConfigSource: 1 = DYNAMIC_TOPIC_CONFIG, 5 = DEFAULT_CONFIG
                source = 1 if name in overrides else 5
                entry["configs"].append({
                    "name": name, "value": str(value), "read_only": False,
                    "is_default": source == 5, "config_source": source, "is_sensitive": False,
                    "synonyms": [], "config_type": 0, "documentation": None})
        elif res["resource_type"] == RESOURCE_BROKER:
            for name, (value, _kind, _min) in sorted(DEFAULTS.items()):
                if keys is not None and name not in keys:
                    continue
                entry["configs"].append({
                    "name": f"log.{name}" if not name.startswith("log.") else name,
                    "value": str(value), "read_only": True, "is_default": True,
                    "config_source": 5, "is_sensitive": False, "synonyms": [],
                    "config_type": 0, "documentation": None})
        else:
            entry.update(error_code=ErrorCode.INVALID_REQUEST,
                         error_message=f"resource type {res['resource_type']} is not supported")
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


HANDLERS = {18: api_versions, 3: metadata, 19: create_topics,
            20: delete_topics, 37: create_partitions, 32: describe_configs}

