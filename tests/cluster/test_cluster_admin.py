"""Three real ``kqlite serve --zookeeper`` brokers: the controller's remaining duties seen
from clients. One topic id per topic (ZooKeeper's, in every broker's Metadata and
partition.metadata), topic config changes made through one broker reaching every broker
(DescribeConfigs, the data dirs, min.insync.replicas for acks=all), and ElectLeaders
(confluent-kafka's AdminClient, a raw request to a broker that is not the controller,
and ``kqlite cluster elect-leaders``) restoring preferred leaders after a leader bounce.
One cluster for the whole module; the automatic rebalance is off so that only the API
moves leaders back."""

import argparse
import json
import os
import uuid

import pytest

from kqlite.cli import cluster_elect
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.protocol import ErrorCode

from cluster_processes import request as _request, running_cluster, until

confluent = pytest.importorskip("confluent_kafka")
kafka_python = pytest.importorskip("kafka")
from confluent_kafka import ElectionType, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewTopic)
from kazoo.client import KazooClient  # noqa: E402

WAIT = 90   # seconds: liveness guards only, never a pass/fail timing
TOPIC = "orders"
ZERO_UUID = uuid.UUID(int=0)


def _metadata(broker):
    return _request(broker, 3, 12, {"topics": [{"topic_id": ZERO_UUID, "name": TOPIC}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})


def _partitions(broker):
    """{partition: (leader, replicas, isr)} in ``broker``'s Metadata."""
    (t,) = _metadata(broker)["topics"]
    return {p["partition_index"]: (p["leader_id"], p["replica_nodes"], p["isr_nodes"])
            for p in t["partitions"]}


def _settled(broker):
    """Whether ``broker`` shows all three partitions with a leader and a full ISR."""
    partitions = _partitions(broker)
    return len(partitions) == 3 and all(leader >= 0 and len(isr) == 3
                                        for leader, _, isr in partitions.values())


def _described(broker, name, topic=TOPIC, *, unknown_ok=False):
    """The broker's DescribeConfigs value of ``name``; with ``unknown_ok``, None while its
    metadata does not know the topic yet (its UpdateMetadata may follow the replica's
    LeaderAndIsr, which wrote the data dir's config)."""
    body = _request(broker, 32, 4, {"resources": [
        {"resource_type": 2, "resource_name": topic, "configuration_keys": [name]}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = body["results"]
    if unknown_ok and result["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return None
    assert result["error_code"] == 0, result
    return {c["name"]: c["value"] for c in result["configs"]}.get(name)


def _local_config(broker, topic=TOPIC):
    path = os.path.join(broker.data_dir, ".kqlite", "topics", f"{topic}.json")
    with open(path) as f:
        return json.load(f)["config"]


def _produce(bootstrap):
    """One acks=all record with kafka-python, no retries: the broker's answer."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0,
                             request_timeout_ms=30000)
    try:
        producer.send(TOPIC, b"v", partition=0).get(timeout=60)
        return None
    except KafkaError as exc:
        return type(exc).__name__
    finally:
        producer.close()


@pytest.fixture
def cluster(tmp_path, zk_hosts):
    with running_cluster(tmp_path, zk_hosts, ["--auto-leader-rebalance-enable", "false"]) as c:
        yield c


def test_topic_ids_configs_and_elect_leaders(cluster, zk_hosts, capsys):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 3)], request_timeout=60)[TOPIC].result(WAIT)
    for b in (1, 2, 3):
        until(lambda b=b: _settled(cluster[b]), f"broker {b} knows every leader and a full ISR")

    # -- One topic id: ZooKeeper's, everywhere ------------------------------------------
    zk = KazooClient(hosts=zk_hosts)
    zk.start(15)
    try:
        zk_id = json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["topic_id"]
    finally:
        zk.stop()
        zk.close()
    for b in (1, 2, 3):
        (t,) = _metadata(cluster[b])["topics"]
        assert zn.uuid_to_text(t["topic_id"]) == zk_id
        for p in range(3):
            with open(os.path.join(cluster[b].data_dir, f"{TOPIC}-{p}",
                                   "partition.metadata")) as f:
                assert f.read() == f"version: 0\ntopic_id: {zk_id}\n"

    # -- Config changes through one broker reach all ------------------------------------
    incremental = ConfigResource("topic", TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([incremental])[incremental].result(WAIT)
    for b in (1, 2, 3):
        assert _described(cluster[b], "retention.ms") == "3600000"
        until(lambda b=b: _local_config(cluster[b]) == {"retention.ms": 3600000,
                                                         "min.insync.replicas": 3},
              f"broker {b}'s data dir has the new configs")

    # -- A leader bounce: the ISR shrinks, acks=all follows min.insync.replicas ------------
    preferred = {p: replicas[0] for p, (_, replicas, _) in _partitions(cluster[1]).items()}
    bounced = preferred[0]
    cluster[bounced].stop()        # controlled shutdown moves its leaderships away
    alive = next(b for b in (1, 2, 3) if b != bounced)
    until(lambda: (lambda p: p[0] not in (-1, bounced) and len(p[2]) == 2)(
        _partitions(cluster[alive])[0]), "partition 0 led elsewhere by an ISR of two")
    bootstrap = cluster.bootstrap
    assert _produce(bootstrap) == "NotEnoughReplicasError"
    # Legacy AlterConfigs replaces the overrides: retention.ms goes back to the default.
    legacy = ConfigResource("topic", TOPIC, set_config={"min.insync.replicas": "2"})
    admin.alter_configs([legacy])[legacy].result(WAIT)
    for b in (1, 2, 3):
        if b != bounced:
            until(lambda b=b: _local_config(cluster[b]) == {"min.insync.replicas": 2},
                  f"broker {b}'s data dir follows the legacy AlterConfigs")
            assert _described(cluster[b], "min.insync.replicas") == "2"
    assert _produce(bootstrap) is None
    bad = ConfigResource("topic", TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(WAIT)
    assert refused.value.args[0].code() == ErrorCode.INVALID_CONFIG
    unknown = ConfigResource("topic", "nope", set_config={"retention.ms": "1"})
    with pytest.raises(KafkaException) as refused:
        admin.alter_configs([unknown])[unknown].result(WAIT)
    assert refused.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # The bounced broker catches up with the change it missed.
    cluster[bounced].start().wait_listening()
    until(lambda: _settled(cluster[alive]), "the bounced broker back in every ISR")
    until(lambda: _local_config(cluster[bounced]) == {"min.insync.replicas": 2},
          "the bounced broker's data dir has the config it missed")
    assert _partitions(cluster[alive])[0][0] != bounced
    # The mark of an offset-preserving mirror topic is a topic config like any other: in
    # ZooKeeper, and from there in every replica's data dir.
    mirrored = NewTopic("mirrored", 1, 3, config={"kqlite.mirror.source": "A"})
    admin.create_topics([mirrored])["mirrored"].result(WAIT)
    for b in (1, 2, 3):
        until(lambda b=b: _local_config(cluster[b], "mirrored") == {"kqlite.mirror.source": "A"},
              f"broker {b}'s replica of the mirror topic marked")
        until(lambda b=b: _described(cluster[b], "kqlite.mirror.source", "mirrored",
                                     unknown_ok=True) == "A",
              f"broker {b} describing the mirror topic's mark")

    # -- ElectLeaders puts the preferred leaders back -----------------------------------
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    controller = until(lambda: (lambda c: c if c >= 0 else None)(
        admin.list_topics(timeout=10).controller_id), "a controller")
    other = next(b for b in (1, 2, 3) if b != controller)
    answer = _request(cluster[other], 43, 2, {"election_type": 0, "timeout_ms": 10000,
                                              "topic_partitions": [{"topic": TOPIC,
                                                                    "partitions": [0]}]})
    assert answer["error_code"] == 0
    assert answer["replica_election_results"] == [{"topic": TOPIC, "partition_result": [
        {"partition_id": 0, "error_code": ErrorCode.NOT_CONTROLLER, "error_message": None}]}]
    result = admin.elect_leaders(ElectionType.PREFERRED,
                                 [TopicPartition(TOPIC, p) for p in range(3)]).result(WAIT)
    assert result[TopicPartition(TOPIC, 0)] is None
    for b in (1, 2, 3):
        until(lambda b=b: {p: leader for p, (leader, _, _) in _partitions(cluster[b]).items()}
              == preferred, f"broker {b} shows the preferred leaders")
    # Nothing left to do: the CLI says so and succeeds; an unknown partition fails it.
    args = argparse.Namespace(bootstrap_server=cluster[other].address, topic=TOPIC,
                              partition=None, election_type="preferred", timeout=30.0,
                              json=False)
    assert cluster_elect.run(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"{TOPIC}-{p}: already led by its preferred replica"
                                for p in range(3)]
    args.partition = 7
    assert cluster_elect.run(args) == 1
    assert "no partition 7" in capsys.readouterr().err
    args.partition, args.topic, args.election_type, args.json = None, None, "unclean", True
    assert cluster_elect.run(args) == 0
    assert json.loads(capsys.readouterr().out) == []
