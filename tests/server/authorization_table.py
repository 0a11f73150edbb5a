"""Which ACLs each API asks for: Kafka 3.9's KafkaApis as the project's security notes
tabulate it (kafka-security.md, section 4.4, "Per-API checks"), for every API kqlite
serves, as one table shared by the tests that hold the broker to it.

``CASES`` maps a case name to (API, version, request body or a function of the broker
making one, the checks a test authorizer refuses, the checks asked). A check is
``(operation, resource type, audited)``: ``quiet`` marks the checks Kafka makes with
``logIfDenied = false`` (a filter, or a check a fallback follows), and a case with
refusals lists the fallback checks they lead to. Every request names resources whose
names start with ``checked`` (topics, groups, transactional ids; the cluster is
``kafka-cluster``), so that one PREFIXED ACL can cover them.

tests/server/test_authorization_checks.py asks the table of a recording authorizer;
tests/server/test_authorization_matrix.py grants and refuses its checks with real ACLs.
"""

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey
from kqlite.protocol.acl import AclOperation as Op, ResourceType as R

TOPIC, GROUP, TXN = "checked", "checked-group", "checked-txn"
_serial = iter(range(1_000_000))


def quiet(operation, resource_type):
    """A check whose refusal Kafka does not audit (logIfDenied = false)."""
    return operation, resource_type, False


def _checks(*pairs):
    return {p if len(p) == 3 else (*p, True) for p in pairs}


def _produce(transactional=False):
    body = {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [
            {"index": 0, "records": build_batch([b"v"], producer_id=7 if transactional else -1,
                                                producer_epoch=0 if transactional else -1,
                                                base_sequence=0 if transactional else -1,
                                                transactional=transactional)}]}]}
    if transactional:
        body["transactional_id"] = "checked-txn"
    return body


def _fetch(replica_id):
    return {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": TOPIC, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _new_topic():
    return f"checked-new-{next(_serial)}"


def _config(resource_type, name, incremental=False):
    config = {"name": "retention.ms", "value": "100000"}
    if incremental:
        config["config_operation"] = 0
    configs = [config] if resource_type == 2 else []
    return {"resources": [{"resource_type": resource_type, "resource_name": name,
                           "configs": configs}], "validate_only": True}


# (API, version, request body or a function of the broker making one, refused rules,
#  the checks asked).
CASES = {
    "Produce": (ApiKey.PRODUCE, 9, _produce(), (), _checks((Op.WRITE, R.TOPIC))),
    "Produce with transactional batches": (
        ApiKey.PRODUCE, 9, _produce(transactional=True), (),
        _checks((Op.WRITE, R.TRANSACTIONAL_ID), (Op.WRITE, R.TOPIC))),
    "Fetch from a consumer": (ApiKey.FETCH, 12, _fetch(-1), (), _checks((Op.READ, R.TOPIC))),
    "Fetch from a follower": (ApiKey.FETCH, 12, _fetch(0), (),
                              _checks((Op.CLUSTER_ACTION, R.CLUSTER))),
    "ListOffsets": (ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, (),
        _checks((Op.DESCRIBE, R.TOPIC))),
    "Metadata": (ApiKey.METADATA, 9, {"topics": [{"name": TOPIC}],
                                      "allow_auto_topic_creation": False}, (),
                 _checks((Op.DESCRIBE, R.TOPIC))),
    "Metadata of all topics": (ApiKey.METADATA, 9, {"topics": None}, (),
                               _checks(quiet(Op.DESCRIBE, R.TOPIC))),
    "Metadata auto-creating a topic": (
        ApiKey.METADATA, 9, lambda _: {"topics": [{"name": _new_topic()}],
                                       "allow_auto_topic_creation": True}, (),
        _checks((Op.DESCRIBE, R.TOPIC), quiet(Op.CREATE, R.CLUSTER))),
    "Metadata auto-creating without CREATE on the cluster": (
        ApiKey.METADATA, 9, lambda _: {"topics": [{"name": _new_topic()}],
                                       "allow_auto_topic_creation": True},
        [(Op.CREATE, R.CLUSTER)],
        _checks((Op.DESCRIBE, R.TOPIC), quiet(Op.CREATE, R.CLUSTER), (Op.CREATE, R.TOPIC))),
    "OffsetCommit": (ApiKey.OFFSET_COMMIT, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]}, (),
        _checks((Op.READ, R.GROUP), (Op.READ, R.TOPIC))),
    "OffsetFetch": (ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}, (),
        _checks((Op.DESCRIBE, R.GROUP), (Op.DESCRIBE, R.TOPIC))),
    "OffsetFetch of all offsets": (ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": GROUP, "topics": None}]}, (),
        _checks((Op.DESCRIBE, R.GROUP), (Op.DESCRIBE, R.TOPIC))),
    "FindCoordinator of a group": (ApiKey.FIND_COORDINATOR, 4, {
        "key_type": 0, "coordinator_keys": [GROUP]}, (), _checks((Op.DESCRIBE, R.GROUP))),
    "FindCoordinator of a transactional id": (ApiKey.FIND_COORDINATOR, 4, {
        "key_type": 1, "coordinator_keys": ["checked-txn"]}, (),
        _checks((Op.DESCRIBE, R.TRANSACTIONAL_ID))),
    "FindCoordinator of a share group": (ApiKey.FIND_COORDINATOR, 6, {
        "key_type": 2, "coordinator_keys": ["share"]}, (),
        _checks((Op.CLUSTER_ACTION, R.CLUSTER))),
    "JoinGroup": (ApiKey.JOIN_GROUP, 5, {
        "group_id": "checked-join", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]}, (), _checks((Op.READ, R.GROUP))),
    "SyncGroup": (ApiKey.SYNC_GROUP, 3, {"group_id": "checked-join", "generation_id": 1,
                                         "member_id": "m", "assignments": []}, (),
                  _checks((Op.READ, R.GROUP))),
    "Heartbeat": (ApiKey.HEARTBEAT, 3, {"group_id": "checked-join", "generation_id": 1,
                                        "member_id": "m"}, (), _checks((Op.READ, R.GROUP))),
    "LeaveGroup": (ApiKey.LEAVE_GROUP, 3, {"group_id": "checked-join",
                                           "members": [{"member_id": "m"}]}, (),
                   _checks((Op.READ, R.GROUP))),
    "DescribeGroups": (ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP]}, (),
                       _checks((Op.DESCRIBE, R.GROUP))),
    "ListGroups": (ApiKey.LIST_GROUPS, 4, {}, (), _checks(quiet(Op.DESCRIBE, R.CLUSTER))),
    "ListGroups without DESCRIBE on the cluster": (
        ApiKey.LIST_GROUPS, 4, {}, [(Op.DESCRIBE, R.CLUSTER)],
        _checks(quiet(Op.DESCRIBE, R.CLUSTER), quiet(Op.DESCRIBE, R.GROUP))),
    "ApiVersions": (ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                             "client_software_version": "1"}, (), set()),
    "CreateTopics": (ApiKey.CREATE_TOPICS, 5, lambda _: {"topics": [
        {"name": _new_topic(), "num_partitions": 1, "replication_factor": 1}],
        "timeout_ms": 5000, "validate_only": True}, (),
        _checks(quiet(Op.CREATE, R.CLUSTER), quiet(Op.DESCRIBE_CONFIGS, R.TOPIC))),
    "CreateTopics without CREATE on the cluster": (
        ApiKey.CREATE_TOPICS, 5, lambda _: {"topics": [
            {"name": _new_topic(), "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 5000, "validate_only": True}, [(Op.CREATE, R.CLUSTER)],
        _checks(quiet(Op.CREATE, R.CLUSTER), (Op.CREATE, R.TOPIC),
                quiet(Op.DESCRIBE_CONFIGS, R.TOPIC))),
    "DeleteTopics": (ApiKey.DELETE_TOPICS, 5, {"topic_names": ["checked-absent"],
                                               "timeout_ms": 5000}, (),
                     _checks((Op.DELETE, R.TOPIC))),
    # By id: DESCRIBE too, or the name is not given back. DELETE is refused here so the
    # module's topic stays.
    "DeleteTopics by id": (ApiKey.DELETE_TOPICS, 6, lambda broker: {
        "topics": [{"name": None, "topic_id": broker.topic_id}], "timeout_ms": 5000},
        [(Op.DELETE, R.TOPIC)], _checks((Op.DESCRIBE, R.TOPIC), (Op.DELETE, R.TOPIC))),
    "DeleteRecords": (ApiKey.DELETE_RECORDS, 2, {"topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}],
        "timeout_ms": 5000}, (), _checks((Op.DELETE, R.TOPIC))),
    "InitProducerId": (ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1}, (), _checks(quiet(Op.IDEMPOTENT_WRITE, R.CLUSTER))),
    "InitProducerId without IDEMPOTENT_WRITE": (ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1}, [(Op.IDEMPOTENT_WRITE, R.CLUSTER)],
        _checks(quiet(Op.IDEMPOTENT_WRITE, R.CLUSTER), (Op.WRITE, R.TOPIC))),
    # Another id: a new epoch of TXN would abort its open transaction.
    "InitProducerId with a transactional id": (ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": "checked-init", "transaction_timeout_ms": 60000,
        "producer_id": -1, "producer_epoch": -1}, (),
        _checks((Op.WRITE, R.TRANSACTIONAL_ID))),
    "OffsetForLeaderEpoch": (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, (),
        _checks(quiet(Op.CLUSTER_ACTION, R.CLUSTER))),
    "OffsetForLeaderEpoch without CLUSTER_ACTION": (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        [(Op.CLUSTER_ACTION, R.CLUSTER)],
        _checks(quiet(Op.CLUSTER_ACTION, R.CLUSTER), (Op.DESCRIBE, R.TOPIC))),
    "DescribeConfigs of a topic": (ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]}, (),
        _checks((Op.DESCRIBE_CONFIGS, R.TOPIC))),
    "DescribeConfigs of the broker": (ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}, (),
        _checks((Op.DESCRIBE_CONFIGS, R.CLUSTER))),
    "AlterConfigs of a topic": (ApiKey.ALTER_CONFIGS, 2, _config(2, TOPIC), (),
                                _checks((Op.ALTER_CONFIGS, R.TOPIC))),
    "AlterConfigs of the broker": (ApiKey.ALTER_CONFIGS, 2, _config(4, ""), (),
                                   _checks((Op.ALTER_CONFIGS, R.CLUSTER))),
    "IncrementalAlterConfigs of a topic": (
        ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _config(2, TOPIC, incremental=True), (),
        _checks((Op.ALTER_CONFIGS, R.TOPIC))),
    "IncrementalAlterConfigs of a broker logger": (
        ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _config(8, "0", incremental=True), (),
        _checks((Op.ALTER_CONFIGS, R.CLUSTER))),
    "DescribeLogDirs": (ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}, (),
                        _checks((Op.DESCRIBE, R.CLUSTER))),
    "CreatePartitions": (ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": TOPIC, "count": 1, "assignments": None}], "timeout_ms": 5000,
        "validate_only": True}, (), _checks((Op.ALTER, R.TOPIC))),
    "DeleteGroups": (ApiKey.DELETE_GROUPS, 2, {"groups_names": ["checked-absent"]}, (),
                     _checks((Op.DELETE, R.GROUP))),
    "OffsetDelete": (ApiKey.OFFSET_DELETE, 0, {"group_id": "checked-absent", "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0}]}]}, (),
        _checks((Op.DELETE, R.GROUP), (Op.READ, R.TOPIC))),
    "DescribeCluster": (ApiKey.DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False}, (), set()),
    "DescribeProducers": (ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": TOPIC, "partition_indexes": [0]}]}, (), _checks((Op.READ, R.TOPIC))),
    "AddPartitionsToTxn from a producer": (ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": 0,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}, (),
        _checks((Op.WRITE, R.TRANSACTIONAL_ID), (Op.WRITE, R.TOPIC))),
    # An internal topic is never asked about: it is refused.
    "AddPartitionsToTxn of an internal topic": (ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": 0,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "__consumer_offsets", "partitions": [0]}]}, (),
        _checks((Op.WRITE, R.TRANSACTIONAL_ID))),
    "AddPartitionsToTxn from a broker": (ApiKey.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [
        {"transactional_id": TXN, "producer_id": 0, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": TOPIC, "partitions": [0]}]}]}, (),
        _checks((Op.CLUSTER_ACTION, R.CLUSTER))),
    "AddOffsetsToTxn": (ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": TXN, "producer_id": 0, "producer_epoch": 0, "group_id": GROUP},
        (), _checks((Op.WRITE, R.TRANSACTIONAL_ID), (Op.READ, R.GROUP))),
    # Another id: ending TXN's transaction would leave DescribeTransactions no topic.
    "EndTxn": (ApiKey.END_TXN, 3, {"transactional_id": "checked-end", "producer_id": 0,
                                   "producer_epoch": 0, "committed": False}, (),
               _checks((Op.WRITE, R.TRANSACTIONAL_ID))),
    "TxnOffsetCommit": (ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": TXN, "group_id": GROUP, "producer_id": 0, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]}, (),
        _checks((Op.WRITE, R.TRANSACTIONAL_ID), (Op.READ, R.GROUP), (Op.READ, R.TOPIC))),
    "WriteTxnMarkers": (ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": 0, "producer_epoch": 0, "transaction_result": False,
         "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
        (), _checks(quiet(Op.ALTER, R.CLUSTER))),
    "WriteTxnMarkers without ALTER on the cluster": (ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": 0, "producer_epoch": 0, "transaction_result": False,
         "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
        [(Op.ALTER, R.CLUSTER)], _checks(quiet(Op.ALTER, R.CLUSTER),
                                         (Op.CLUSTER_ACTION, R.CLUSTER))),
    "DescribeTransactions": (ApiKey.DESCRIBE_TRANSACTIONS, 0, {
        "transactional_ids": [TXN, "checked-absent"]}, (),
        _checks((Op.DESCRIBE, R.TRANSACTIONAL_ID), (Op.DESCRIBE, R.TOPIC))),
    "ListTransactions": (ApiKey.LIST_TRANSACTIONS, 1, {
        "state_filters": [], "producer_id_filters": [], "duration_filter": -1}, (),
        _checks((Op.DESCRIBE, R.TRANSACTIONAL_ID))),
    "SaslHandshake": (ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, (), set()),
    "SaslAuthenticate": (ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0u\0p"}, (), set()),
    "DescribeUserScramCredentials": (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                     {"users": None}, (), _checks((Op.DESCRIBE, R.CLUSTER))),
    "AlterUserScramCredentials": (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": "checked-user", "mechanism": 1}], "upsertions": []}, (),
        _checks((Op.ALTER, R.CLUSTER))),
    "DescribeAcls": (ApiKey.DESCRIBE_ACLS, 1, {"resource_type_filter": 1,
                                               "pattern_type_filter": 1, "operation": 1,
                                               "permission_type": 1}, (),
                     _checks((Op.DESCRIBE, R.CLUSTER))),
    "CreateAcls": (ApiKey.CREATE_ACLS, 3, {"creations": [
        {"resource_type": R.TOPIC, "resource_name": "checked-acl", "resource_pattern_type": 3,
         "principal": "User:checked-someone", "host": "*", "operation": Op.READ,
         "permission_type": 3}]}, (), _checks((Op.ALTER, R.CLUSTER))),
    "DeleteAcls": (ApiKey.DELETE_ACLS, 3, {"filters": [
        {"resource_type_filter": R.ANY, "resource_name_filter": None, "pattern_type_filter": 1,
         "principal_filter": "User:checked-nobody", "host_filter": None, "operation": 1,
         "permission_type": 1}]}, (), _checks((Op.ALTER, R.CLUSTER))),
    "DescribeClientQuotas": (ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {
        "components": [], "strict": False}, (), _checks((Op.DESCRIBE_CONFIGS, R.CLUSTER))),
    "AlterClientQuotas": (ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [
        {"entity": [{"entity_type": "client-id", "entity_name": "checked-client"}],
         "ops": [{"key": "producer_byte_rate", "value": 1e12, "remove": False}]}],
        "validate_only": False}, (), _checks((Op.ALTER_CONFIGS, R.CLUSTER))),
}
