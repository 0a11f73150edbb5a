"""The inter-broker request handlers of a cluster broker, and the two it answers from its
metadata cache instead of the single broker's way:

- The controller's requests: LeaderAndIsr (4), StopReplica (5) and UpdateMetadata (6),
  applied by the ClusterReplicaManager (``broker.replicas``), which refuses stale
  controller and broker epochs.
- The requests to the controller: ControlledShutdown (7) and AlterPartition (56),
  posted as events to this broker's Controller, which answers them as Kafka's does
  (NOT_CONTROLLER or STALE_CONTROLLER_EPOCH when it is not the active one).
- Metadata (3) and DescribeCluster (60) answer the live brokers and the controller id
  of the metadata cache instead of the single broker's "just me" (read from ZooKeeper
  until the controller's first UpdateMetadata arrives: ``ClusterReplicaManager.live_brokers``),
  each broker at its endpoint of the listener the request arrived on; a broker without
  that listener is left out, and a partition it leads answers LISTENER_NOT_FOUND (Metadata
  v6+; LEADER_NOT_AVAILABLE before) with no leader, as Kafka's ZkMetadataCache answers.

Each of the five inter-broker requests needs CLUSTER_ACTION on the cluster, asked before
anything else (Kafka's ``authorizeClusterOperation``): without it the request gets its
generic error response with CLUSTER_AUTHORIZATION_FAILED (in every partition it names,
for LeaderAndIsr and StopReplica), and nothing is applied or posted to the controller.
"""

import asyncio
import logging
import uuid

from ...errors import KqliteError
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation
from ...server.handlers import admin, admin_ops
from ..replica.metadata_cache import BrokerEndpoint

__all__ = ["HANDLERS"]

log = logging.getLogger("kqlite.cluster")

_ZERO_UUID = uuid.UUID(int=0)
# What ask_controller raises when the controller's event failed or did not answer in time.
_CONTROLLER_FAILED = (KqliteError, asyncio.TimeoutError)
_RECOVERING = 1   # WIRE: Kafka-defined LeaderRecoveryState.RECOVERING
_FIRST_INELIGIBLE_REPLICA_VERSION = 2   # WIRE: older AlterPartition clients get
                                        # OPERATION_NOT_ATTEMPTED instead


def _may_act(broker, context):
    """Whether the sender may make cluster actions (CLUSTER_ACTION on the cluster)."""
    return broker.authorizer.authorize(context, AclOperation.CLUSTER_ACTION, CLUSTER)


_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _grouped(body, key, ungrouped_key):
    """The v2+ per-topic layout of a request whose v0-1 lists partitions ungrouped."""
    if body.get(key) is not None:
        return body[key]
    topics = {}
    for p in body.get(ungrouped_key) or ():
        topics.setdefault(p["topic_name"], []).append(p)
    return [{"topic_name": t, "topic_id": None, "partition_states": ps}
            for t, ps in topics.items()]


async def leader_and_isr(broker, context, request):
    body = dict(request.body)
    body["topic_states"] = _grouped(body, "topic_states", "ungrouped_partition_states")
    if _may_act(broker, context):
        code, answers = await broker.replicas.leader_and_isr(body)
    else:
        # LeaderAndIsrRequest.getErrorResponse: the code in every partition named.
        code, answers = _REFUSED, [
            (t["topic_name"], t.get("topic_id"), p["partition_index"], _REFUSED)
            for t in body["topic_states"] for p in t["partition_states"]]
    by_topic = {}
    for topic, topic_id, index, error in answers:
        by_topic.setdefault((topic, topic_id), []).append(
            {"topic_name": topic, "partition_index": index, "error_code": error})
    return {"error_code": code,
            "partition_errors": [e for errors in by_topic.values() for e in errors],
            "topics": [{"topic_id": topic_id or _ZERO_UUID, "partition_errors": errors}
                       for (_, topic_id), errors in by_topic.items()]}


async def stop_replica(broker, context, request):
    body = dict(request.body)
    if body.get("topic_states") is None:
        delete = bool(body.get("delete_partitions"))
        if body.get("topics") is not None:
            parts = [(t["name"], i) for t in body["topics"] for i in t["partition_indexes"]]
        else:
            parts = [(p["topic_name"], p["partition_index"])
                     for p in body.get("ungrouped_partitions") or ()]
        body["topic_states"] = [{"topic_name": t, "partition_states": [
            {"partition_index": i, "leader_epoch": -1, "delete_partition": delete}]}
            for t, i in parts]
    if _may_act(broker, context):
        code, answers = await broker.replicas.stop_replicas(body)
    else:
        # StopReplicaRequest.getErrorResponse: the code in every partition named.
        code, answers = _REFUSED, [(t["topic_name"], p["partition_index"], _REFUSED)
                                   for t in body["topic_states"] for p in t["partition_states"]]
    return {"error_code": code, "partition_errors": [
        {"topic_name": t, "partition_index": i, "error_code": e} for t, i, e in answers]}


async def update_metadata(broker, context, request):
    if not _may_act(broker, context):
        return {"error_code": _REFUSED}
    if request.api_version < 5:
        # kqlite's controller sends v8; the per-topic layout is what the cache reads.
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
    return {"error_code": broker.replicas.update_metadata(request.body)}


async def controlled_shutdown(broker, context, request):
    body = request.body
    if not _may_act(broker, context):
        return {"error_code": _REFUSED, "remaining_partitions": []}
    controller = broker.replicas.controller
    if controller is None or controller.stopped:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []}
    try:
        answer = await broker.replicas.ask_controller("controlled_shutdown", body["broker_id"],
                                                      body.get("broker_epoch", -1))
    except _CONTROLLER_FAILED as exc:
        log.warning("ControlledShutdown of broker %s: %s", body["broker_id"],
                    str(exc) or "no answer in time")
        return {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "remaining_partitions": []}
    return {"error_code": answer["error_code"],
            "remaining_partitions": answer.get("remaining_partitions", [])}


async def alter_partition(broker, context, request):
    body, version = request.body, request.api_version
    if not _may_act(broker, context):
        return {"throttle_time_ms": 0, "error_code": _REFUSED, "topics": []}
    replicas = broker.replicas
    controller = replicas.controller
    if controller is None or not controller.is_active:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "topics": []}
    by_id = version >= 2
    items, unknown = [], []
    for t in body["topics"]:
        topic = _topic_by_id(controller, t["topic_id"]) if by_id else t["topic_name"]
        for p in t["partitions"]:
            if topic is None:
                unknown.append((t, p))
                continue
            isr = [e["broker_id"] for e in p["new_isr_with_epochs"]] if version >= 3 \
                else p["new_isr"]
            items.append(((topic, t), (topic, p["partition_index"], p["leader_epoch"],
                                       tuple(isr), p["partition_epoch"],
                                       p["leader_recovery_state"] == _RECOVERING)))
    try:
        answer = await replicas.ask_controller("alter_partition", body["broker_id"],
                                               body["broker_epoch"], [item for _, item in items])
    except _CONTROLLER_FAILED as exc:
        # The leader retries the same proposal on this answer (rules/leader_state.py).
        log.warning("AlterPartition from broker %s: %s", body["broker_id"],
                    str(exc) or "no answer in time")
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
                "topics": []}
    if isinstance(answer, dict):
        return {"throttle_time_ms": 0, "error_code": answer["error_code"], "topics": []}
    code, results = answer
    if code:
        return {"throttle_time_ms": 0, "error_code": code, "topics": []}
    topics = {}
    for ((topic, t), item), (error, state) in zip(items, results):
        if error == ErrorCode.INELIGIBLE_REPLICA and version < _FIRST_INELIGIBLE_REPLICA_VERSION:
            error = ErrorCode.OPERATION_NOT_ATTEMPTED
        entry = {"partition_index": item[1], "error_code": error, "leader_id": -1,
                 "leader_epoch": -1, "isr": [], "leader_recovery_state": 0,
                 "partition_epoch": -1}
        if error == ErrorCode.NONE:
            entry.update(leader_id=state.leader, leader_epoch=state.leader_epoch,
                         isr=list(state.isr), leader_recovery_state=int(state.recovering),
                         partition_epoch=state.partition_epoch)
        topics.setdefault(topic, {"topic_name": topic, "topic_id": t.get("topic_id"),
                                  "partitions": []})["partitions"].append(entry)
    for t, p in unknown:
        topics.setdefault(("?", t["topic_id"]), {"topic_name": "", "topic_id": t["topic_id"],
                                                 "partitions": []})["partitions"].append(
            {"partition_index": p["partition_index"], "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
             "leader_id": -1, "leader_epoch": -1, "isr": [], "leader_recovery_state": 0,
             "partition_epoch": -1})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "topics": list(topics.values())}


def _topic_by_id(controller, topic_id):
    context = controller.context
    if context is None:
        return None
    for topic, tid in context.topic_ids.items():
        if tid == topic_id:
            return topic
    return None


_FIRST_LISTENER_NOT_FOUND_VERSION = 6   # WIRE: older Metadata clients get LEADER_NOT_AVAILABLE


async def _live_brokers(broker, context):
    """(live brokers on the request's listener, controller id) as this broker knows them
    (replica/manager.py)."""
    listener = context.listener_name
    me = BrokerEndpoint(broker.broker_id, *broker.address_of(broker.broker_id, listener), None)
    return await broker.replicas.live_brokers(listener, me)


def _leaders_on_listener(response, reachable, version):
    """A partition led by a live broker the client cannot reach (no endpoint on its
    listener) is answered without a leader (Kafka's ZkMetadataCache.getPartitionMetadata)."""
    code = ErrorCode.LISTENER_NOT_FOUND if version >= _FIRST_LISTENER_NOT_FOUND_VERSION \
        else ErrorCode.LEADER_NOT_AVAILABLE
    for topic in response["topics"]:
        for p in topic["partitions"]:
            if p["leader_id"] >= 0 and p["leader_id"] not in reachable:
                p.update(error_code=code, leader_id=-1)


async def metadata(broker, context, request):
    response = await admin.metadata(broker, context, request)
    live, controller_id = await _live_brokers(broker, context)
    if response["brokers"]:        # [] is the refusal of a malformed request: kept
        response["brokers"] = [{"node_id": b.broker_id, "host": b.host, "port": b.port,
                                "rack": b.rack} for b in live]
        _leaders_on_listener(response, {b.broker_id for b in live}, request.api_version)
    response["controller_id"] = controller_id
    return response


async def describe_cluster(broker, context, request):
    response = await admin_ops.describe_cluster(broker, context, request)
    if response["error_code"] == ErrorCode.NONE:
        live, response["controller_id"] = await _live_brokers(broker, context)
        response["brokers"] = [{"broker_id": b.broker_id, "host": b.host, "port": b.port,
                                "rack": b.rack} for b in live]
    return response


HANDLERS = {ApiKey.LEADER_AND_ISR: leader_and_isr, ApiKey.STOP_REPLICA: stop_replica,
            ApiKey.UPDATE_METADATA: update_metadata,
            ApiKey.CONTROLLED_SHUTDOWN: controlled_shutdown,
            ApiKey.ALTER_PARTITION: alter_partition, ApiKey.METADATA: metadata,
            ApiKey.DESCRIBE_CLUSTER: describe_cluster}
