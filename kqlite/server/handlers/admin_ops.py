"""The operational admin APIs tools call: AlterConfigs, IncrementalAlterConfigs,
DescribeLogDirs, DescribeCluster, DescribeProducers.

Config changes follow Kafka's rules (config_changes.py) and are stored durably by the
replica manager, in a storage thread, before the answer. DescribeLogDirs reports the
replica manager's one log dir, the data dir. DescribeProducers answers from each
partition's idempotent-producer state (storage/producer_state.py). Every name from the
wire is checked before it reaches the data dir.
"""

from ...db.topic_names import InvalidTopicError, check_topic_name
from ...protocol import ApiKey, ErrorCode
from .. import config_changes as changes
from ..partition import PartitionError

# WIRE: Kafka's AclOperation codes of the operations on the CLUSTER resource (AclEntry's
# supportedOperations): CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS
# 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. Without an authorizer all are allowed.
_CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in _CLUSTER_OPERATIONS)
_OPERATIONS_NOT_ASKED = -2147483648    # WIRE: the schema's default, "not requested"

# WIRE: DescribeCluster's EndpointType.
_ENDPOINT_BROKERS = 1
_ENDPOINT_CONTROLLERS = 2


# -- AlterConfigs, IncrementalAlterConfigs ---------------------------------------------------

async def alter_configs(broker, conn, request):
    return await alter_config_resources(broker, request, _alter_topic, incremental=False)


async def incremental_alter_configs(broker, conn, request):
    return await alter_config_resources(broker, request, _alter_topic, incremental=True)


async def _alter_topic(broker, name, edit, validate_only):
    return await broker.replicas.alter_topic_config(name, edit, validate_only)


async def alter_config_resources(broker, request, alter_topic, *, incremental):
    """The (Incremental)AlterConfigs response: each resource refused, a broker change
    checked, or a topic changed by ``alter_topic(broker, name, edit, validate_only)`` ->
    ``(error code, message)``, which is where a single broker and a cluster differ."""
    body = request.body
    resources = body["resources"]
    validate_only = bool(body.get("validate_only"))
    responses = []
    for res, refusal in zip(resources,
                            changes.refusals(resources, broker.broker_id,
                                             incremental=incremental)):
        if refusal is not None:
            code, message = refusal
        elif res["resource_type"] == changes.RESOURCE_BROKER:
            code, message = changes.broker_change(res["configs"])
        else:
            edit = (changes.applying if incremental else changes.replacing)(res["configs"])
            code, message = await alter_topic(broker, res["resource_name"], edit,
                                              validate_only)
        responses.append({"error_code": code, "error_message": message,
                          "resource_type": res["resource_type"],
                          "resource_name": res["resource_name"]})
    return {"throttle_time_ms": 0, "responses": responses}


# -- DescribeLogDirs -------------------------------------------------------------------------

async def describe_log_dirs(broker, conn, request):
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

async def describe_cluster(broker, conn, request):
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
    operations = (CLUSTER_AUTHORIZED_OPERATIONS
                  if body.get("include_cluster_authorized_operations")
                  else _OPERATIONS_NOT_ASKED)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "endpoint_type": _ENDPOINT_BROKERS, "cluster_id": broker.cluster_id,
            "controller_id": broker.broker_id,
            "brokers": [{"broker_id": broker.broker_id, "host": broker.advertised_host,
                         "port": broker.port, "rack": None}],
            "cluster_authorized_operations": operations}


# -- DescribeProducers -----------------------------------------------------------------------

async def describe_producers(broker, conn, request):
    topics = []
    for t in request.body["topics"]:
        name = t["name"]
        topic_error, indexes = await _topic_partitions(broker, name)
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


async def _topic_partitions(broker, name):
    """``(None, partition indexes)`` of topic ``name``, or ``(the answer every partition
    of it gets, ())``."""
    try:
        check_topic_name(name)
    except InvalidTopicError as exc:
        return _partition_error(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)), ()
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
    # kqlite has no transactions: no coordinator epoch, no open transaction.
    return {"error_code": ErrorCode.NONE, "error_message": None, "active_producers": [
        {"producer_id": pid, "producer_epoch": epoch, "last_sequence": last_seq,
         "last_timestamp": last_ts, "coordinator_epoch": -1, "current_txn_start_offset": -1}
        for pid, epoch, last_seq, last_ts in producers]}


def _partition_error(code, message):
    return {"error_code": code, "error_message": message, "active_producers": []}


HANDLERS = {ApiKey.ALTER_CONFIGS: alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
            ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs,
            ApiKey.DESCRIBE_CLUSTER: describe_cluster,
            ApiKey.DESCRIBE_PRODUCERS: describe_producers}
