"""CreateTopics, DeleteTopics and CreatePartitions on a cluster broker.

Only the active controller serves them (Kafka's ZooKeeper mode): the others answer
NOT_CONTROLLER for every topic and clients resend to the controller named in Metadata.
The controller checks a topic as the single broker does (names, duplicates, configs),
places replicas over the brokers registered in ZooKeeper, writes it (replica/topics.py), then waits,
at most the request's ``timeout_ms``, until its metadata cache shows the result (leaders
for new partitions, the topic gone after a deletion); past it the topic is answered
REQUEST_TIMED_OUT, as Kafka's delayed topic operations answer.

The controller authorizes as the single broker does (kqlite/server/handlers/admin.py:
CREATE, DELETE and DESCRIBE, ALTER on topics), before anything is written to ZooKeeper;
a broker that is not the controller asks nothing and answers NOT_CONTROLLER, as Kafka
checks that first. A mirror topic grows only by its mirror's CreatePartitions, on the
cluster as on one broker (kqlite/server/mirror_guard.py).
"""

import collections
import uuid

from ...errors import KqliteError
from ...protocol import ApiKey, ErrorCode
from ...server.handlers.admin import (CreationChecks, alterable_topics, check_alterable,
                                      check_growable, deletion_error, deletion_refused,
                                      kafka_error, requested_configs, topics_to_delete)
from ...server.mirror_guard import is_mirror_client
from ...server.partition import PartitionError

__all__ = ["HANDLERS"]

_ZERO_UUID = uuid.UUID(int=0)


def _not_controller(replicas):
    """NOT_CONTROLLER (the exception to answer every topic with) unless this broker is the
    active controller, else None: decided once per request, before any authorization."""
    try:
        replicas.topics.check_controller()
    except PartitionError as exc:
        return exc
    return None


async def create_topics(broker, context, request):
    body = request.body
    replicas = broker.replicas
    validate_only = bool(body.get("validate_only"))
    seen = collections.Counter(t["name"] for t in body["topics"])
    refusal = _not_controller(replicas)
    checks = None if refusal else CreationChecks(broker.authorizer, context, body["topics"])
    results, created = [], []
    for t in body["topics"]:
        result = {"name": t["name"], "error_code": 0, "error_message": None,
                  "num_partitions": -1, "replication_factor": -1, "configs": None}
        attempted = False
        try:
            if seen[t["name"]] > 1:
                raise PartitionError(ErrorCode.INVALID_REQUEST,
                                     "found multiple entries for this topic")
            if refusal is not None:
                raise refusal
            checks.check(t["name"])
            attempted = True
            configs = requested_configs(t)
            assignments = {a["partition_index"]: a["broker_ids"]
                           for a in t.get("assignments") or ()}
            count, factor, topic_id = await replicas.topics.create_topic(
                t["name"], t["num_partitions"], t["replication_factor"],
                configs, assignments=assignments or None,
                validate_only=validate_only)
            result.update(num_partitions=count, replication_factor=factor)
            if topic_id is not None:
                result["topic_id"] = topic_id
                created.append((result, count))
        except (PartitionError, KqliteError) as exc:
            result.update(error_code=kafka_error(exc), error_message=str(exc))
        if checks is not None:
            checks.answer_configs(result, attempted)
        results.append(result)
    await _await_leaders(replicas, created, body.get("timeout_ms", 0),
                         "the topic is created; its leaders are not elected yet")
    return {"throttle_time_ms": 0, "topics": results}


async def _await_leaders(replicas, pending, timeout_ms, late):
    """Wait, at most ``timeout_ms``, until the metadata cache shows leaders for every
    ``(entry, partition count)`` of ``pending``; the entries still without them are
    answered REQUEST_TIMED_OUT with the message ``late`` (Kafka's delayed topic
    operations)."""
    if not pending:
        return
    await replicas.wait_for_metadata(
        lambda: all(replicas.topics.topic_ready(e["name"], n) for e, n in pending),
        timeout_ms)
    for entry, count in pending:
        if not replicas.topics.topic_ready(entry["name"], count):
            entry.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=late)


async def delete_topics(broker, context, request):
    body, version = request.body, request.api_version
    replicas = broker.replicas
    wanted, malformed = topics_to_delete(body, version)
    if malformed is not None:
        return malformed
    refusal = _not_controller(replicas)
    responses, marked = [], []
    for name, topic_id in wanted:
        entry = {"name": name, "topic_id": topic_id, "error_code": 0, "error_message": None}
        try:
            if name is None:
                name = entry["name"] = replicas.cache.topic_by_id(topic_id)
                if name is None:
                    raise PartitionError(ErrorCode.UNKNOWN_TOPIC_ID,
                                         f"unknown topic id {topic_id}")
            if refusal is not None:
                raise refusal
            if not deletion_refused(broker.authorizer, context, entry, topic_id != _ZERO_UUID):
                await replicas.topics.delete_topic(name)
                marked.append(entry)
        except (PartitionError, KqliteError) as exc:
            entry.update(error_code=deletion_error(exc, version), error_message=str(exc))
        responses.append(entry)
    if marked:
        await replicas.wait_for_metadata(
            lambda: not any(replicas.cache.topic_partitions(e["name"]) for e in marked),
            body.get("timeout_ms", 0))
        for entry in marked:
            if replicas.cache.topic_partitions(entry["name"]):
                entry.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                             error_message="the topic is marked for deletion; its replicas "
                                           "are not all deleted yet")
    return {"throttle_time_ms": 0, "responses": responses}


async def create_partitions(broker, context, request):
    body = request.body
    replicas = broker.replicas
    validate_only = bool(body.get("validate_only"))
    seen = collections.Counter(t["name"] for t in body["topics"])
    refusal = _not_controller(replicas)
    alterable = set() if refusal else alterable_topics(broker.authorizer, context, body["topics"])
    from_mirror = is_mirror_client(broker.authorizer, context)
    results, grown = [], []
    for t in body["topics"]:
        entry = {"name": t["name"], "error_code": 0, "error_message": None}
        try:
            if seen[t["name"]] > 1:
                raise PartitionError(ErrorCode.INVALID_REQUEST, "duplicate topic in request")
            if refusal is not None:
                raise refusal
            check_alterable(t["name"], alterable)
            await check_growable(broker, t["name"], from_mirror)
            assignments = t.get("assignments")
            await replicas.topics.create_partitions(
                t["name"], t["count"],
                assignments=None if assignments is None else
                [a["broker_ids"] for a in assignments], validate_only=validate_only)
            if not validate_only:
                grown.append((entry, t["count"]))
        except (PartitionError, KqliteError) as exc:
            entry.update(error_code=kafka_error(exc), error_message=str(exc))
        results.append(entry)
    await _await_leaders(replicas, grown, body.get("timeout_ms", 0),
                         "the partitions are added; their leaders are not elected yet")
    return {"throttle_time_ms": 0, "results": results}


HANDLERS = {ApiKey.CREATE_TOPICS: create_topics, ApiKey.DELETE_TOPICS: delete_topics,
            ApiKey.CREATE_PARTITIONS: create_partitions}
