"""The authorization matrix: every row of the per-API table (authorization_table.py, Kafka
3.9's KafkaApis checks) sent by a principal of a broker (in a thread) running Kafka's ACL
authorizer with real ACLs, four ways:

- granted by LITERAL ``*`` ACLs, exactly the checks the row asks (not those it refuses):
  no authorization error anywhere in the answer;
- granted by PREFIXED ``checked`` ACLs (every name in the table starts so; the cluster by
  its own name): the same;
- no ACL at all (``allow.everyone.if.no.acl.found`` false): the row's refusal code,
  Kafka's, where the row's answer carries it, and nothing stored, changed or revealed: the
  broker's state as a super user sees it is the same after as before;
- ALLOW ALL on ``*`` of every resource type, and DENY ALL on PREFIXED ``checked`` (and on
  the cluster): deny wins, a prefix over the wildcard, the same refusal and the same
  nothing.

And for the topic-scoped rows, the refusal answers a topic that exists exactly as one that
does not. The refusal codes per row are Kafka's (kafka-security.md, section 4.4).
"""

import pytest

from authorization_table import CASES, GROUP, TOPIC
from broker_thread import BrokerThread
from principals import Principals

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import (CLUSTER_NAME, AclOperation as Op, AclPermissionType as Perm,
                                 PatternType as P, ResourcePattern, ResourceType as R)
from kqlite.server.authorization import AclAuthorizer, parse_super_users
from kqlite.server.authorization.bindings import AclBinding, AclBindingFilter, AclEntry

ADMIN, ALICE = "User:admin", "User:alice"
T29, G30, C31 = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                 ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
X53 = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
REFUSALS = {T29, G30, C31, X53}

# What a principal without the row's ACLs gets: Kafka's code, or None where Kafka filters
# silently (the answer then holds nothing of what was filtered).
DENIED = {
    "Produce": T29, "Produce with transactional batches": X53,
    "Fetch from a consumer": T29, "Fetch from a follower": T29, "ListOffsets": T29,
    "Metadata": T29, "Metadata of all topics": None, "Metadata auto-creating a topic": T29,
    "Metadata auto-creating without CREATE on the cluster": T29,
    "OffsetCommit": G30, "OffsetFetch": G30, "OffsetFetch of all offsets": G30,
    "FindCoordinator of a group": G30, "FindCoordinator of a transactional id": X53,
    "FindCoordinator of a share group": C31,
    "JoinGroup": G30, "SyncGroup": G30, "Heartbeat": G30, "LeaveGroup": G30,
    "DescribeGroups": G30, "ListGroups": None,
    "ListGroups without DESCRIBE on the cluster": None, "ApiVersions": None,
    "CreateTopics": T29, "CreateTopics without CREATE on the cluster": T29,
    "DeleteTopics": T29, "DeleteTopics by id": T29, "DeleteRecords": T29,
    "InitProducerId": C31, "InitProducerId without IDEMPOTENT_WRITE": C31,
    "InitProducerId with a transactional id": X53,
    "OffsetForLeaderEpoch": T29, "OffsetForLeaderEpoch without CLUSTER_ACTION": T29,
    "DescribeConfigs of a topic": T29, "DescribeConfigs of the broker": C31,
    "AlterConfigs of a topic": T29, "AlterConfigs of the broker": C31,
    "IncrementalAlterConfigs of a topic": T29,
    "IncrementalAlterConfigs of a broker logger": C31,
    "DescribeLogDirs": C31, "CreatePartitions": T29, "DeleteGroups": G30,
    "OffsetDelete": G30, "DescribeCluster": None, "DescribeProducers": T29,
    "SaslHandshake": None, "SaslAuthenticate": None, "DescribeUserScramCredentials": C31,
    "AlterUserScramCredentials": C31, "DescribeAcls": C31, "CreateAcls": C31, "DeleteAcls": C31,
    "DescribeClientQuotas": C31, "AlterClientQuotas": C31,
    "AddPartitionsToTxn from a producer": X53, "AddPartitionsToTxn of an internal topic": X53,
    "AddPartitionsToTxn from a broker": C31, "AddOffsetsToTxn": X53, "EndTxn": X53,
    "TxnOffsetCommit": X53, "WriteTxnMarkers": C31,
    "WriteTxnMarkers without ALTER on the cluster": C31, "DescribeTransactions": X53,
    "ListTransactions": None,
}

# Rows refused even when granted: one whose refusal is there to keep the module's topic,
# and an internal topic, which no transaction may take in (Kafka's rule, whatever the ACLs).
GRANTED_REFUSAL = {"DeleteTopics by id": T29, "AddPartitionsToTxn of an internal topic": T29}


# Under a prefixed deny over a wildcard allow, an idempotent producer may still write to
# topics outside the prefix: authorize_by_resource_type allows it (the wildcard allow is
# never cancelled by a prefix), as Kafka's does.
ALLOWED_BESIDE_THE_PREFIX = {"InitProducerId", "InitProducerId without IDEMPOTENT_WRITE"}


def _mentions(value, name):
    if isinstance(value, dict):
        return any(_mentions(v, name) for v in value.values())
    if isinstance(value, list):
        return any(_mentions(v, name) for v in value)
    return value == name


# The rows whose request names the module's topic: their refusal must not tell whether it
# exists.
TOPIC_ROWS = [case for case, (_api, _version, body, _refused, _checks) in CASES.items()
              if not callable(body) and _mentions(body, TOPIC) and DENIED[case] is not None]


def test_every_row_has_a_refusal():
    assert set(DENIED) == set(CASES)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    principals = Principals()
    with principals.installed():
        authorizer = AclAuthorizer(super_users=parse_super_users(ADMIN))
        broker = BrokerThread(tmp_path_factory.mktemp("matrix") / "data", authorizer=authorizer)
        broker.broker.db.create_topic(TOPIC, 1)
        admin = principals.client(broker, ADMIN)
        alice = principals.client(broker, ALICE)
        meta = admin.call(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}]})
        broker.topic_id = meta["topics"][0]["topic_id"]
        commit = admin.call(ApiKey.OFFSET_COMMIT, 8, CASES["OffsetCommit"][2])
        assert commit["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        yield broker, authorizer, admin, alice
        alice.close()
        admin.close()
        broker.stop()


def _pattern(resource_type, style):
    if resource_type == R.CLUSTER:
        return ResourcePattern(R.CLUSTER, CLUSTER_NAME, P.LITERAL)
    if style == "prefixed":
        return ResourcePattern(resource_type, "checked", P.PREFIXED)
    return ResourcePattern(resource_type, "*", P.LITERAL)


def set_acls(served, bindings):
    """Make ``bindings`` every ACL there is (through the authorizer, as CreateAcls does)."""
    broker, authorizer, _admin, _alice = served
    broker.run(authorizer.delete_acls([AclBindingFilter()]))
    results = broker.run(authorizer.create_acls(list(bindings)))
    assert results == [None] * len(results)


def grants(case, style):
    _api, _version, _body, refused, checks = CASES[case]
    refused = {tuple(r[:2]) for r in refused}
    return [AclBinding(_pattern(t, style), AclEntry(ALICE, "*", op, Perm.ALLOW))
            for op, t, _audited in checks if (op, t) not in refused]


def denials():
    wildcard, prefix = "wildcard", "prefixed"
    return [AclBinding(_pattern(t, style), AclEntry(ALICE, "*", Op.ALL, permission))
            for style, permission in ((wildcard, Perm.ALLOW), (prefix, Perm.DENY))
            for t in (R.TOPIC, R.GROUP, R.CLUSTER, R.TRANSACTIONAL_ID)]


def send(served, case, who=None):
    broker, _authorizer, _admin, alice = served
    api_key, version, body, _refused, _checks = CASES[case]
    return (who or alice).call(api_key, version, body(broker) if callable(body) else body)


def codes(answer):
    """Every error code anywhere in an answer."""
    found = set()
    if isinstance(answer, dict):
        for key, value in answer.items():
            if key.endswith("error_code") and isinstance(value, int):
                found.add(value)
            else:
                found |= codes(value)
    elif isinstance(answer, list):
        for value in answer:
            found |= codes(value)
    return found


def state(served):
    """What a super user sees of everything a request could change."""
    _broker, _authorizer, admin, _alice = served
    topics = {t["name"]: len(t["partitions"]) for t in admin.call(
        ApiKey.METADATA, 12, {"topics": None})["topics"]}
    offsets = {}
    for name, count in topics.items():
        for ts in (-2, -1):
            answer = admin.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
                {"name": name, "partitions": [{"partition_index": p, "timestamp": ts}
                                              for p in range(count)]}]})
            offsets[(name, ts)] = [p["offset"] for p in answer["topics"][0]["partitions"]]
    groups = {g["group_id"]: g["group_state"] for g in admin.call(
        ApiKey.LIST_GROUPS, 4, {})["groups"]}
    committed = admin.call(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": g, "topics": None} for g in sorted(groups)]})["groups"] if groups else []
    config = admin.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]})
    acls = admin.call(ApiKey.DESCRIBE_ACLS, 3, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    quotas = admin.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    return topics, offsets, groups, committed, config["results"], acls["resources"], \
        quotas["entries"]


@pytest.mark.parametrize("style", ["wildcard", "prefixed"])
@pytest.mark.parametrize("case", CASES)
def test_granted_the_rows_acls_the_request_is_not_refused(served, case, style):
    set_acls(served, grants(case, style))
    answer = send(served, case)
    refused = codes(answer) & REFUSALS
    assert refused == ({GRANTED_REFUSAL[case]} if case in GRANTED_REFUSAL else set()), answer


@pytest.mark.parametrize("way", ["no ACL", "a prefixed deny over a wildcard allow"])
@pytest.mark.parametrize("case", CASES)
def test_refused_the_row_answers_kafkas_code_and_changes_nothing(served, case, way):
    set_acls(served, [] if way == "no ACL" else denials())
    before = state(served)
    answer = send(served, case)
    expected = DENIED[case]
    if way != "no ACL" and case in ALLOWED_BESIDE_THE_PREFIX:
        assert codes(answer) == {ErrorCode.NONE}, answer
    elif expected is None:
        assert not codes(answer) & REFUSALS, answer
        _silently_filtered(case, answer)
    else:
        assert expected in codes(answer), answer
    assert state(served) == before


def _silently_filtered(case, answer):
    """A row Kafka answers without an error leaves out what the principal may not see."""
    if case == "Metadata of all topics":
        assert not [t["name"] for t in answer["topics"] if t["name"].startswith("checked")]
    elif case.startswith("ListGroups"):
        assert not [g["group_id"] for g in answer["groups"]
                    if g["group_id"].startswith("checked")]
    elif case == "DescribeCluster":
        assert answer["cluster_authorized_operations"] == -2147483648
    elif case == "ListTransactions":
        assert not [t["transactional_id"] for t in answer["transaction_states"]
                    if t["transactional_id"].startswith("checked")]


def _renamed(value, old, new):
    if isinstance(value, dict):
        return {k: _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return new if value == old else value


@pytest.mark.parametrize("case", TOPIC_ROWS)
def test_a_refused_topic_is_answered_alike_whether_it_exists_or_not(served, case):
    broker, _authorizer, _admin, alice = served
    set_acls(served, denials())
    api_key, version, body, _refused, _checks = CASES[case]
    body = body(broker) if callable(body) else body
    existing = alice.call(api_key, version, body)
    missing = alice.call(api_key, version, _renamed(body, TOPIC, "checked-absent"))
    assert _renamed(missing, "checked-absent", TOPIC) == existing


_CHANGING = {
    "CreateTopics": (ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": "checked-made", "num_partitions": 1, "replication_factor": 1}],
        "timeout_ms": 5000}),
    "OffsetCommit": (ApiKey.OFFSET_COMMIT, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]}),
    "DeleteRecords": (ApiKey.DELETE_RECORDS, 2, {"topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": -1}]}],
        "timeout_ms": 5000}),
    "AlterClientQuotas": (ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [
        {"entity": [{"entity_type": "client-id", "entity_name": "checked-changed"}],
         "ops": [{"key": "request_percentage", "value": 500.0, "remove": False}]}],
        "validate_only": False}),
    "CreatePartitions": (ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "checked-made", "count": 2, "assignments": None}], "timeout_ms": 5000,
        "validate_only": False}),
}


@pytest.mark.parametrize("case", ["Produce", "CreateTopics", "OffsetCommit", "CreateAcls",
                                  "AlterClientQuotas", "DeleteRecords", "CreatePartitions"])
def test_what_the_state_shows_changes_when_the_request_is_allowed(served, case):
    """The check above would see a change: these rows, sent by a super user (for real
    where the table only validates), change what :func:`state` shows."""
    _broker, _authorizer, admin, _alice = served
    set_acls(served, [])
    before = state(served)
    answer = admin.call(*_CHANGING[case]) if case in _CHANGING else send(served, case, admin)
    assert not codes(answer) & REFUSALS, answer
    assert state(served) != before
