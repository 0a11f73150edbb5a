"""The ElectLeaders API (key 43) on a cluster broker, as a Kafka 3.9 ZooKeeper-mode broker
serves it (``KafkaApis.handleElectLeaders``, ``ReplicaManager.electLeaders``).

Theory of operation. The partitions asked for (all of them, from the metadata cache,
when the topic list is null) go to this broker's controller as one event
(controller/elections.py). A broker that is not the active controller answers
NOT_CONTROLLER for each partition asked, as Kafka's does; admin clients send the request
to the controller named in Metadata. The controller's answer gives each elected partition
its new leader; the request then waits, at most ``timeout_ms``, until this broker's
metadata cache shows those leaders (Kafka's DelayedElectLeader), and partitions still not
showing theirs answer REQUEST_TIMED_OUT. With a null topic list, partitions that needed no
election are left out of the answer.

It needs ALTER on the cluster, asked first, on any broker (Kafka's handleElectLeaders):
without it the request answers CLUSTER_AUTHORIZATION_FAILED at the top and for every
partition it names, and no election is asked for.
"""

import asyncio

from ...errors import KqliteError
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation
from ..controller.elections import PREFERRED, UNCLEAN

__all__ = ["HANDLERS"]


async def elect_leaders(broker, context, request):
    body, version = request.body, request.api_version
    replicas = broker.replicas
    election_type = body.get("election_type", PREFERRED) if version >= 1 else PREFERRED
    asked = body.get("topic_partitions")
    if not broker.authorizer.authorize(context, AclOperation.ALTER, CLUSTER):
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _response(refused, {(t["topic"], p): (refused, None)
                                   for t in asked or () for p in t["partitions"]})
    if asked is None:
        tps = [(t, p) for t in replicas.cache.topics()
               for p in sorted(replicas.cache.topic_partitions(t))]
    else:
        # Kafka reads the list into a set: a partition named twice is answered once.
        tps = list(dict.fromkeys((t["topic"], p) for t in asked for p in t["partitions"]))
    if election_type not in (PREFERRED, UNCLEAN):
        # Kafka's ElectionType.valueOf throws, which answers UNKNOWN_SERVER_ERROR.
        message = f"unknown election type {election_type}: 0 is PREFERRED, 1 is UNCLEAN"
        return _response(ErrorCode.UNKNOWN_SERVER_ERROR, {
            tp: (ErrorCode.UNKNOWN_SERVER_ERROR, message) for tp in tps})
    results = await _elect(replicas, election_type, tps, body.get("timeout_ms", 60000))
    if asked is None:
        results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return _response(ErrorCode.NONE, results)


async def _elect(replicas, election_type, tps, timeout_ms):
    """{tp: (error code, message)} for ``tps``."""
    not_controller = {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in tps}
    controller = replicas.controller
    if not tps or controller is None or not controller.is_active or controller.stopped:
        return not_controller
    try:
        answer = await replicas.ask_controller("elect_leaders", election_type, tps)
    except asyncio.TimeoutError:
        return {tp: (ErrorCode.REQUEST_TIMED_OUT, "the controller did not answer in time")
                for tp in tps}
    except KqliteError as exc:      # the controller's election failed (ZooKeeper, mostly)
        return {tp: (ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) for tp in tps}
    if "error_code" in answer:       # it stopped being the controller meanwhile
        return not_controller
    expected = {tp: e.leader for tp, e in answer.items() if e.error_code == ErrorCode.NONE}
    cache = replicas.cache

    def shown(tp):
        p = cache.partition(*tp)
        return p is not None and p.leader == expected[tp]

    if expected:
        await replicas.wait_for_metadata(lambda: all(shown(tp) for tp in expected),
                                         timeout_ms)
    out = {}
    for tp in tps:
        e = answer[tp]
        if tp in expected and not shown(tp):
            out[tp] = (ErrorCode.REQUEST_TIMED_OUT,
                       f"broker {expected[tp]} was elected; this broker has not heard yet")
        else:
            out[tp] = (e.error_code, e.message)
    return out


def _response(error_code, results):
    by_topic = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": p, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "error_code": error_code,
            "replica_election_results": [{"topic": t, "partition_result": ps}
                                         for t, ps in by_topic.items()]}


HANDLERS = {ApiKey.ELECT_LEADERS: elect_leaders}
