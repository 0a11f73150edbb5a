"""A cluster broker's console under ACLs: what it asks the other brokers, it asks as the
logged-in user, and the user sees only what DESCRIBE and READ allow.

Three brokers with the ACL authorizer (ACLs in ZooKeeper, shared), a SASL_PLAINTEXT
listener (PLAIN: users alice, a super user, and bob) that the console checks logins on
and reads the other brokers through, and a PLAINTEXT listener between the brokers (its
principal, User:ANONYMOUS, is a super user here so the brokers replicate and the test
sets up). bob may READ the topic "open" and DESCRIBE the group "bobs"; "secret" and the
group "hidden" are not his. Each topic has one partition on each broker, so broker 1's
console reads two of three from other brokers."""

import json

import pytest

from cluster_processes import ClusterBroker, free_port, formed, until
from console_processes import ENV, get

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,  # noqa: E402
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
         'username="alice" password="alice-secret" user_alice="alice-secret" '
         'user_bob="bob-secret";')
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")


class AclBroker(ClusterBroker):
    def __init__(self, broker_id, root, zk_hosts):
        self.http_port = free_port()
        super().__init__(broker_id, root / f"broker-{broker_id}", zk_hosts, [
            "--metrics-listen", f"127.0.0.1:{self.http_port}", "--console"])
        self.sasl_port = free_port()
        self.config = root / f"broker-{broker_id}.properties"
        self.config.write_text("\n".join([
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "inter.broker.listener.name=PLAINTEXT", "sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={_JAAS}",
            "authorizer.class.name=kqlite.AclAuthorizer",
            "super.users=User:ANONYMOUS;User:alice", ""]))
        self.url = f"http://127.0.0.1:{self.http_port}"

    def serve_arguments(self):
        return ["--log-level", "info", "serve", "--data-dir", self.data_dir,
                "--config", str(self.config), "--broker-id", str(self.broker_id),
                "--zookeeper", self.zk_hosts]

    def environment(self):
        return ENV          # the C helpers, whichever pass runs this test


@pytest.fixture
def cluster(tmp_path, zk_hosts):
    brokers = {b: AclBroker(b, tmp_path, zk_hosts) for b in (1, 2, 3)}
    try:
        for b in brokers.values():
            b.start()
        for b in brokers.values():
            b.wait_listening()
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        until(lambda: formed(admin, 3), "every broker registered and a controller elected")
        yield brokers, bootstrap, admin
    except BaseException:
        print("\n".join(f"--- broker {b.broker_id} ---\n{b.log()}" for b in brokers.values()))
        raise
    finally:
        for b in brokers.values():
            b.kill()


def _api(broker, path, user):
    status, body = get(f"{broker.url}{path}", user)
    return status, (json.loads(body) if status == 200 else body)


def test_a_user_sees_across_the_cluster_only_what_the_acls_allow(cluster):
    brokers, bootstrap, admin = cluster
    for name in ("open", "secret"):
        admin.create_topics([NewTopic(name, 3, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for name in ("open", "secret"):
        for p in range(3):
            producer.produce(name, value=f"{name}-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    for group in ("bobs", "hidden"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(t, p, 0) for t in ("open", "secret")
                                 for p in range(3)], asynchronous=False)
        consumer.close()
    acls = [AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:bob",
                       "*", AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, "bobs", ResourcePatternType.LITERAL, "User:bob",
                       "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    for future in admin.create_acls(acls).values():
        future.result(30)
    leaders = {p: info.leader for p, info in
               admin.list_topics("open", timeout=10).topics["open"].partitions.items()}
    assert sorted(leaders.values()) == [1, 2, 3]
    console = brokers[1]

    # bob: the topic "open", its offsets from every leader, its records from another
    # broker; "secret" neither listed nor readable
    def bobs_topics():
        status, topics = _api(console, "/api/topics", BOB)
        return topics if status == 200 and [t["name"] for t in topics] == ["open"] else None
    until(bobs_topics, "bob's topic list: only the topic his ACL names")
    until(lambda: [r["high_watermark"] for r in _api(console, "/api/topics/open", BOB)[1][
        "partitions"]] == [1, 1, 1], "the offsets of every partition of open, for bob")
    assert _api(console, "/api/topics/secret", BOB)[0] == 403
    # sizes of partitions hosted elsewhere need DESCRIBE on the cluster (DescribeLogDirs):
    # bob's cells are the broker's refusal
    rows = _api(console, "/api/topics/open", BOB)[1]["partitions"]
    assert [r["size"] for r in rows if r["partition"] != [
        p for p, leader in leaders.items() if leader == 1][0]] == [
        "error: CLUSTER_AUTHORIZATION_FAILED"] * 2
    (elsewhere, *_) = [p for p, leader in leaders.items() if leader != 1]
    status, page = _api(console, f"/api/messages?topic=open&partition={elsewhere}", BOB)
    assert status == 200
    assert [r["value"]["text"] for r in page["records"]] == [f"open-{elsewhere}"]
    assert _api(console, f"/api/messages?topic=secret&partition={elsewhere}", BOB)[0] == 403

    # bob: the group his ACL names, with the offsets of the topic he may describe only
    until(lambda: [g["group"] for g in _api(console, "/api/groups", BOB)[1]] == ["bobs"],
          "bob's group list: only the group his ACL names")
    group = _api(console, "/api/groups/bobs", BOB)[1]
    assert [(o["topic"], o["partition"], o["lag"]) for o in group["offsets"]] == [
        ("open", 0, 1), ("open", 1, 1), ("open", 2, 1)]
    assert _api(console, "/api/groups/hidden", BOB)[0] == 403

    # alice, a super user, sees every topic and group, from any broker's console
    for broker in brokers.values():
        names = [t["name"] for t in _api(broker, "/api/topics", ALICE)[1]]
        assert "open" in names and "secret" in names
        rows = _api(broker, "/api/topics/secret", ALICE)[1]["partitions"]
        assert [r["high_watermark"] for r in rows] == [1, 1, 1]
        assert all(isinstance(r["size"], int) and r["size"] > 0 for r in rows)
        groups = [g["group"] for g in _api(broker, "/api/groups", ALICE)[1]]
        assert "bobs" in groups and "hidden" in groups
