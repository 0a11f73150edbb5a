"""The KIP-430 ``authorized_operations`` fields of Metadata (v8+ topics, v8-10 cluster),
DescribeCluster and DescribeGroups (v3+).

With the broker's default authorizer (AllowAll, Kafka without ``authorizer.class.name``)
they are what kqlite answered before the authorization seam existed, the constants its
handlers held: every operation the resource type supports (Kafka's AclEntry), TOPIC 3576,
CLUSTER 8096, GROUP 328, on every entry asked for, errors included; the schema's default
-2147483648 when the request does not ask. With an authorizer that refuses some
operations, the field drops exactly their bits.
"""

import pytest

from authorizers import RecordingAuthorizer
from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, ResourceType as R

TOPIC_OPERATIONS, CLUSTER_OPERATIONS, GROUP_OPERATIONS = 3576, 8096, 328
NOT_ASKED = -2147483648
TOPIC, GROUP = "operated", "operated-group"


def _start(path, **options):
    broker = BrokerThread(path / "data", **options)
    broker.broker.db.create_topic(TOPIC, 1)
    client = RawClient(broker)
    answer = client.call(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    return broker, client


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    broker, client = _start(tmp_path_factory.mktemp("allow-all"))
    yield client
    client.close()
    broker.stop()


def _metadata(client, version, asked, names=(TOPIC, "operated-absent", "not/valid")):
    body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": asked}
    if version <= 10:
        body["include_cluster_authorized_operations"] = asked
    return client.call(ApiKey.METADATA, version, body)


@pytest.mark.parametrize("version", [8, 9, 10, 11, 12])
def test_metadata_with_allow_all_answers_every_supported_operation(default, version):
    asked = _metadata(default, version, True)
    # An existing topic, an unknown one and an invalid name: each entry carries them.
    assert [t["error_code"] for t in asked["topics"]] == [
        ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert [t["topic_authorized_operations"] for t in asked["topics"]] == [TOPIC_OPERATIONS] * 3
    plain = _metadata(default, version, False)
    assert [t["topic_authorized_operations"] for t in plain["topics"]] == [NOT_ASKED] * 3
    if version <= 10:
        assert asked["cluster_authorized_operations"] == CLUSTER_OPERATIONS
        assert plain["cluster_authorized_operations"] == NOT_ASKED


@pytest.mark.parametrize("asked, expected", [(True, CLUSTER_OPERATIONS), (False, NOT_ASKED)])
def test_describe_cluster_with_allow_all(default, asked, expected):
    answer = default.call(ApiKey.DESCRIBE_CLUSTER, 1,
                          {"include_cluster_authorized_operations": asked})
    assert answer["cluster_authorized_operations"] == expected


@pytest.mark.parametrize("version", [3, 4, 5])
def test_describe_groups_with_allow_all(default, version):
    body = {"groups": [GROUP, "operated-never-seen"], "include_authorized_operations": True}
    groups = default.call(ApiKey.DESCRIBE_GROUPS, version, body)["groups"]
    assert [(g["group_state"], g["authorized_operations"]) for g in groups] == \
        [("Empty", GROUP_OPERATIONS), ("Dead", GROUP_OPERATIONS)]
    plain = default.call(ApiKey.DESCRIBE_GROUPS, version,
                         dict(body, include_authorized_operations=False))["groups"]
    assert [g["authorized_operations"] for g in plain] == [NOT_ASKED] * 2


def test_the_fields_drop_the_bits_of_refused_operations(tmp_path):
    authorizer = RecordingAuthorizer((Op.WRITE, R.TOPIC), (Op.ALTER, R.CLUSTER),
                                     (Op.DELETE, R.GROUP))
    broker, client = _start(tmp_path, authorizer=authorizer)
    try:
        meta = _metadata(client, 10, True, names=(TOPIC,))
        assert meta["topics"][0]["topic_authorized_operations"] == \
            TOPIC_OPERATIONS & ~(1 << Op.WRITE)
        assert meta["cluster_authorized_operations"] == CLUSTER_OPERATIONS & ~(1 << Op.ALTER)
        cluster = client.call(ApiKey.DESCRIBE_CLUSTER, 1,
                              {"include_cluster_authorized_operations": True})
        assert cluster["cluster_authorized_operations"] == CLUSTER_OPERATIONS & ~(1 << Op.ALTER)
        (group,) = client.call(ApiKey.DESCRIBE_GROUPS, 5, {
            "groups": [GROUP], "include_authorized_operations": True})["groups"]
        assert group["authorized_operations"] == GROUP_OPERATIONS & ~(1 << Op.DELETE)
    finally:
        client.close()
        broker.stop()
