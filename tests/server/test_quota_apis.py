"""Client quotas on a broker (in a thread): DescribeClientQuotas and AlterClientQuotas (v0
and v1, Kafka's refusals, validate_only, ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster,
the quotas kept in the data dir across a restart and another process's write applied
within seconds), and throttling: a producer over its byte rate gets ``throttle_time_ms``
and its connection is not read from until that time has passed, a consumer over its byte
rate gets an empty answer (the records still there for the next fetch), a client over its
request percentage is throttled at most one window, a client without a quota never is,
and the metrics count throttled time per user and client id."""

import time

import pytest

from broker_thread import BrokerThread
from principals import Principals

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, AclPermissionType as Perm, \
    PatternType as P, ResourcePattern, ResourceType as R
from kqlite.server.authorization import AclAuthorizer, parse_super_users
from kqlite.server.authorization.bindings import AclBinding, AclEntry
from kqlite.server.quotas.entities import QuotaEntity
from kqlite.server.quotas.store import quota_file

ADMIN, ALICE = "User:admin", "User:alice"


def alter(client, entries, version=1, validate_only=False):
    answer = client.call(ApiKey.ALTER_CLIENT_QUOTAS, version, {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                     "ops": [{"key": k, "value": float(v if v is not None else 0),
                              "remove": v is None} for k, v in ops.items()]}
                    for entity, ops in entries], "validate_only": validate_only})
    return [(e["error_code"], e["error_message"]) for e in answer["entries"]]


def described(client, components=(), strict=False, version=1):
    answer = client.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict})
    if answer["error_code"]:
        return answer["error_code"], answer["error_message"]
    return {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]):
            {v["key"]: v["value"] for v in entry["values"]} for entry in answer["entries"]}


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


@pytest.mark.parametrize("version", [0, 1])
def test_altered_quotas_are_described(served, version):
    _broker, _principals, admin = served
    assert alter(admin, [([("user", "alice")], {"producer_byte_rate": 1024}),
                         ([("user", None), ("client-id", "app")],
                          {"request_percentage": 50.5, "consumer_byte_rate": 2048}),
                         ([("client-id", None)], {"producer_byte_rate": 10})], version) == \
        [(ErrorCode.NONE, None)] * 3
    assert described(admin, version=version) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", None), ("client-id", "app")): {"consumer_byte_rate": 2048.0,
                                                 "request_percentage": 50.5},
        (("client-id", None),): {"producer_byte_rate": 10.0}}
    assert described(admin, [("user", 1, None)], True, version) == {}
    assert alter(admin, [([("user", "alice")], {"producer_byte_rate": None})], version) == \
        [(ErrorCode.NONE, None)]
    assert (("user", "alice"),) not in described(admin, version=version)


def test_malformed_entries_are_refused_alone_and_validate_only_stores_nothing(served):
    _broker, _principals, admin = served
    assert alter(admin, [([("user", "alice")], {"producer_byte_rate": 1.5}),
                         ([("user", "bob")], {"producer_byte_rate": 100}),
                         ([("topic", "t")], {"producer_byte_rate": 1})]) == [
        (ErrorCode.INVALID_REQUEST, "Configuration producer_byte_rate must be a LONG value"),
        (ErrorCode.NONE, None),
        (ErrorCode.INVALID_REQUEST, "Unhandled client quota entity type: topic")]
    assert alter(admin, [([("user", "carol")], {"producer_byte_rate": 5})],
                 validate_only=True) == [(ErrorCode.NONE, None)]
    assert described(admin) == {(("user", "bob"),): {"producer_byte_rate": 100.0}}
    assert described(admin, [("group", 2, None)]) == \
        (ErrorCode.UNSUPPORTED_VERSION, "Custom entity type 'group' not supported")


def test_quota_apis_need_the_clusters_configs(served):
    broker, principals, admin = served
    alice = principals.client(broker, ALICE)
    assert alter(alice, [([("user", "alice")], {"producer_byte_rate": 1})]) == \
        [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
    assert described(alice) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                "Cluster authorization failed.")
    assert described(admin) == {}
    cluster = ResourcePattern(R.CLUSTER, "kafka-cluster", P.LITERAL)
    broker.run(broker.broker.authorizer.create_acls(
        [AclBinding(cluster, AclEntry(ALICE, "*", Op.ALTER_CONFIGS, Perm.ALLOW))]))
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert alter(alice, [([("user", "alice")], {"producer_byte_rate": 1})]) == \
        [(ErrorCode.NONE, None)]
    assert described(alice) == {(("user", "alice"),): {"producer_byte_rate": 1.0}}
    alice.close()


def test_quotas_outlive_a_restart_and_follow_the_file(tmp_path):
    data = tmp_path / "data"
    with BrokerThread(data) as broker:
        from broker_process import RawClient
        c = RawClient(broker)
        assert alter(c, [([("client-id", "kept")], {"producer_byte_rate": 77})]) == \
            [(ErrorCode.NONE, None)]
        c.close()
    with BrokerThread(data) as broker:
        from broker_process import RawClient
        c = RawClient(broker)
        assert described(c) == {(("client-id", "kept"),): {"producer_byte_rate": 77.0}}
        quota_file(str(data)).update(
            lambda configs: {**configs, QuotaEntity("outside", None): {"request_percentage": 9.0}})
        deadline = time.monotonic() + 10
        while (("user", "outside"),) not in described(c):
            assert time.monotonic() < deadline, "the broker never read the file again"
            time.sleep(0.1)
        c.close()


# -- Throttling -----------------------------------------------------------------------------

class Client:
    """A raw client with its own client id."""

    def __init__(self, broker, principals, client_id, who="User:anyone"):
        self.raw = principals.client(broker, who)
        self.client_id = client_id

    def call(self, api_key, version, body):
        from kqlite.protocol.connection import decode_response, encode_request
        self.raw.correlation += 1
        self.raw.sock.sendall(encode_request(api_key, version, self.raw.correlation,
                                             self.client_id, body))
        return decode_response(api_key, version, self.raw.frame())[1]

    def produce(self, topic, size):
        started = time.monotonic()
        answer = self.call(ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_batch(
                [b"x" * size])}]}]})
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE
        return answer["throttle_time_ms"], time.monotonic() - started


@pytest.fixture
def open_broker(tmp_path):
    principals = Principals()
    with principals.installed():
        broker = BrokerThread(tmp_path / "data")
        broker.broker.db.create_topic("q", 1)
        admin = principals.client(broker, ADMIN)
        yield broker, principals, admin
        admin.close()
        broker.stop()


def test_a_producer_over_its_byte_rate_is_throttled_and_muted(open_broker):
    broker, principals, admin = open_broker
    assert alter(admin, [([("client-id", "slow")], {"producer_byte_rate": 10_000})]) == \
        [(ErrorCode.NONE, None)]
    slow = Client(broker, principals, "slow")
    free = Client(broker, principals, "free")
    # The first 10 windows' worth goes through (a new rate is measured over 10 s).
    assert slow.produce("q", 60_000) == (0, pytest.approx(0, abs=5))
    throttle, _elapsed = slow.produce("q", 60_000)
    assert throttle > 1000            # (12 000 - 10 000) / 10 000 * 10 s, less a little
    # The next request is not even read before the throttle time is over.
    _again, elapsed = slow.produce("q", 10)
    assert elapsed >= throttle / 1000.0 * 0.9
    for _ in range(3):
        assert free.produce("q", 60_000)[0] == 0
    families = {name: samples for name, _kind, _help, samples in broker.broker.quotas.metrics()}
    (labels, total), = families["kqlite_quota_throttle_time_ms_total"]
    assert labels == {"quota": "produce", "user": "", "client_id": "slow"} and total >= throttle


def test_a_consumer_over_its_byte_rate_gets_an_empty_answer_and_the_records_later(open_broker):
    broker, principals, admin = open_broker
    producer = Client(broker, principals, "producer")
    for _ in range(3):
        producer.produce("q", 4000)
    assert alter(admin, [([("user", "reader")], {"consumer_byte_rate": 500})]) == \
        [(ErrorCode.NONE, None)]
    connection = [Client(broker, principals, "c", who="User:reader")]

    def fetch():
        answer = connection[0].call(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": "q", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        parts = [p for t in answer["responses"] for p in t["partitions"]]
        return answer["throttle_time_ms"], sum(len(bytes(p["records"])) for p in parts)
    # 500 B/s over 10 windows: one fetch may read 5000 bytes (one batch) and is served.
    throttle, got = fetch()
    assert (throttle, got > 0) == (0, True)
    assert got <= 5000
    throttle, got = fetch()
    assert throttle > 0 and got == 0
    assert alter(admin, [([("user", "reader")], {"consumer_byte_rate": None})]) == \
        [(ErrorCode.NONE, None)]
    # On another connection: the throttled one is not read from for a while.
    connection[0] = Client(broker, principals, "c", who="User:reader")
    throttle, got = fetch()
    assert throttle == 0 and got > 0


def test_a_client_over_its_request_percentage_is_throttled_at_most_one_window(open_broker):
    broker, principals, admin = open_broker
    assert alter(admin, [([("client-id", "busy")], {"request_percentage": 0.0001})]) == \
        [(ErrorCode.NONE, None)]
    busy = Client(broker, principals, "busy")
    answer = busy.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    assert 0 < answer["throttle_time_ms"] <= 1000
    families = {name: samples for name, _kind, _help, samples in broker.broker.quotas.metrics()}
    assert ({"quota": "request", "user": "", "client_id": "busy"} in
            [labels for labels, _v in families["kqlite_quota_throttled_responses_total"]])
