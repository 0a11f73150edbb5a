"""CreateAcls, DescribeAcls and DeleteAcls against a broker (in a thread) with Kafka's ACL
authorizer over its data dir's ACL file, in every version (v0 without a pattern type):
filters, Kafka's refusals per entry and for the whole request, a request Kafka cannot parse
closing the connection, CLUSTER_AUTHORIZATION_FAILED without ALTER or DESCRIBE on the
cluster (nothing stored or removed), the ACLs kept across a restart, and a change written
to the file by another process applied within seconds. A broker without an ACL authorizer
answers SECURITY_DISABLED, as Kafka's without ``authorizer.class.name``."""

import socket
import time

import pytest

from broker_process import RawClient
from broker_thread import BrokerThread
from principals import Principals

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import (AclOperation as Op, AclPermissionType as Perm,
                                 PatternType as P, ResourcePattern, ResourceType as R)
from kqlite.protocol.connection import encode_request
from kqlite.server.authorization import AclAuthorizer, parse_super_users
from kqlite.server.authorization.acl_store import acl_file
from kqlite.server.authorization.bindings import AclEntry

ADMIN, ALICE = "User:admin", "User:alice"


def creation(name, principal=ALICE, operation=Op.READ, permission=Perm.ALLOW,
             resource_type=R.TOPIC, pattern=P.LITERAL, host="*"):
    return {"resource_type": resource_type, "resource_name": name,
            "resource_pattern_type": pattern, "principal": principal, "host": host,
            "operation": operation, "permission_type": permission}


def acl_filter(resource_type=R.ANY, name=None, pattern=P.ANY, principal=None, host=None,
               operation=Op.ANY, permission=Perm.ANY):
    return {"resource_type_filter": resource_type, "resource_name_filter": name,
            "pattern_type_filter": pattern, "principal_filter": principal,
            "host_filter": host, "operation": operation, "permission_type": permission}


def create(client, creations, version=3):
    return [(r["error_code"], r["error_message"]) for r in
            client.call(ApiKey.CREATE_ACLS, version, {"creations": creations})["results"]]


def describe(client, flt=None, version=3):
    answer = client.call(ApiKey.DESCRIBE_ACLS, version, flt or acl_filter())
    assert answer["error_code"] == ErrorCode.NONE, answer
    return {(r["resource_type"], r["resource_name"], r.get("pattern_type", P.LITERAL),
             a["principal"], a["host"], a["operation"], a["permission_type"])
            for r in answer["resources"] for a in r["acls"]}


def delete(client, filters, version=3):
    answer = client.call(ApiKey.DELETE_ACLS, version, {"filters": filters})
    return [(f["error_code"], {(a["resource_type"], a["resource_name"],
                                a.get("pattern_type", P.LITERAL), a["principal"],
                                a["operation"]) for a in f["matching_acls"]})
            for f in answer["filter_results"]]


@pytest.fixture
def served(tmp_path):
    principals = Principals()
    with principals.installed():
        broker = BrokerThread(tmp_path / "data", authorizer=AclAuthorizer(
            super_users=parse_super_users(ADMIN)))
        admin = principals.client(broker, ADMIN)
        yield broker, principals, admin
        admin.close()
        broker.stop()


def test_without_an_acl_authorizer_every_acl_api_answers_security_disabled(broker):
    c = RawClient(broker)
    flt = acl_filter()
    answer = c.call(ApiKey.DESCRIBE_ACLS, 1, flt)
    assert (answer["error_code"], answer["error_message"]) == \
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    results = c.call(ApiKey.CREATE_ACLS, 2, {"creations": [creation("t")] * 2})["results"]
    assert [(r["error_code"], r["error_message"]) for r in results] == \
        [(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")] * 2
    results = c.call(ApiKey.DELETE_ACLS, 3, {"filters": [flt]})["filter_results"]
    assert [r["error_code"] for r in results] == [ErrorCode.SECURITY_DISABLED]
    assert c.metadata_ok()
    c.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_created_acls_are_described_by_every_kind_of_filter(served, version):
    _broker, _principals, admin = served
    assert create(admin, [creation("orders"), creation("orders", operation=Op.WRITE),
                          creation("ord", pattern=P.PREFIXED, principal="User:bob"),
                          creation("*", operation=Op.DESCRIBE),
                          creation("g", resource_type=R.GROUP, permission=Perm.DENY,
                                   host="10.1.1.1"),
                          creation("kafka-cluster", resource_type=R.CLUSTER,
                                   operation=Op.CLUSTER_ACTION)], version) == \
        [(ErrorCode.NONE, None)] * 6
    everything = describe(admin, version=version)
    assert len(everything) == 6
    assert {a[:3] for a in describe(admin, acl_filter(R.TOPIC, "orders-1", P.MATCH),
                                    version)} == \
        {(R.TOPIC, "ord", P.PREFIXED), (R.TOPIC, "*", P.LITERAL)}
    assert {(a[1], a[5]) for a in describe(admin, acl_filter(R.TOPIC, "orders", P.LITERAL),
                                           version)} == {("orders", Op.READ), ("orders", Op.WRITE)}
    assert {a[1] for a in describe(admin, acl_filter(pattern=P.PREFIXED), version)} == {"ord"}
    assert {a[1] for a in describe(admin, acl_filter(principal="User:bob"), version)} == {"ord"}
    assert {a[1] for a in describe(admin, acl_filter(host="10.1.1.1"), version)} == {"g"}
    assert {a[1] for a in describe(admin, acl_filter(permission=Perm.DENY), version)} == {"g"}
    assert {a[1] for a in describe(admin, acl_filter(R.CLUSTER), version)} == {"kafka-cluster"}


def test_version_0_is_literal_only(served):
    _broker, _principals, admin = served
    assert create(admin, [creation("t"), creation("p", pattern=P.PREFIXED)], 3) == \
        [(ErrorCode.NONE, None)] * 2
    assert create(admin, [creation("v0")], 0) == [(ErrorCode.NONE, None)]
    assert {a[1] for a in describe(admin, acl_filter(), 0)} == {"t", "v0"}
    ((code, removed),) = delete(admin, [acl_filter(R.TOPIC, "v0")], 0)
    assert (code, removed) == (ErrorCode.NONE, {(R.TOPIC, "v0", P.LITERAL, ALICE, Op.READ)})
    assert {a[1] for a in describe(admin)} == {"t", "p"}


def test_each_filter_of_a_delete_answers_what_it_removed(served):
    _broker, _principals, admin = served
    create(admin, [creation("a"), creation("a", principal="User:bob"),
                   creation("ab", pattern=P.PREFIXED), creation("b", operation=Op.WRITE)])
    results = delete(admin, [acl_filter(principal=ALICE, operation=Op.READ),
                             acl_filter(R.TOPIC, "abc", P.MATCH),
                             acl_filter(R.GROUP)])
    assert results == [
        (ErrorCode.NONE, {(R.TOPIC, "a", P.LITERAL, ALICE, Op.READ),
                          (R.TOPIC, "ab", P.PREFIXED, ALICE, Op.READ)}),
        (ErrorCode.NONE, set()),
        (ErrorCode.NONE, set())]
    assert {(a[1], a[3]) for a in describe(admin)} == {("a", "User:bob"), ("b", ALICE)}


def test_refusals_per_entry_store_the_valid_entries(served):
    _broker, _principals, admin = served
    assert create(admin, [creation("ok"),
                          creation("other", resource_type=R.CLUSTER),
                          creation(""),
                          creation("a/b"),
                          creation("t", principal="alice")]) == [
        (ErrorCode.NONE, None),
        (ErrorCode.INVALID_REQUEST,
         "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ErrorCode.INVALID_REQUEST, "Invalid empty resource name"),
        (ErrorCode.INVALID_REQUEST, "Failed to create ACL"),
        (ErrorCode.UNKNOWN_SERVER_ERROR, None)]
    assert {a[1] for a in describe(admin)} == {"ok"}


def test_a_creation_that_cannot_be_built_fails_the_whole_request(served):
    _broker, _principals, admin = served
    assert create(admin, [creation("ok"), creation("t", operation=Op.ANY)]) == \
        [(ErrorCode.UNKNOWN_SERVER_ERROR, None)] * 2
    assert create(admin, [creation("t", pattern=P.MATCH)]) == \
        [(ErrorCode.UNKNOWN_SERVER_ERROR, None)]
    assert describe(admin) == set()


@pytest.mark.parametrize("api_key, body", [
    (ApiKey.DESCRIBE_ACLS, acl_filter(operation=Op.UNKNOWN)),
    (ApiKey.DESCRIBE_ACLS, acl_filter(resource_type=99)),
    (ApiKey.DELETE_ACLS, {"filters": [acl_filter(pattern=P.UNKNOWN)]}),
    (ApiKey.CREATE_ACLS, {"creations": [creation("t", permission=Perm.UNKNOWN)]}),
])
def test_a_request_kafka_cannot_parse_closes_the_connection(served, api_key, body):
    broker, _principals, admin = served
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.sendall(encode_request(api_key, 3, 1, "raw", body))
    assert s.recv(1) == b""
    s.close()
    assert describe(admin) == set()      # and nothing else happened


def test_without_alter_or_describe_on_the_cluster_nothing_is_stored_read_or_removed(served):
    broker, principals, admin = served
    create(admin, [creation("kept")])
    alice = principals.client(broker, ALICE)
    answer = alice.call(ApiKey.DESCRIBE_ACLS, 3, acl_filter())
    assert (answer["error_code"], answer["error_message"], answer["resources"]) == \
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", [])
    assert create(alice, [creation("mine", operation=Op.ALL)] * 2) == \
        [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")] * 2
    assert delete(alice, [acl_filter()]) == [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, set())]
    assert {a[1] for a in describe(admin)} == {"kept"}
    # Given ALTER and DESCRIBE on the cluster (DESCRIBE is implied by ALTER), alice may.
    create(admin, [creation("kafka-cluster", resource_type=R.CLUSTER, operation=Op.ALTER)])
    assert create(alice, [creation("mine")]) == [(ErrorCode.NONE, None)]
    assert {a[1] for a in describe(alice)} == {"kept", "mine", "kafka-cluster"}
    alice.close()


def test_acls_outlive_a_restart(tmp_path):
    data = tmp_path / "data"
    principals = Principals()
    with principals.installed():
        for attempt in range(2):
            broker = BrokerThread(data, authorizer=AclAuthorizer(
                super_users=parse_super_users(ADMIN)))
            admin = principals.client(broker, ADMIN)
            try:
                if attempt == 0:
                    assert create(admin, [creation("durable", pattern=P.PREFIXED)]) == \
                        [(ErrorCode.NONE, None)]
                else:
                    assert describe(admin) == {(R.TOPIC, "durable", P.PREFIXED, ALICE, "*",
                                                Op.READ, Perm.ALLOW)}
            finally:
                admin.close()
                broker.stop()


def test_a_change_written_to_the_file_by_another_process_applies_within_seconds(served):
    broker, _principals, admin = served
    create(admin, [creation("before")])
    pattern = ResourcePattern(R.TOPIC, "outside", P.LITERAL)
    entry = AclEntry(ALICE, "*", Op.WRITE, Perm.ALLOW)
    acl_file(broker.broker.db.path).update(lambda acls: {**acls, pattern: frozenset({entry})})
    deadline = time.monotonic() + 10
    while {a[1] for a in describe(admin)} != {"before", "outside"}:
        assert time.monotonic() < deadline, "the broker never read the file again"
        time.sleep(0.1)


def test_authorized_operations_are_computed_from_the_acls(served):
    """KIP-430's fields: one bit per supported operation the principal's ACLs allow,
    implication included (READ gives DESCRIBE; ALTER_CONFIGS gives DESCRIBE_CONFIGS)."""
    broker, principals, admin = served
    broker.broker.db.create_topic("ops", 1)
    create(admin, [creation("ops", operation=Op.READ),
                   creation("ops", operation=Op.ALTER_CONFIGS),
                   creation("ops-group", resource_type=R.GROUP, operation=Op.DELETE),
                   creation("kafka-cluster", resource_type=R.CLUSTER, operation=Op.DESCRIBE),
                   creation("kafka-cluster", resource_type=R.CLUSTER, operation=Op.CREATE)])
    alice = principals.client(broker, ALICE)

    def bits(*ops):
        return sum(1 << op for op in ops)
    meta = alice.call(ApiKey.METADATA, 10, {
        "topics": [{"name": "ops"}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": True,
        "include_topic_authorized_operations": True})
    assert meta["topics"][0]["topic_authorized_operations"] == bits(
        Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
    assert meta["cluster_authorized_operations"] == bits(Op.DESCRIBE, Op.CREATE)
    groups = alice.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["ops-group"],
                                                    "include_authorized_operations": True})
    assert groups["groups"][0]["authorized_operations"] == bits(Op.DELETE, Op.DESCRIBE)
    cluster = alice.call(ApiKey.DESCRIBE_CLUSTER, 1,
                         {"include_cluster_authorized_operations": True})
    assert cluster["cluster_authorized_operations"] == bits(Op.DESCRIBE, Op.CREATE)
    alice.close()
