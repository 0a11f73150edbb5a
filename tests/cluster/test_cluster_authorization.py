"""Inter-broker requests need CLUSTER_ACTION: in a 3-broker cluster, the controller's
LeaderAndIsr, UpdateMetadata and StopReplica, a leader's AlterPartition, a stopping
broker's ControlledShutdown and a follower's Fetch each ask the receiving broker's
authorizer for CLUSTER_ACTION on the cluster, and for nothing else (Kafka's
``authorizeClusterOperation``).

Broker 1 runs in this process (a ClusterNode on an event loop in a thread) with an
authorizer that records every question; brokers 2 and 3 are ``kqlite serve --zookeeper``
processes. Broker 1 starts first and so is the controller: the requests to the
controller reach it too.
"""

import asyncio
import os
import sys
import threading

from cluster_processes import ClusterBroker, request, until

from kqlite.cluster.node import ClusterNode
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.acl import AclOperation as Op, ResourceType as R

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from authorizers import CHECK, RecordingAuthorizer  # noqa: E402

INTER_BROKER = (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA,
                ApiKey.ALTER_PARTITION, ApiKey.CONTROLLED_SHUTDOWN, ApiKey.FETCH)


class NodeThread:
    """A ClusterNode served by an event loop in a thread."""

    def __init__(self, data_dir, zk_hosts, **options):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.node = ClusterNode(str(data_dir), "127.0.0.1", 0, broker_id=1,
                                zookeeper=zk_hosts, **options)
        self.run(self.node.start())
        self.port = self.node.broker.port

    def run(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        self.run(self.node.stop(controlled=False))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def test_every_inter_broker_request_asks_for_cluster_action(tmp_path, zk_hosts):
    authorizer = RecordingAuthorizer()
    node = NodeThread(tmp_path / "broker-1", zk_hosts, authorizer=authorizer)
    others = {b: ClusterBroker(b, tmp_path / f"broker-{b}", zk_hosts) for b in (2, 3)}
    try:
        until(lambda: node.node.controller.is_active, "broker 1 is the controller")
        for b in others.values():
            b.start()
        for b in others.values():
            b.wait_listening()
        until(lambda: len(node.node.cache.brokers) == 3, "three brokers registered")

        def asked(api_key):
            return [q for q in authorizer.asked_so_far() if q.api_key == api_key]

        # Broker 1 leads partition 0 (its followers fetch from it); broker 2 leads 1.
        created = request(node, ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": "guarded", "num_partitions": -1, "replication_factor": -1,
             "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]},
                             {"partition_index": 1, "broker_ids": [2, 3, 1]}]}],
            "timeout_ms": 30000})
        assert created["topics"][0]["error_code"] == ErrorCode.NONE, created
        until(lambda: asked(ApiKey.FETCH), "a follower's fetch from broker 1")
        # Broker 3 stops and the controller takes it out of the ISRs; back, it catches up
        # and broker 2 adds it to the ISR of partition 1 through the controller. (Stopped,
        # not killed: its registration goes at once instead of when its session expires.)
        others[3].stop()
        until(lambda: 3 not in node.node.cache.brokers, "broker 3 gone")
        others[3].start().wait_listening()
        until(lambda: asked(ApiKey.ALTER_PARTITION), "broker 2's AlterPartition")
        deleted = request(node, ApiKey.DELETE_TOPICS, 5, {"topic_names": ["guarded"],
                                                          "timeout_ms": 30000})
        assert deleted["responses"][0]["error_code"] in (ErrorCode.NONE,
                                                         ErrorCode.REQUEST_TIMED_OUT)
        until(lambda: asked(ApiKey.STOP_REPLICA), "the controller's StopReplica")
        others[2].stop()
        until(lambda: asked(ApiKey.CONTROLLED_SHUTDOWN), "broker 2's ControlledShutdown")

        for api_key in INTER_BROKER:
            questions = asked(api_key)
            assert questions, f"no {api_key.api_name} reached broker 1"
            assert {(q.kind, q.operation, q.resource_type, q.name) for q in questions} == \
                {(CHECK, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster")}, api_key.api_name
    except BaseException:
        for b in others.values():
            print(f"--- broker {b.broker_id} ---\n{b.log()}")
        raise
    finally:
        for b in others.values():
            b.kill()
        node.stop()
