"""Which ACL each API asks for, against a real broker (in a thread) whose authorizer
records every question: the per-API table (authorization_table.py, Kafka 3.9's KafkaApis
as kafka-security.md section 4.4 tabulates it), fallbacks included (asked when the first
check is refused), and whether a refusal would be audited.

Every API kqlite advertises has a row; the SASL APIs (on an authenticated or non-SASL
connection, where they are refused) ask nothing; the ACL APIs ask for the cluster before
answering SECURITY_DISABLED to an authorizer that keeps no ACLs, as Kafka's AclApis.
"""

import pytest

from authorization_table import CASES, GROUP, TOPIC, TXN
from authorizers import BY_TYPE, CHECK, PROBE, RecordingAuthorizer
from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.protocol import SUPPORTED, ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, ResourceType as R
from kqlite.server.authorization import SUPPORTED_OPERATIONS

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    authorizer = RecordingAuthorizer()
    broker = BrokerThread(tmp_path_factory.mktemp("checks") / "data", authorizer=authorizer)
    broker.broker.db.create_topic(TOPIC, 1)
    client = RawClient(broker)
    meta = client.call(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}]})
    broker.topic_id = meta["topics"][0]["topic_id"]
    committed = client.call(ApiKey.OFFSET_COMMIT, 8, CASES["OffsetCommit"][2])
    assert committed["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    # A transaction open on the topic: DescribeTransactions lists it, ListTransactions
    # finds its id.
    init = client.call(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": TXN, "transaction_timeout_ms": 600000, "producer_id": -1,
        "producer_epoch": -1})
    assert (init["error_code"], init["producer_id"], init["producer_epoch"]) == (0, 0, 0)
    added = client.call(*CASES["AddPartitionsToTxn from a producer"][:3])
    assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"] == ErrorCode.NONE
    yield broker, authorizer, client
    client.close()
    broker.stop()


@pytest.mark.parametrize("case", CASES)
def test_each_api_asks_for_what_kafka_asks(served, case):
    broker, authorizer, client = served
    api_key, version, body, refused, expected = CASES[case]
    authorizer.refuse(*refused)
    client.call(api_key, version, body(broker) if callable(body) else body)
    questions = authorizer.asked_so_far()
    assert {q.api_key for q in questions} <= {api_key}
    asked = {(q.operation, q.resource_type, q.log_if_denied)
             for q in questions if q.kind in (CHECK, BY_TYPE)}
    assert asked == expected


def test_the_table_covers_every_api_kqlite_advertises():
    assert set(SUPPORTED) <= {api_key for api_key, *_ in CASES.values()}


def test_an_idempotent_producer_without_idempotent_write_asks_for_write_on_any_topic(served):
    broker, authorizer, client = served
    authorizer.refuse((Op.IDEMPOTENT_WRITE, R.CLUSTER))
    client.call(*CASES["InitProducerId without IDEMPOTENT_WRITE"][:3])
    assert [(q.kind, q.operation, q.resource_type, q.name)
            for q in authorizer.asked_so_far()][-1] == (BY_TYPE, Op.WRITE, R.TOPIC, None)


@pytest.mark.parametrize("api_key, version, body, probed", [
    (ApiKey.METADATA, 10, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                           "include_cluster_authorized_operations": True,
                           "include_topic_authorized_operations": True},
     {R.TOPIC, R.CLUSTER}),
    (ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": True},
     {R.GROUP}),
    (ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True},
     {R.CLUSTER}),
])
def test_authorized_operations_probe_every_supported_operation_unaudited(
        served, api_key, version, body, probed):
    broker, authorizer, client = served
    authorizer.forget()
    client.call(api_key, version, body)
    probes = [q for q in authorizer.asked_so_far() if q.kind == PROBE]
    assert {(q.operation, q.resource_type) for q in probes} == {
        (op, t) for t in probed for op in SUPPORTED_OPERATIONS[t]}
    assert not any(q.log_if_denied for q in probes)
    # The cluster's operations are probed only once DESCRIBE on it is allowed.
    if R.CLUSTER in probed:
        assert (Op.DESCRIBE, R.CLUSTER) in authorizer.asked()
