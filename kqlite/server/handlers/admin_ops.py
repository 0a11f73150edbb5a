"""The operational admin APIs tools call: AlterConfigs, IncrementalAlterConfigs,
DescribeLogDirs, DescribeCluster, DescribeProducers.

Config changes follow Kafka's rules (config_changes.py) and are stored durably by the
replica manager, in a storage thread, before the answer. DescribeLogDirs reports the
replica manager's one log dir, the data dir. DescribeProducers answers from each
partition's idempotent-producer state (storage/producer_state.py). A mirror topic's config
changes only by its promotion (POLICY_VIOLATION otherwise: mirror_guard.py). Every name from the
wire is checked before it reaches the data dir.

Authorization (Kafka's KafkaApis): (Incremental)AlterConfigs need ALTER_CONFIGS on the
topic, or on the cluster for a broker resource and its loggers, asked once the request is
found well formed (TOPIC_ / CLUSTER_AUTHORIZATION_FAILED in that resource's entry, no
message); DescribeLogDirs needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED at
the top with no results); DescribeProducers READ on each topic with a valid name
(TOPIC_AUTHORIZATION_FAILED before existence). DescribeCluster checks nothing; its
authorized operations are 0 without DESCRIBE on the cluster.
"""

from ...db.topic_names import InvalidTopicError, check_topic_name
from ...errors import KqliteError
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, Resource
from .. import config_changes as changes
from ..authorization import refusal_message
from ..mirror_guard import config_change_refusal
from ..partition import PartitionError
from .admin import cluster_authorized_operations, config_refusal

_OPERATIONS_NOT_ASKED = -2147483648    # WIRE: the schema's default, "not requested"

# WIRE: DescribeCluster's EndpointType.
_ENDPOINT_BROKERS = 1
_ENDPOINT_CONTROLLERS = 2


# -- AlterConfigs, IncrementalAlterConfigs ---------------------------------------------------

async def alter_configs(broker, context, request):
    return await alter_config_resources(broker, context, request, _alter_topic,
                                        incremental=False)


async def incremental_alter_configs(broker, context, request):
    return await alter_config_resources(broker, context, request, _alter_topic,
                                        incremental=True)


async def _alter_topic(broker, name, edit, validate_only):
    return await broker.replicas.alter_topic_config(name, edit, validate_only)


async def alter_config_resources(broker, context, request, alter_topic, *, incremental):
    """The (Incremental)AlterConfigs response: each resource refused, a broker change
    checked, or a topic changed by ``alter_topic(broker, name, edit, validate_only)`` ->
    ``(error code, message)``, which is where a single broker and a cluster differ.
    Checked in Kafka's order: the request's form (a broker change kqlite cannot make
    included), then ALTER_CONFIGS, then the names of topics and broker loggers."""
    body = request.body
    resources = body["resources"]
    validate_only = bool(body.get("validate_only"))
    responses = []
    for res, refusal in zip(resources,
                            changes.refusals(resources, broker.broker_id,
                                             incremental=incremental)):
        kind, name = res["resource_type"], res["resource_name"]
        if refusal is None and kind == changes.RESOURCE_BROKER:
            # A broker change kqlite cannot make is refused first, as Kafka refuses an
            # invalid one before authorization.
            code, message = changes.broker_change(res["configs"])
            refusal = (code, message) if code else None
        if refusal is None:
            refusal = _unauthorized_or_unnamed(broker, context, kind, name)
        if refusal is not None:
            code, message = refusal
        elif kind == changes.RESOURCE_BROKER:
            code, message = ErrorCode.NONE, None
        else:
            edit = (changes.applying if incremental else changes.replacing)(res["configs"])
            refused = await _mirror_refusal(broker, name, edit)
            code, message = refused or await alter_topic(broker, name, edit, validate_only)
        responses.append({"error_code": code, "error_message": message,
                          "resource_type": res["resource_type"],
                          "resource_name": res["resource_name"]})
    return {"throttle_time_ms": 0, "responses": responses}


async def _mirror_refusal(broker, name, edit):
    """The refusal of a change to a mirror topic other than its promotion
    (mirror_guard.py), else None; a topic that cannot be looked up or an edit that does
    not apply is left to the change itself, which answers them."""
    try:
        overrides, _config = await broker.replicas.topic_config(name)
        new = edit(dict(overrides))
    except (PartitionError, KqliteError):
        return None
    return config_change_refusal(name, overrides, new)


def _unauthorized_or_unnamed(broker, context, kind, name):
    """``(code, message)`` for a well-formed resource the principal may not ALTER_CONFIGS
    (an incremental broker logger's refusal carries Kafka's message, which its
    RuntimeLoggerManager throws; the others none), then for a name this broker cannot
    have; else None."""
    denied = config_refusal(broker.authorizer, context, AclOperation.ALTER_CONFIGS, kind, name)
    if denied is not None:
        return denied, (refusal_message(denied) if kind == changes.RESOURCE_BROKER_LOGGER
                        else None)
    return changes.check_name(kind, name, broker.broker_id)


# -- DescribeLogDirs -------------------------------------------------------------------------

async def describe_log_dirs(broker, context, request):
    if not broker.authorizer.authorize(context, AclOperation.DESCRIBE, CLUSTER):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results": []}
    asked = request.body.get("topics")
    wanted = None
    if asked is not None:
        wanted = {}
        for t in asked:
            wanted.setdefault(t["topic"], []).extend(t["partitions"])
    replicas = broker.replicas
    names = await replicas.log_dir_topics()
    topics = []
    # One storage-thread call per topic: describing every partition of a large broker
    # must not hold a storage thread for all of them at once.
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        sizes = await replicas.partition_sizes(name, None if wanted is None else wanted[name])
        if sizes:
            # The lag of a leader's own log behind its high watermark: never positive.
            topics.append({"name": name, "partitions": [
                {"partition_index": index, "partition_size": size, "offset_lag": 0,
                 "is_future_key": False} for index, size in sizes]})
    total, usable = await replicas.log_dir_bytes()
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": [{
        "error_code": ErrorCode.NONE, "log_dir": replicas.log_dir, "topics": topics,
        "total_bytes": total, "usable_bytes": usable}]}


# -- DescribeCluster -------------------------------------------------------------------------

async def describe_cluster(broker, context, request):
    body = request.body
    endpoint = body.get("endpoint_type", _ENDPOINT_BROKERS)
    if endpoint != _ENDPOINT_BROKERS:
        if endpoint == _ENDPOINT_CONTROLLERS:
            code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
            message = "this is a broker endpoint; kqlite has no separate controllers"
        else:
            code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            message = f"unknown endpoint type {endpoint}"
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                "endpoint_type": _ENDPOINT_BROKERS, "cluster_id": "", "brokers": []}
    operations = (cluster_authorized_operations(broker, context)
                  if body.get("include_cluster_authorized_operations")
                  else _OPERATIONS_NOT_ASKED)
    host, port = broker.address_of(broker.broker_id, context.listener_name)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "endpoint_type": _ENDPOINT_BROKERS, "cluster_id": broker.cluster_id,
            "controller_id": broker.broker_id,
            "brokers": [{"broker_id": broker.broker_id, "host": host, "port": port,
                         "rack": None}],
            "cluster_authorized_operations": operations}


# -- DescribeProducers -----------------------------------------------------------------------

async def describe_producers(broker, context, request):
    topics = []
    for t in request.body["topics"]:
        name = t["name"]
        topic_error, indexes = await _topic_partitions(broker, context, name)
        found = {}    # storage is asked once per partition, however often it is named
        partitions = []
        for index in t["partition_indexes"]:
            if topic_error is not None:
                entry = topic_error
            elif index not in indexes:
                entry = _partition_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"topic {name!r} has no partition {index}")
            elif index not in found:
                entry = found[index] = await _producers_of(broker, name, index)
            else:
                entry = found[index]
            partitions.append(dict(entry, partition_index=index))
        topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _topic_partitions(broker, context, name):
    """``(None, partition indexes)`` of topic ``name``, or ``(the answer every partition
    of it gets, ())``: an invalid name, then no READ on the topic, then no such topic."""
    try:
        check_topic_name(name)
    except InvalidTopicError as exc:
        return _partition_error(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)), ()
    if not broker.authorizer.authorize(context, AclOperation.READ, Resource.topic(name)):
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return _partition_error(code, refusal_message(code)), ()
    try:
        info = await broker.replicas.topic(name)
    except PartitionError as exc:
        return _partition_error(exc.error_code, exc.message), ()
    return None, frozenset(p.index for p in info.partitions)


async def _producers_of(broker, topic, index):
    try:
        partition = await broker.replicas.get(topic, index)
        producers = await partition.active_producers()
    except PartitionError as exc:
        return _partition_error(exc.error_code, exc.message)
    return {"error_code": ErrorCode.NONE, "error_message": None, "active_producers": [
        {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
         "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
         "coordinator_epoch": p.coordinator_epoch,
         "current_txn_start_offset": p.current_txn_start_offset}
        for p in producers]}


def _partition_error(code, message):
    return {"error_code": code, "error_message": message, "active_producers": []}


HANDLERS = {ApiKey.ALTER_CONFIGS: alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
            ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs,
            ApiKey.DESCRIBE_CLUSTER: describe_cluster,
            ApiKey.DESCRIBE_PRODUCERS: describe_producers}
