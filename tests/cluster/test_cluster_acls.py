"""Three real ``kqlite serve --zookeeper`` brokers running Kafka's ACL authorizer: an ACL
created through one broker is enforced by the other two within seconds (they learn it from
``/kafka-acl-changes``), removed through another it stops being; a client quota altered
through one broker is described by another (it learns it from ``/config/changes``). Every client (the brokers
included) is ``User:ANONYMOUS`` on plaintext, so the ACLs the cluster starts with, written
in ZooKeeper before the brokers start as an operator would with ``kqlite acls
--zookeeper``, allow ANONYMOUS everything; the test denies it one topic."""

import time

import pytest

from cluster_processes import request, running_cluster, until

from kqlite.cli.main import main as kqlite_main
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, AclPermissionType as Perm, \
    PatternType as P, ResourceType as R

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SECONDS = 10    # "within seconds": how long a change may take to reach every broker
TOPIC = "secret"
AUTHORIZER = ["--authorizer-class-name", "kafka.security.authorizer.AclAuthorizer"]


def _fetch_code(broker):
    answer = request(broker, ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": TOPIC, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return answer["responses"][0]["partitions"][0]["error_code"]


def _acl(operation, permission, resource_type=R.TOPIC, name=TOPIC):
    return {"resource_type_filter": resource_type, "resource_name_filter": name,
            "pattern_type_filter": P.LITERAL, "principal_filter": "User:ANONYMOUS",
            "host_filter": "*", "operation": operation, "permission_type": permission}


def _within(what, predicate):
    started = time.monotonic()
    until(predicate, what, timeout=60, interval=0.05)
    return time.monotonic() - started


def test_an_acl_made_through_one_broker_applies_on_the_others(tmp_path, zk_hosts):
    for resource in ("--cluster", "--topic=*", "--group=*"):
        assert kqlite_main(["acls", "add", "--zookeeper", zk_hosts, "--allow-principal",
                            "User:ANONYMOUS", "--operation", "All", resource]) == 0
    with running_cluster(tmp_path, zk_hosts, extra=AUTHORIZER) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(60)
        one, two, three = cluster[1], cluster[2], cluster[3]
        until(lambda: all(_fetch_code(b) in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                          for b in (one, two, three)), "every broker knows the topic")
        deny = {"resource_type": R.TOPIC, "resource_name": TOPIC, "resource_pattern_type": P.LITERAL,
                "principal": "User:ANONYMOUS", "host": "*", "operation": Op.READ,
                "permission_type": Perm.DENY}
        created = request(one, ApiKey.CREATE_ACLS, 3, {"creations": [deny]})
        assert created["results"][0]["error_code"] == ErrorCode.NONE
        took = _within("the deny enforced by brokers 2 and 3", lambda: all(
            _fetch_code(b) == ErrorCode.TOPIC_AUTHORIZATION_FAILED for b in (two, three)))
        assert took < SECONDS
        described = request(three, ApiKey.DESCRIBE_ACLS, 3, _acl(Op.READ, Perm.DENY))
        assert [(r["resource_name"], [a["operation"] for a in r["acls"]])
                for r in described["resources"]] == [(TOPIC, [Op.READ])]
        deleted = request(three, ApiKey.DELETE_ACLS, 3, {"filters": [_acl(Op.READ, Perm.DENY)]})
        assert len(deleted["filter_results"][0]["matching_acls"]) == 1
        took = _within("the deny lifted on broker 1", lambda: _fetch_code(one) in (
            ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER))
        assert took < SECONDS

        altered = request(two, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [
            {"entity": [{"entity_type": "client-id", "entity_name": "metered"}],
             "ops": [{"key": "request_percentage", "value": 0.0001, "remove": False}]}],
            "validate_only": False})
        assert altered["entries"][0]["error_code"] == ErrorCode.NONE

        def quotas_on_broker_1():
            answer = request(one, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1,
                             {"components": [], "strict": False})
            return [e["values"] for e in answer["entries"]] == \
                [[{"key": "request_percentage", "value": 0.0001}]]
        assert _within("the quota described by broker 1", quotas_on_broker_1) < SECONDS
