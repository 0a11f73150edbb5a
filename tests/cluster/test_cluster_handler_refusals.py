"""A cluster broker's own handlers refuse before they touch anything, without sockets: each
is called with a broker whose replica manager fails the test if it is used at all, and an
authorizer that refuses.

- The inter-broker requests without CLUSTER_ACTION get their generic error response with
  CLUSTER_AUTHORIZATION_FAILED (LeaderAndIsr and StopReplica in every partition named);
  ElectLeaders without ALTER on the cluster the same, at the top and per partition.
- CreateTopics, DeleteTopics and CreatePartitions on the controller refuse a topic the
  principal may not create, delete or alter before ZooKeeper is written; on a broker that
  is not the controller they answer NOT_CONTROLLER and ask the authorizer nothing, as
  Kafka checks that first.
"""

import asyncio
import os
import sys
import types
import uuid

import pytest

from kqlite.cluster.handlers import HANDLERS
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, ResourceType as R
from kqlite.server.partition import PartitionError
from kqlite.server.request_context import RequestContext, Session

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from authorizers import RecordingAuthorizer  # noqa: E402

REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TOPIC_ID = uuid.UUID(int=7)


class Untouchable:
    """A replica manager (or its topics) that fails the test when anything but
    ``check_controller`` is used."""

    def __init__(self, controller=True):
        self._controller = controller

    def check_controller(self):
        if not self._controller:
            raise PartitionError(ErrorCode.NOT_CONTROLLER, "not the controller")

    def __getattr__(self, name):
        raise AssertionError(f"the refused request used the replica manager's {name}")


def call(api_key, version, body, authorizer, controller=True):
    replicas = Untouchable(controller)
    replicas.__dict__["topics"] = Untouchable(controller)
    broker = types.SimpleNamespace(authorizer=authorizer, replicas=replicas, broker_id=1)
    request = types.SimpleNamespace(api_key=api_key, api_version=version, body=body,
                                    correlation_id=1, client_id="controller")
    context = RequestContext.of(Session.plaintext(("127.0.0.1", 9093)), request)
    return asyncio.run(HANDLERS[api_key](broker, context, request))


def _partition_states(**extra):
    return [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": [
        dict({"partition_index": i}, **extra) for i in (0, 1)]}]


INTER_BROKER = {
    "LeaderAndIsr": (ApiKey.LEADER_AND_ISR, 5, {"topic_states": _partition_states()}, {
        "error_code": REFUSED,
        "partition_errors": [{"topic_name": "t", "partition_index": i, "error_code": REFUSED}
                             for i in (0, 1)],
        "topics": [{"topic_id": TOPIC_ID, "partition_errors": [
            {"topic_name": "t", "partition_index": i, "error_code": REFUSED}
            for i in (0, 1)]}]}),
    "StopReplica": (ApiKey.STOP_REPLICA, 3, {
        "topic_states": _partition_states(leader_epoch=1, delete_partition=False)}, {
        "error_code": REFUSED,
        "partition_errors": [{"topic_name": "t", "partition_index": i, "error_code": REFUSED}
                             for i in (0, 1)]}),
    "UpdateMetadata": (ApiKey.UPDATE_METADATA, 8, {"topic_states": [], "live_brokers": []},
                       {"error_code": REFUSED}),
    "ControlledShutdown": (ApiKey.CONTROLLED_SHUTDOWN, 3, {"broker_id": 2, "broker_epoch": 9},
                           {"error_code": REFUSED, "remaining_partitions": []}),
    "AlterPartition": (ApiKey.ALTER_PARTITION, 3, {"broker_id": 2, "broker_epoch": 9,
                                                   "topics": []},
                       {"throttle_time_ms": 0, "error_code": REFUSED, "topics": []}),
}


@pytest.mark.parametrize("case", INTER_BROKER)
def test_an_inter_broker_request_without_cluster_action_changes_nothing(case):
    api_key, version, body, expected = INTER_BROKER[case]
    authorizer = RecordingAuthorizer((Op.CLUSTER_ACTION, R.CLUSTER))
    assert call(api_key, version, body, authorizer) == expected
    assert authorizer.asked() == {(Op.CLUSTER_ACTION, R.CLUSTER)}


def test_elect_leaders_without_alter_on_the_cluster_elects_nothing():
    authorizer = RecordingAuthorizer((Op.ALTER, R.CLUSTER))
    answer = call(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "timeout_ms": 1000,
                                            "topic_partitions": [{"topic": "t",
                                                                  "partitions": [0, 1]}]},
                  authorizer)
    assert answer["error_code"] == REFUSED
    assert answer["replica_election_results"] == [{"topic": "t", "partition_result": [
        {"partition_id": i, "error_code": REFUSED, "error_message": None} for i in (0, 1)]}]
    assert authorizer.asked() == {(Op.ALTER, R.CLUSTER)}


TOPIC_CHANGES = {
    "CreateTopics": (ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 1000},
        [(Op.CREATE, R.CLUSTER), (Op.CREATE, R.TOPIC)], "topics"),
    "DeleteTopics": (ApiKey.DELETE_TOPICS, 5, {"topic_names": ["t"], "timeout_ms": 1000},
                     [(Op.DELETE, R.TOPIC)], "responses"),
    "CreatePartitions": (ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "t", "count": 3, "assignments": None}], "timeout_ms": 1000},
        [(Op.ALTER, R.TOPIC)], "results"),
}


@pytest.mark.parametrize("case", TOPIC_CHANGES)
def test_the_controller_refuses_a_topic_change_before_writing_anything(case):
    api_key, version, body, refused, entries = TOPIC_CHANGES[case]
    answer = call(api_key, version, body, RecordingAuthorizer(*refused))
    assert [e["error_code"] for e in answer[entries]] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]


@pytest.mark.parametrize("case", TOPIC_CHANGES)
def test_a_broker_that_is_not_the_controller_answers_so_and_asks_nothing(case):
    api_key, version, body, refused, entries = TOPIC_CHANGES[case]
    authorizer = RecordingAuthorizer(*refused)
    answer = call(api_key, version, body, authorizer, controller=False)
    assert [e["error_code"] for e in answer[entries]] == [ErrorCode.NOT_CONTROLLER]
    assert authorizer.asked_so_far() == []


SCRAM_ALTER = {"deletions": [{"name": "alice", "mechanism": 1}],
               "upsertions": [{"name": "bob", "mechanism": 2, "iterations": 8192,
                               "salt": b"s", "salted_password": b"p" * 64}]}


def test_scram_credentials_are_altered_on_the_controller_only():
    """Kafka's KafkaApis: NOT_CONTROLLER for every user before authorization; on the
    controller ALTER on the cluster is asked before the credentials are touched (the
    broker here has none: using them would fail)."""
    authorizer = RecordingAuthorizer((Op.ALTER, R.CLUSTER))
    elsewhere = call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, SCRAM_ALTER, authorizer,
                     controller=False)
    assert [(r["user"], r["error_code"]) for r in elsewhere["results"]] == [
        ("alice", ErrorCode.NOT_CONTROLLER), ("bob", ErrorCode.NOT_CONTROLLER)]
    assert authorizer.asked_so_far() == []
    refused = call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, SCRAM_ALTER, authorizer)
    assert [(r["user"], r["error_code"]) for r in refused["results"]] == [
        ("alice", REFUSED), ("bob", REFUSED)]
    assert authorizer.asked() == {(Op.ALTER, R.CLUSTER)}
