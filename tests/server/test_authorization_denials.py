"""Refused requests, against a real broker (in a thread) whose authorizer refuses what each
test names: every API answers Kafka's code where Kafka puts it (per partition, per entry
or for the whole request), stores and changes nothing, and tells nothing about what the
principal may not see -- a refused topic is answered the same whether it exists or not.
"""

import uuid

import pytest

from authorizers import RecordingAuthorizer
from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, ResourceType as R

TOPIC, OTHER, GROUP = "guarded", "open", "guarded-group"
NOT_ASKED = -2147483648
ZERO_UUID = uuid.UUID(int=0)
_serial = iter(range(1_000_000))


def fresh(prefix="guarded-new"):
    return f"{prefix}-{next(_serial)}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    authorizer = RecordingAuthorizer()
    broker = BrokerThread(tmp_path_factory.mktemp("denials") / "data", authorizer=authorizer)
    broker.broker.db.create_topic(TOPIC, 1)
    broker.broker.db.create_topic(OTHER, 1)
    client = RawClient(broker)
    for topic in (TOPIC, OTHER):
        assert produce(client, {topic: b"first"}) == {topic: ErrorCode.NONE}
    assert commit(client, GROUP, {TOPIC: 1, OTHER: 1}) == {TOPIC: 0, OTHER: 0}
    yield broker, authorizer, client
    client.close()
    broker.stop()


@pytest.fixture
def refuse(served):
    """``refuse(*rules)``: the broker's authorizer refuses those from now until the test
    ends (and nothing else)."""
    _broker, authorizer, _client = served
    yield authorizer.refuse
    authorizer.refuse()


@pytest.fixture
def client(served):
    return served[2]


# -- helpers, each asked with nothing refused ------------------------------------------------

def produce(client, records, **body):
    answer = client.call(ApiKey.PRODUCE, 9, dict({"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": t, "partition_data": [{"index": 0, "records": r if isinstance(r, bytes) and
                                        r[16:17] == b"\x02" else build_batch([r])}]}
        for t, r in records.items()]}, **body))
    return {t["name"]: t["partition_responses"][0]["error_code"] for t in answer["responses"]}


def commit(client, group, offsets, version=8):
    answer = client.call(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": o,
                                               "committed_leader_epoch": -1,
                                               "committed_metadata": ""}]}
                   for t, o in offsets.items()]})
    return {t["name"]: t["partitions"][0]["error_code"] for t in answer["topics"]}


def committed(client, group, topic):
    answer = client.call(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    return answer["groups"][0]["topics"][0]["partitions"][0]["committed_offset"]


def offset(client, topic, timestamp):
    answer = client.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
    return answer["topics"][0]["partitions"][0]["offset"]


def log_end(client, topic):
    return offset(client, topic, -1)


def metadata(client, names, version=9, auto=False):
    return client.call(ApiKey.METADATA, version, {
        "topics": None if names is None else [{"name": n} for n in names],
        "allow_auto_topic_creation": auto})["topics"]


def exists(client, topic):
    return metadata(client, [topic])[0]["error_code"] == ErrorCode.NONE


def create(client, topic, partitions=1):
    answer = client.call(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": topic, "num_partitions": partitions, "replication_factor": 1}],
        "timeout_ms": 5000})
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE, answer


def group_state(client, group):
    return client.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"][0]["group_state"]


def topic_config(client, topic, name):
    answer = client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": topic, "configuration_keys": [name]}]})
    return answer["results"][0]["configs"][0]["value"]


# -- Produce, Fetch, ListOffsets, DeleteRecords, OffsetForLeaderEpoch -------------------------

def test_produce_refused_for_a_topic_appends_nothing_there_and_tells_nothing(client, refuse):
    before = {TOPIC: log_end(client, TOPIC), OTHER: log_end(client, OTHER)}
    refuse((Op.WRITE, R.TOPIC, TOPIC), (Op.WRITE, R.TOPIC, "guarded-absent"))
    answer = produce(client, {TOPIC: b"no", "guarded-absent": b"no", OTHER: b"yes"})
    assert answer == {TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                      "guarded-absent": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                      OTHER: ErrorCode.NONE}
    refuse()
    assert log_end(client, TOPIC) == before[TOPIC]
    assert log_end(client, OTHER) == before[OTHER] + 1


def test_produce_of_transactional_batches_refused_on_the_transactional_id(served, refuse):
    _broker, authorizer, client = served
    before = log_end(client, OTHER)
    refuse((Op.WRITE, R.TRANSACTIONAL_ID, "guarded-txn"))
    batch = build_batch([b"t"], producer_id=9, producer_epoch=0, base_sequence=0,
                        transactional=True)
    answer = produce(client, {OTHER: batch}, transactional_id="guarded-txn")
    assert answer == {OTHER: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    # The whole request stops there: no topic is even asked about.
    assert authorizer.asked() == {(Op.WRITE, R.TRANSACTIONAL_ID)}
    refuse()
    assert log_end(client, OTHER) == before


def _fetch(client, topic, replica_id=-1):
    answer = client.call(ApiKey.FETCH, 12, {
        "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return answer["responses"][0]["partitions"][0]


@pytest.mark.parametrize("topic", [TOPIC, "guarded-absent"])
def test_fetch_refused_reads_nothing(client, refuse, topic):
    refuse((Op.READ, R.TOPIC))
    part = _fetch(client, topic)
    assert (part["error_code"], part["high_watermark"], part["log_start_offset"],
            bytes(part["records"])) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, b"")


def test_a_follower_fetch_without_cluster_action_reads_nothing(client, refuse):
    refuse((Op.CLUSTER_ACTION, R.CLUSTER))
    part = _fetch(client, TOPIC, replica_id=0)
    assert (part["error_code"], bytes(part["records"])) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, b"")


@pytest.mark.parametrize("topic", [TOPIC, "guarded-absent"])
def test_list_offsets_refused(client, refuse, topic):
    refuse((Op.DESCRIBE, R.TOPIC))
    for version in (0, 7):
        answer = client.call(ApiKey.LIST_OFFSETS, version, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1,
                                            "max_num_offsets": 1}]}]})
        part = answer["topics"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert part.get("offset", -1) == -1 and part.get("old_style_offsets", []) == []


def test_delete_records_refused_deletes_nothing(client, refuse):
    start = offset(client, TOPIC, -2)
    refuse((Op.DELETE, R.TOPIC))
    answer = client.call(ApiKey.DELETE_RECORDS, 2, {"topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": -1}]}],
        "timeout_ms": 5000})
    part = answer["topics"][0]["partitions"][0]
    assert (part["error_code"], part["low_watermark"]) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    refuse()
    assert offset(client, TOPIC, -2) == start


def test_offset_for_leader_epoch_needs_cluster_action_or_describe(client, refuse):
    body = {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    refuse((Op.CLUSTER_ACTION, R.CLUSTER))
    allowed = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body)
    assert allowed["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    refuse((Op.CLUSTER_ACTION, R.CLUSTER), (Op.DESCRIBE, R.TOPIC))
    part = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body)["topics"][0]["partitions"][0]
    assert (part["error_code"], part["end_offset"]) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)


# -- Metadata ---------------------------------------------------------------------------------

def _raw_metadata(served, name):
    """The bytes of a Metadata v12 response for ``name``, on a new connection (so that the
    correlation id is the same every time)."""
    broker = served[0]
    raw = RawClient(broker)
    try:
        raw.send(ApiKey.METADATA, 12, {"topics": [{"name": name}],
                                       "allow_auto_topic_creation": True,
                                       "include_topic_authorized_operations": True})
        return raw.frame()
    finally:
        raw.close()


def test_metadata_answers_a_refused_topic_alike_whether_it_exists_or_not(served, client, refuse):
    name = fresh()
    create(client, name)
    refuse((Op.DESCRIBE, R.TOPIC, name))
    existing = _raw_metadata(served, name)
    refuse()
    client.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": [name], "timeout_ms": 5000})
    assert not exists(client, name)
    refuse((Op.DESCRIBE, R.TOPIC, name))
    missing = _raw_metadata(served, name)
    assert existing == missing
    refuse()
    assert not exists(client, name), "a topic the principal may not describe was auto-created"
    (entry,) = metadata(client, [name], version=12)
    assert entry["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    refuse((Op.DESCRIBE, R.TOPIC, name))
    (entry,) = metadata(client, [name], version=12)
    assert (entry["error_code"], entry["topic_id"], entry["partitions"]) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ZERO_UUID, [])


def test_metadata_of_all_topics_leaves_out_what_the_principal_may_not_describe(client, refuse):
    refuse((Op.DESCRIBE, R.TOPIC, TOPIC))
    names = {t["name"] for t in metadata(client, None)}
    assert OTHER in names and TOPIC not in names


def test_metadata_by_id_refused_gives_the_id_back_without_the_name(client, refuse):
    (entry,) = metadata(client, [TOPIC], version=12)
    refuse((Op.DESCRIBE, R.TOPIC))
    answer = client.call(ApiKey.METADATA, 12, {"topics": [
        {"name": None, "topic_id": entry["topic_id"]}]})["topics"]
    assert [(t["error_code"], t["name"], t["topic_id"]) for t in answer] == \
        [(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, entry["topic_id"])]


def test_metadata_auto_creates_only_with_create_on_the_cluster_or_the_topic(client, refuse):
    refused, allowed = fresh(), fresh()
    refuse((Op.CREATE, R.CLUSTER), (Op.CREATE, R.TOPIC, refused))
    answer = {t["name"]: t for t in metadata(client, [refused, allowed], auto=True)}
    assert (answer[refused]["error_code"], answer[refused]["partitions"]) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])
    refuse()
    assert not exists(client, refused)
    assert exists(client, allowed)


# -- Groups and offsets -----------------------------------------------------------------------

def test_offset_commit_refused_on_the_group_commits_nothing(client, refuse):
    before = committed(client, GROUP, TOPIC)
    refuse((Op.READ, R.GROUP))
    for version in (0, 2, 8):
        assert commit(client, GROUP, {TOPIC: 7}, version) == \
            {TOPIC: ErrorCode.GROUP_AUTHORIZATION_FAILED}
    refuse()
    assert committed(client, GROUP, TOPIC) == before


def test_offset_commit_refused_on_a_topic_commits_the_others(client, refuse):
    before = committed(client, GROUP, TOPIC)
    refuse((Op.READ, R.TOPIC, TOPIC), (Op.READ, R.TOPIC, "guarded-absent"))
    assert commit(client, GROUP, {TOPIC: 5, "guarded-absent": 5, OTHER: 2}) == {
        TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "guarded-absent": ErrorCode.TOPIC_AUTHORIZATION_FAILED, OTHER: ErrorCode.NONE}
    refuse()
    assert committed(client, GROUP, TOPIC) == before
    assert committed(client, GROUP, OTHER) == 2


def test_offset_fetch_refused_on_the_group(client, refuse):
    refuse((Op.DESCRIBE, R.GROUP))
    v8 = client.call(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]})
    assert (v8["groups"][0]["error_code"], v8["groups"][0]["topics"]) == \
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    body = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    v3 = client.call(ApiKey.OFFSET_FETCH, 3, body)
    assert (v3["error_code"], v3["topics"]) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    v0 = client.call(ApiKey.OFFSET_FETCH, 0, body)
    part = v0["topics"][0]["partitions"][0]
    assert (part["error_code"], part["committed_offset"]) == \
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, -1)


def test_offset_fetch_refused_on_a_topic(client, refuse):
    refuse((Op.DESCRIBE, R.TOPIC, TOPIC))
    named = client.call(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": GROUP, "topics": [
        {"name": TOPIC, "partition_indexes": [0]},
        {"name": OTHER, "partition_indexes": [0]}]}]})["groups"][0]["topics"]
    answer = {t["name"]: t["partitions"][0] for t in named}
    assert (answer[TOPIC]["error_code"], answer[TOPIC]["committed_offset"]) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    assert answer[OTHER]["error_code"] == ErrorCode.NONE
    every = client.call(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": GROUP, "topics": None}]})["groups"][0]
    assert every["error_code"] == ErrorCode.NONE
    assert [t["name"] for t in every["topics"]] == [OTHER]


@pytest.mark.parametrize("version", [3, 4])
def test_find_coordinator_refused(client, refuse, version):
    refuse((Op.DESCRIBE, R.GROUP), (Op.DESCRIBE, R.TRANSACTIONAL_ID))
    for key_type, code, text in ((0, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                  "Group authorization failed."),
                                 (1, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  "Transactional Id authorization failed.")):
        body = {"key_type": key_type}
        body.update({"coordinator_keys": ["k"]} if version >= 4 else {"key": "k"})
        answer = client.call(ApiKey.FIND_COORDINATOR, version, body)
        found = answer["coordinators"][0] if version >= 4 else answer
        assert (found["error_code"], found["node_id"], found["host"], found["port"],
                found["error_message"]) == (code, -1, "", -1, text)


_MEMBERSHIP = {
    ApiKey.JOIN_GROUP: (5, {"session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                            "member_id": "", "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b""}]}),
    ApiKey.SYNC_GROUP: (3, {"generation_id": 1, "member_id": "m", "assignments": []}),
    ApiKey.HEARTBEAT: (3, {"generation_id": 1, "member_id": "m"}),
    ApiKey.LEAVE_GROUP: (3, {"members": [{"member_id": "m"}]}),
}


@pytest.mark.parametrize("api_key", _MEMBERSHIP)
def test_membership_refused_never_reaches_the_coordinator(client, refuse, api_key):
    group = fresh("guarded-members")
    version, body = _MEMBERSHIP[api_key]
    refuse((Op.READ, R.GROUP))
    answer = client.call(api_key, version, dict(body, group_id=group))
    assert answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert answer.get("members", []) == [] and answer.get("member_id", "") == ""
    refuse()
    assert group_state(client, group) == "Dead"


def test_describe_groups_refuses_per_group(client, refuse):
    refuse((Op.DESCRIBE, R.GROUP, GROUP))
    groups = client.call(ApiKey.DESCRIBE_GROUPS, 5, {
        "groups": [GROUP, "guarded-other"], "include_authorized_operations": True})["groups"]
    refused, other = groups
    assert (refused["group_id"], refused["error_code"], refused["group_state"],
            refused["authorized_operations"]) == \
        (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "", NOT_ASKED)
    assert (other["error_code"], other["authorized_operations"]) == (ErrorCode.NONE, 328)


def test_list_groups_filters_silently_without_describe_on_the_cluster(client, refuse):
    assert commit(client, "guarded-listed", {OTHER: 1}) == {OTHER: ErrorCode.NONE}
    everything = {g["group_id"] for g in client.call(ApiKey.LIST_GROUPS, 4, {})["groups"]}
    assert {GROUP, "guarded-listed"} <= everything
    refuse((Op.DESCRIBE, R.CLUSTER), (Op.DESCRIBE, R.GROUP, GROUP))
    answer = client.call(ApiKey.LIST_GROUPS, 4, {})
    assert answer["error_code"] == ErrorCode.NONE
    assert {g["group_id"] for g in answer["groups"]} == everything - {GROUP}


def test_delete_groups_refused_keeps_the_group(client, refuse):
    refuse((Op.DELETE, R.GROUP))
    answer = client.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [GROUP]})
    assert answer["results"] == [{"group_id": GROUP,
                                  "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}]
    refuse()
    assert committed(client, GROUP, OTHER) >= 0


def test_offset_delete_refused(client, refuse):
    body = {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]},
                                          {"name": OTHER, "partitions": [{"partition_index": 0}]}]}
    before = committed(client, GROUP, TOPIC)
    refuse((Op.DELETE, R.GROUP))
    answer = client.call(ApiKey.OFFSET_DELETE, 0, body)
    assert (answer["error_code"], answer["topics"]) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    refuse((Op.READ, R.TOPIC, TOPIC), (Op.READ, R.TOPIC, OTHER))
    answer = client.call(ApiKey.OFFSET_DELETE, 0, body)
    assert answer["error_code"] == ErrorCode.NONE
    assert [t["partitions"][0]["error_code"] for t in answer["topics"]] == \
        [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
    refuse()
    assert committed(client, GROUP, TOPIC) == before


# -- Topic and config administration ----------------------------------------------------------

def test_create_topics_refused_creates_nothing(client, refuse):
    name = fresh()
    refuse((Op.CREATE, R.CLUSTER), (Op.CREATE, R.TOPIC))
    answer = client.call(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": name, "num_partitions": 3, "replication_factor": 1},
        {"name": "dup", "num_partitions": 1, "replication_factor": 1},
        {"name": "dup", "num_partitions": 1, "replication_factor": 1}],
        "timeout_ms": 5000})["topics"]
    assert [(t["error_code"], t["error_message"], t["num_partitions"]) for t in answer] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.", -1),
        (ErrorCode.INVALID_REQUEST, "found multiple entries for this topic", -1),
        (ErrorCode.INVALID_REQUEST, "found multiple entries for this topic", -1)]
    refuse()
    assert not exists(client, name)


def test_create_topics_without_describe_configs_creates_and_says_so(client, refuse):
    name = fresh()
    refuse((Op.DESCRIBE_CONFIGS, R.TOPIC))
    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 5000}
    (topic,) = client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
    assert (topic["error_code"], topic["topic_config_error_code"]) == \
        (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    # A creation attempted and failed gets no TopicConfigErrorCode (Kafka resets it).
    (again,) = client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
    assert (again["error_code"], again["topic_config_error_code"]) == \
        (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.NONE)
    refuse()
    assert exists(client, name)


def test_delete_topics_refused_deletes_nothing_and_hides_a_name_given_by_id(client, refuse):
    (entry,) = metadata(client, [TOPIC], version=12)
    refuse((Op.DELETE, R.TOPIC))
    answer = client.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": [TOPIC, "guarded-absent"],
                                                   "timeout_ms": 5000})["responses"]
    assert [(t["name"], t["error_code"], t["error_message"]) for t in answer] == [
        (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None),
        ("guarded-absent", ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)]
    refuse((Op.DESCRIBE, R.TOPIC))
    (by_id,) = client.call(ApiKey.DELETE_TOPICS, 6, {"topics": [
        {"name": None, "topic_id": entry["topic_id"]}], "timeout_ms": 5000})["responses"]
    assert (by_id["name"], by_id["topic_id"], by_id["error_code"]) == \
        (None, entry["topic_id"], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    refuse()
    assert exists(client, TOPIC)


def test_create_partitions_refused_adds_none(client, refuse):
    refuse((Op.ALTER, R.TOPIC))
    (result,) = client.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": OTHER, "count": 4, "assignments": None}], "timeout_ms": 5000})["results"]
    assert (result["error_code"], result["error_message"]) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")
    refuse()
    assert len(metadata(client, [OTHER])[0]["partitions"]) == 1


@pytest.mark.parametrize("resource_type, name, code, text", [
    (2, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    (4, "0", ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
])
def test_describe_configs_refused(client, refuse, resource_type, name, code, text):
    refuse((Op.DESCRIBE_CONFIGS, R.TOPIC), (Op.DESCRIBE_CONFIGS, R.CLUSTER))
    (result,) = client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": resource_type, "resource_name": name,
         "configuration_keys": None}]})["results"]
    assert (result["error_code"], result["error_message"], result["configs"]) == \
        (code, text, [])


@pytest.mark.parametrize("incremental", [False, True])
def test_alter_configs_refused_changes_nothing(client, refuse, incremental):
    before = topic_config(client, TOPIC, "retention.ms")
    config = {"name": "retention.ms", "value": "12345", "config_operation": 0}
    refuse((Op.ALTER_CONFIGS, R.TOPIC), (Op.ALTER_CONFIGS, R.CLUSTER))
    api_key, version = (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1) if incremental \
        else (ApiKey.ALTER_CONFIGS, 2)
    resources = [{"resource_type": 2, "resource_name": TOPIC, "configs": [config]},
                 {"resource_type": 4, "resource_name": "", "configs": []},
                 # malformed (a config named twice) is refused as such first
                 {"resource_type": 2, "resource_name": OTHER, "configs": [config, config]}]
    answer = client.call(api_key, version, {"resources": resources, "validate_only": False})
    assert [(r["error_code"], r["error_message"]) for r in answer["responses"]][:2] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None),
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)]
    assert answer["responses"][2]["error_code"] == ErrorCode.INVALID_REQUEST
    refuse()
    assert topic_config(client, TOPIC, "retention.ms") == before


def test_incremental_alter_configs_of_a_broker_logger_refused(client, refuse):
    refuse((Op.ALTER_CONFIGS, R.CLUSTER))
    (result,) = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 8, "resource_name": "0", "configs": [
            {"name": "kafka", "config_operation": 0, "value": "DEBUG"}]}]})["responses"]
    assert (result["error_code"], result["error_message"]) == \
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


# -- Cluster-wide APIs ------------------------------------------------------------------------

def test_describe_log_dirs_refused_answers_at_the_top_with_no_results(client, refuse):
    refuse((Op.DESCRIBE, R.CLUSTER))
    answer = client.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert (answer["error_code"], answer["results"]) == \
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])


def test_describe_cluster_without_describe_on_it_has_no_authorized_operations(client, refuse):
    refuse((Op.DESCRIBE, R.CLUSTER))
    asked = client.call(ApiKey.DESCRIBE_CLUSTER, 1,
                        {"include_cluster_authorized_operations": True})
    plain = client.call(ApiKey.DESCRIBE_CLUSTER, 1,
                        {"include_cluster_authorized_operations": False})
    assert (asked["error_code"], asked["cluster_authorized_operations"]) == (ErrorCode.NONE, 0)
    assert plain["cluster_authorized_operations"] == NOT_ASKED


def test_describe_producers_refused(client, refuse):
    refuse((Op.READ, R.TOPIC))
    answer = client.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": TOPIC, "partition_indexes": [0]},
        {"name": "not/valid", "partition_indexes": [0]}]})["topics"]
    refused, invalid = (t["partitions"][0] for t in answer)
    assert (refused["error_code"], refused["error_message"], refused["active_producers"]) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", [])
    assert invalid["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_init_producer_id_refused(client, refuse):
    body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1}
    refuse((Op.IDEMPOTENT_WRITE, R.CLUSTER))
    assert client.call(ApiKey.INIT_PRODUCER_ID, 4, body)["error_code"] == ErrorCode.NONE
    refuse((Op.IDEMPOTENT_WRITE, R.CLUSTER), (Op.WRITE, R.TOPIC))
    answer = client.call(ApiKey.INIT_PRODUCER_ID, 4, body)
    assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == \
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
    refuse((Op.WRITE, R.TRANSACTIONAL_ID))
    answer = client.call(ApiKey.INIT_PRODUCER_ID, 4, dict(body, transactional_id="t"))
    assert (answer["error_code"], answer["producer_id"]) == \
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)


# -- Transactions ------------------------------------------------------------------------------

def _begin(client, txn_id, topics=()):
    """InitProducerId for ``txn_id`` and AddPartitionsToTxn of ``topics`` (partition 0)."""
    init = client.call(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": txn_id, "transaction_timeout_ms": 600000, "producer_id": -1,
        "producer_epoch": -1})
    producer = (init["producer_id"], init["producer_epoch"])
    if topics:
        assert _add(client, txn_id, producer, topics) == {(t, 0): 0 for t in topics}
    return producer


def _add(client, txn_id, producer, topics):
    answer = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics]})
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in answer["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def _txn_state(client, txn_id):
    (entry,) = client.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})[
        "transaction_states"]
    return entry["transaction_state"], [t["topic"] for t in entry["topics"]]


def test_add_partitions_refused_adds_nothing(served, refuse):
    _broker, _authorizer, client = served
    txn = fresh("guarded-txn")
    producer = _begin(client, txn)
    refuse((Op.WRITE, R.TRANSACTIONAL_ID))
    assert _add(client, txn, producer, [TOPIC, OTHER]) == {
        (TOPIC, 0): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        (OTHER, 0): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    refuse((Op.WRITE, R.TOPIC, TOPIC))
    assert _add(client, txn, producer, [TOPIC, "guarded-absent", OTHER]) == {
        (TOPIC, 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("guarded-absent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (OTHER, 0): ErrorCode.OPERATION_NOT_ATTEMPTED}
    refuse((Op.CLUSTER_ACTION, R.CLUSTER))
    answer = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [
        {"transactional_id": txn, "producer_id": producer[0], "producer_epoch": producer[1],
         "verify_only": False, "topics": [{"name": OTHER, "partitions": [0]}]}]})
    assert (answer["error_code"], answer["results_by_transaction"]) == \
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    refuse()
    assert _txn_state(client, txn) == ("Empty", [])


def test_add_offsets_and_end_txn_refused_change_nothing(served, refuse):
    _broker, _authorizer, client = served
    txn = fresh("guarded-txn")
    producer = _begin(client, txn, [OTHER])
    body = {"transactional_id": txn, "producer_id": producer[0],
            "producer_epoch": producer[1], "group_id": GROUP, "committed": True}
    refuse((Op.WRITE, R.TRANSACTIONAL_ID))
    assert client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, body)["error_code"] == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert client.call(ApiKey.END_TXN, 3, body)["error_code"] == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    refuse((Op.READ, R.GROUP))
    assert client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, body)["error_code"] == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    refuse()
    assert _txn_state(client, txn) == ("Ongoing", [OTHER])


def test_txn_offset_commit_refused_commits_nothing(served, refuse):
    _broker, _authorizer, client = served
    txn = fresh("guarded-txn")
    producer = _begin(client, txn)
    before = {t: committed(client, GROUP, t) for t in (TOPIC, OTHER)}
    body = {"transactional_id": txn, "group_id": GROUP, "producer_id": producer[0],
            "producer_epoch": producer[1], "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "committed_offset": 9,
                                            "committed_leader_epoch": -1,
                                            "committed_metadata": ""}]}
                for t in (TOPIC, OTHER)]}

    def answer():
        return {t["name"]: t["partitions"][0]["error_code"]
                for t in client.call(ApiKey.TXN_OFFSET_COMMIT, 3, body)["topics"]}
    refuse((Op.WRITE, R.TRANSACTIONAL_ID))
    assert answer() == {TOPIC: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        OTHER: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    refuse((Op.READ, R.GROUP))
    assert answer() == {TOPIC: ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        OTHER: ErrorCode.GROUP_AUTHORIZATION_FAILED}
    # The topic the principal may read gets the coordinator's answer: the offsets
    # partition is not in the transaction.
    refuse((Op.READ, R.TOPIC, TOPIC))
    assert answer() == {TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        OTHER: ErrorCode.INVALID_TXN_STATE}
    refuse()
    assert {t: committed(client, GROUP, t) for t in (TOPIC, OTHER)} == before


def test_write_txn_markers_refused_writes_nothing(client, refuse):
    before = log_end(client, OTHER)
    refuse((Op.ALTER, R.CLUSTER), (Op.CLUSTER_ACTION, R.CLUSTER))
    answer = client.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": 5, "producer_epoch": 0, "transaction_result": False,
         "topics": [{"name": OTHER, "partition_indexes": [0]}], "coordinator_epoch": 0}]})
    (marker,) = answer["markers"]
    assert marker["topics"][0]["partitions"] == [
        {"partition_index": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}]
    refuse()
    assert log_end(client, OTHER) == before


def test_describe_and_list_transactions_show_only_what_may_be_described(served, refuse):
    _broker, _authorizer, client = served
    txn = fresh("guarded-txn")
    _begin(client, txn, [TOPIC, OTHER])
    refuse((Op.DESCRIBE, R.TRANSACTIONAL_ID))
    (entry,) = client.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn]})[
        "transaction_states"]
    assert (entry["error_code"], entry["transaction_state"], entry["producer_id"]) == \
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", 0)
    listed = client.call(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [],
                                                       "producer_id_filters": [],
                                                       "duration_filter": -1})
    assert (listed["error_code"], listed["transaction_states"]) == (ErrorCode.NONE, [])
    refuse((Op.DESCRIBE, R.TOPIC, TOPIC))
    assert _txn_state(client, txn) == ("Ongoing", [OTHER])
