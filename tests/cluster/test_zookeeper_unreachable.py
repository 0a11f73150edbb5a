"""Client requests that need ZooKeeper while it is unreachable get Kafka error codes, on a
connection that stays open: FindCoordinator (the offsets topic cannot be created:
COORDINATOR_NOT_AVAILABLE), DescribeConfigs (the topic's config is read from ZooKeeper),
CreateTopics and Metadata's auto-creation (written to ZooKeeper). Before, kazoo's
ConnectionLoss and SessionExpiredError escaped the handlers: the broker logged
``connection from ... failed`` with a traceback and dropped the connection, and a call
made while the connection was down waited in kazoo until ZooKeeper came back.

One real broker process with a ZooKeeper server of its own, which the test stops. With
``--soak``, the same broker then stops on SIGTERM and exits 0 (before, its shutdown waited
in kazoo for ever).
"""

import socket

import pytest

from cluster_processes import ClusterBroker, exchange, until as _until
from kqlite.cluster.zookeeper.process import ZooKeeperProcess, ZooKeeperUnavailable
from kqlite.protocol import ApiKey, ErrorCode



class _Connection:
    """One client connection; every request on it, in order."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def request(self, api_key, version, body):
        self.correlation += 1
        return exchange(self.sock, api_key, version, body, self.correlation)

    def close(self):
        self.sock.close()


def _metadata(conn, topic, auto_create=False):
    return conn.request(ApiKey.METADATA, 9, {
        "topics": [{"name": topic}], "allow_auto_topic_creation": auto_create,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})


@pytest.fixture
def broker_without_zookeeper(tmp_path):
    """A broker that created topic ``t`` and leads it, then lost its ZooKeeper."""
    zookeeper = ZooKeeperProcess(tmp_path / "zookeeper")
    try:
        zookeeper.start()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    broker = ClusterBroker(1, tmp_path / "broker-1", zookeeper.connect_string, extra=[
        "--offsets-topic-replication-factor", "1", "--offsets-topic-num-partitions", "1"])
    try:
        broker.start().wait_listening()
        conn = _Connection(broker.port)
        _until(lambda: _metadata(conn, "t")["controller_id"] == 1, "broker 1 the controller")
        created = conn.request(ApiKey.CREATE_TOPICS, 4, {
            "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
        assert created["topics"][0]["error_code"] == ErrorCode.NONE, created
        _until(lambda: _metadata(conn, "t")["topics"][0]["partitions"][0]["leader_id"] == 1,
               "t-0 led by broker 1")
        zookeeper.stop()
        yield broker, conn
        conn.close()
    except BaseException:
        print(broker.log())
        raise
    finally:
        broker.kill()
        zookeeper.stop()


def test_requests_needing_zookeeper_answer_error_codes_while_it_is_down(
        broker_without_zookeeper):
    broker, conn = broker_without_zookeeper
    found = conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    assert found["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, found
    found = conn.request(ApiKey.FIND_COORDINATOR, 4,
                         {"key_type": 0, "coordinator_keys": ["g", "h"]})
    assert [c["error_code"] for c in found["coordinators"]] == \
        [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2, found

    described = conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = described["results"]
    assert result["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR, result
    assert "ZooKeeper" in result["error_message"], result

    created = conn.request(ApiKey.CREATE_TOPICS, 4, {
        "topics": [{"name": "u", "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    assert created["topics"][0]["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR, created

    auto = _metadata(conn, "v", auto_create=True)
    assert auto["topics"][0]["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR, auto

    # An idempotent producer's id needs a block from /latest_producer_id_block: Kafka's
    # ZkProducerIdManager answers the failure's code.
    pid = conn.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                             "transaction_timeout_ms": 60000,
                                             "producer_id": -1, "producer_epoch": -1})
    assert (pid["error_code"], pid["producer_id"]) == (ErrorCode.UNKNOWN_SERVER_ERROR, -1), pid

    # Still the same connection, and the broker still serves what needs no ZooKeeper.
    assert conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "test",
                                          "client_software_version": "1"})["error_code"] == 0
    assert _metadata(conn, "t")["topics"][0]["partitions"][0]["leader_id"] == 1
    assert "connection from" not in broker.log(), broker.log()


@pytest.mark.soak
def test_sigterm_with_zookeeper_gone_stops_the_broker_cleanly(broker_without_zookeeper):
    """SIGTERM after ZooKeeper went away: the broker tries its controlled shutdown (three
    attempts, each waiting up to 30 s for its own controller, whose ZooKeeper writes
    cannot go through, as Kafka's waits ``controller.socket.timeout.ms``), then closes its
    session before the rest of its shutdown (kqlite/cluster/node.py ``stop``), so the calls
    kazoo holds until a reconnection fail instead of holding the process for ever. About
    95 s, so with ``--soak``."""
    broker, _conn = broker_without_zookeeper
    _until(lambda: "connection lost" in broker.log().lower(),
           "broker 1 saw its ZooKeeper connection lost")
    code = broker.stop(timeout=240)
    assert code == 0, broker.log()[-5000:]
    assert "closing its session before stopping" in broker.log()
    assert "stopped cleanly" in broker.log()
