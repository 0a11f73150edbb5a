"""Three brokers that talk to each other over SASL_SSL (secured_cluster.py), with
confluent-kafka clients on both their listeners:

- a topic with replication factor 3 fully replicated over the secured inter-broker
  listener, records produced with acks=all and read by a consumer group;
- each broker's registration znode exactly as Kafka writes it (every endpoint, the protocol
  map, the PLAINTEXT endpoint as the top-level host and port);
- Metadata, DescribeCluster and FindCoordinator answering each client with the endpoints of
  the listener it connected on;
- SCRAM users added through ZooKeeper (``kqlite users --zookeeper``) or through
  AlterUserScramCredentials on the controller log in on another broker within seconds;
  another broker answers NOT_CONTROLLER;
- a fourth broker started with a wrong inter-broker password does not join: its
  connections to the others are refused, both sides' logs say why, it is dropped from the
  ISR it was given, and the others keep serving; a partition it leads is answered
  LISTENER_NOT_FOUND on a listener it lacks.
"""

import collections
import json
import subprocess
import sys
import time

import pytest

confluent = pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo,  # noqa: E402
                                   ScramMechanism, UserScramCredentialUpsertion)
from cluster_processes import formed, request, until  # noqa: E402
from secured_cluster import PASSWORDS, SecuredCluster, add_users  # noqa: E402

from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402

LAG_MS = 3000     # replica.lag.time.max.ms: a follower that cannot fetch leaves the ISR soon
_At = collections.namedtuple("_At", "port")     # what cluster_processes.request needs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    from kazoo.client import KazooClient
    root = tmp_path_factory.mktemp("secured")
    chroot = f"/kqlite-secured-{time.monotonic_ns()}"
    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start(timeout=15)
    zk.ensure_path(chroot)
    zk.stop()
    zk = KazooClient(hosts=zookeeper.connect_string + chroot)
    zk.start(timeout=15)
    add_users(zk, PASSWORDS)
    c = SecuredCluster(root, zookeeper.connect_string + chroot,
                       extra=["--replica-lag-time-max-ms", str(LAG_MS),
                              "--offsets-topic-num-partitions", "3"])
    c.zk = zk
    try:
        c.start()
        admin = AdminClient(c.client())
        until(lambda: formed(admin, 3), "three brokers registered and a controller elected")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.kill()
        zk.stop()
        zk.close()


def _addresses(metadata):
    return sorted((b.host, b.port) for b in metadata.brokers.values())


def test_a_sasl_ssl_cluster_replicates_and_serves_a_group(cluster):
    admin = AdminClient(cluster.client())
    admin.create_topics([NewTopic("secured", 3, 3)])["secured"].result(60)
    producer = Producer(cluster.client(acks="all", **{"enable.idempotence": True}))
    for i in range(200):
        producer.produce("secured", str(i).encode(), key=str(i % 7).encode())
    assert producer.flush(60) == 0

    def replicated():
        topic = admin.list_topics("secured", timeout=10).topics["secured"]
        return all(len(p.isrs) == 3 for p in topic.partitions.values())
    until(replicated, "every partition's ISR holds the three brokers")
    consumer = Consumer(cluster.client(**{"group.id": "readers",
                                          "auto.offset.reset": "earliest"}))
    consumer.subscribe(["secured"])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < 200 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert seen == {str(i).encode() for i in range(200)}


def test_each_registration_is_kafkas_json(cluster):
    for broker_id, b in cluster.brokers.items():
        data, _ = cluster.zk.get(f"/brokers/ids/{broker_id}")
        doc = json.loads(data)
        assert doc.pop("timestamp").isdigit()
        assert doc == {
            "version": 5, "host": "localhost", "port": b.plain_port, "jmx_port": -1,
            "endpoints": [f"SASL_SSL://127.0.0.1:{b.secure_port}",
                          f"PLAINTEXT://localhost:{b.plain_port}"],
            "listener_security_protocol_map": {"SASL_SSL": "SASL_SSL",
                                               "PLAINTEXT": "PLAINTEXT"},
            "features": {}}


def test_every_answer_names_the_listener_the_client_came_on(cluster):
    """advertised.listeners: PLAINTEXT clients are told localhost, SASL_SSL ones 127.0.0.1,
    each at its own listener's port."""
    brokers = cluster.brokers.values()
    secure = sorted(("127.0.0.1", b.secure_port) for b in brokers)
    plain = sorted(("localhost", b.plain_port) for b in brokers)
    for config, addresses in ((cluster[2].plaintext_client(), plain),
                              (cluster[2].client(), secure)):
        ports = [port for _, port in addresses]
        admin = AdminClient(config)
        assert _addresses(admin.list_topics(timeout=10)) == addresses
        described = admin.describe_cluster(request_timeout=10).result(30)
        assert sorted((n.host, n.port) for n in described.nodes) == addresses
        consumer = Consumer({**config, "group.id": f"on-{ports[0]}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["secured"])
        until(lambda: consumer.poll(0.5) is not None or consumer.assignment(),
              "the group formed through its coordinator")
        group = admin.describe_consumer_groups([f"on-{ports[0]}"])[f"on-{ports[0]}"]
        coordinator = group.result(30).coordinator
        assert (coordinator.host, coordinator.port) in addresses
        consumer.close()


def _logs_in(broker, user, password):
    admin = AdminClient(broker.client(user, password, **{"socket.timeout.ms": 3000}))
    try:
        admin.list_topics(timeout=3)
    except confluent.KafkaException:
        return False
    return True


def test_users_added_anywhere_log_in_on_every_broker(cluster):
    """``kqlite users --zookeeper`` writes the znode and its notification; the controller
    serves AlterUserScramCredentials (another broker answers NOT_CONTROLLER); either way
    a login on another broker succeeds within seconds."""
    added = subprocess.run([sys.executable, "-m", "kqlite.cli", "users", "--zookeeper",
                            cluster.zk_hosts, "add", "carol", "--password", "carol-secret",
                            "--mechanism", "SCRAM-SHA-512"], capture_output=True, text=True,
                           timeout=60)
    assert added.returncode == 0, added.stderr
    start = time.monotonic()
    until(lambda: _logs_in(cluster[3], "carol", "carol-secret"), "carol logs in on broker 3",
          timeout=30)
    assert time.monotonic() - start < 15

    admin = AdminClient(cluster.client())
    controller = admin.list_topics(timeout=10).controller_id
    other = next(b for b in cluster.brokers.values() if b.broker_id != controller)
    upsert = UserScramCredentialUpsertion("dave", ScramCredentialInfo(
        ScramMechanism.SCRAM_SHA_512, 8192), b"dave-secret")
    on_controller = AdminClient(cluster[controller].client())
    on_controller.alter_user_scram_credentials([upsert])["dave"].result(30)
    until(lambda: _logs_in(other, "dave", "dave-secret"), "dave logs in on another broker",
          timeout=30)
    assert not _logs_in(other, "dave", "wrong")

    body = {"deletions": [], "upsertions": [{"name": "eve", "mechanism": 2,
                                             "iterations": 4096, "salt": b"s",
                                             "salted_password": b"p" * 64}]}
    answer = request(_At(other.plain_port), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, body)
    assert answer["results"] == [{"user": "eve", "error_code": ErrorCode.NOT_CONTROLLER,
                                  "error_message": "This is not the correct controller for "
                                                   "this cluster."}]
    described = request(_At(other.plain_port), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                        {"users": None})
    assert [r["user"] for r in described["results"]] == ["admin", "broker", "carol", "dave"]


def test_a_broker_with_a_wrong_inter_broker_password_does_not_join(cluster):
    bad = cluster.add(4, password="wrong", plaintext=False)
    bad.start().wait_listening()
    admin = AdminClient(cluster.client())
    until(lambda: formed(admin, 4), "broker 4 registered")
    # A partition broker 1 leads with broker 4 as its follower, one broker 4 leads alone.
    futures = admin.create_topics([NewTopic("joined", 1, -1, replica_assignment=[[1, 4]]),
                                   NewTopic("alone", 1, -1, replica_assignment=[[4]])])
    for future in futures.values():
        future.result(60)

    def dropped():
        # A broker that has not heard of the topic yet answers it without partitions.
        p = admin.list_topics("joined", timeout=10).topics["joined"].partitions.get(0)
        return p is not None and p.leader == 1 and p.isrs == [1]
    until(dropped, "broker 4 leaves the ISR it cannot follow", timeout=60)
    until(lambda: "cannot authenticate to broker 1" in bad.log(),
          "broker 4 says why it cannot fetch")
    refused = "on listener SASL_SSL: SCRAM-SHA-512 authentication failed"
    until(lambda: refused in cluster[1].log(), "broker 1 says why it refused broker 4")
    # The others go on: acks=all on the partition broker 4 no longer holds back.
    producer = Producer(cluster.client(acks="all"))
    producer.produce("joined", b"after")
    producer.produce("secured", b"after")
    assert producer.flush(30) == 0
    # Broker 4 has no PLAINTEXT listener: PLAINTEXT clients are not told of it, and the
    # partition it leads has no leader for them (LISTENER_NOT_FOUND, Metadata v6+).
    plain = AdminClient(cluster[1].plaintext_client()).list_topics(timeout=10)
    assert 4 not in plain.brokers
    alone = plain.topics["alone"].partitions[0]
    assert alone.leader == -1 and alone.error.code() == ErrorCode.LISTENER_NOT_FOUND
    assert AdminClient(cluster.client()).list_topics(timeout=10).topics["alone"] \
        .partitions[0].leader == 4
    bad.kill()
    for b in cluster.brokers.values():
        assert "Traceback" not in b.log(), b.log()
