"""Reads through a `kqlite serve --zookeeper` cluster (three real broker processes over
a real ZooKeeper, tests/cluster's harness): each read goes to the partition's leader,
and when the leader is killed the same reader asks Metadata again and reads the same
rows from the new leader."""

import os
import sys

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("kazoo.client")
confluent = pytest.importorskip("confluent_kafka")

_CLUSTER_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster")
sys.path.insert(0, _CLUSTER_TESTS)
from cluster_processes import running_cluster, until as _until  # noqa: E402

from kqlite.spark.broker import BrokerCatalog  # noqa: E402

WAIT = 90   # liveness guard only


def _rows(part, end):
    batches = list(part.read_arrow(0, end, True, 0, 7))
    return pa.Table.from_batches(batches).to_pylist()


def test_reads_follow_the_leader_across_a_kill(tmp_path, zk_hosts):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    with running_cluster(tmp_path, zk_hosts) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("clicks", 1, 3)])["clicks"].result(WAIT)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(60):
            producer.produce("clicks", key=None if i % 4 == 0 else b"k%d" % i,
                             value=None if i % 9 == 0 else b"v%d" % i,
                             headers=[("n", b"%d" % i)] if i % 2 else None, partition=0)
        assert producer.flush(WAIT) == 0

        catalog = BrokerCatalog(cluster.bootstrap)
        try:
            end = _until(lambda: catalog.latest_offsets([("clicks", 0)])[("clicks", 0)] == 60
                         and 60, "the high watermark at 60")
            part = catalog.log("clicks", 0)
            before = _rows(part, end)
            assert [r["offset"] for r in before] == list(range(60))
            assert [r["value"] for r in before[:3]] == [None, b"v1", b"v2"]
            leader = catalog.client.leader("clicks", 0)[0]
            cluster[leader].kill()
            # The same reader: its connection to the old leader breaks, it asks
            # Metadata of a live broker and fetches from the new leader.
            assert _rows(part, end) == before
            assert catalog.client.leader("clicks", 0)[0] != leader
        finally:
            catalog.close()
