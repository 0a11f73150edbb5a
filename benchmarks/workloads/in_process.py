"""The application as a cluster node (issue 30): an ``acks=all`` append through the
in-process broker (kqlite/cluster/in_process.py) against the same append through a Kafka
client over loopback, to the same leader, in the same run.

A three-broker cluster over a real ZooKeeper: brokers 2 and 3 are ``kqlite serve
--zookeeper`` children, broker 1 runs in this process (``open_broker``) on an embedded
data dir it adopts, and leads the measured partitions (replication factor 3,
``min.insync.replicas=2``). One case, 100-byte values, one append at a time (each waits
for the whole ISR before the next is sent):

- ``acks_all_append_p50``: the median time of one append, from the call to its
  acknowledgement: ``InProcessBroker.append(acks=-1)`` in-process, and confluent-kafka's
  ``produce`` + ``flush`` (``acks=all``, ``linger.ms=0``) to broker 1's listener.

- ``acks_1_append_p50``: the same with ``acks=1`` (answered at the leader's append):
  what the call itself costs on each path, without the followers' rounds.

The target: the in-process append's p50 at most 0.7x the client's. Both paths wait for
the same follower fetch rounds; the in-process one saves the client's request encoding,
its socket round trip and librdkafka's queueing. Needs ZooKeeper, kazoo and
confluent-kafka; without them the rows are reported skipped with the reason.
"""

import importlib.util
import os
import statistics
import time

from .cluster import _free_port, _make_chroot, _Serve, _wait_formed

NAME = "in_process"
DESCRIPTION = "acks=all append: in-process broker vs a Kafka client over loopback (RF3)"

VALUE_SIZE = 100
IN_PROCESS = "kqlite in-process broker (leader, acks=all)"
CLIENT = "confluent-kafka over loopback (acks=all)"
IN_PROCESS_1 = "kqlite in-process broker (leader, acks=1)"
CLIENT_1 = "confluent-kafka over loopback (acks=1)"
_CHROOT = "/kqlite-bench"


def run(ctx):
    ck = ctx.peer("confluent_kafka", "acks_all_append_p50", CLIENT)
    if ck is None:
        ctx.skip("acks_all_append_p50", IN_PROCESS, "confluent_kafka not installed")
        return
    from kqlite.cluster.zookeeper.process import (ZooKeeperProcess, ZooKeeperUnavailable,
                                                  find_zookeeper)
    try:
        find_zookeeper()
        missing = None if importlib.util.find_spec("kazoo") else "kazoo not installed"
    except ZooKeeperUnavailable as exc:
        missing = f"ZooKeeper not installed ({exc})"
    if missing:
        for case, systems in (("acks_all_append_p50", (IN_PROCESS, CLIENT)),
                              ("acks_1_append_p50", (IN_PROCESS_1, CLIENT_1))):
            for system in systems:
                ctx.skip(case, system, missing)
        return
    import kqlite
    from kqlite.cluster.in_process import open_broker
    count = ctx.pick(200, 2_000, 10_000)
    value = os.urandom(VALUE_SIZE)
    with ctx.workdir("cluster") as d:
        zk = ZooKeeperProcess(os.path.join(d, "zookeeper"))
        others, broker = [], None
        try:
            ctx.log("  starting ZooKeeper, brokers 2 and 3, and broker 1 in this process")
            zk.start()
            hosts = zk.connect_string + _CHROOT
            _make_chroot(zk.connect_string)
            others = [_Serve(os.path.join(d, f"broker-{b}"), _free_port(),
                             ["--broker-id", str(b), "--zookeeper", hosts,
                              "--controlled-shutdown-retry-backoff-ms", "500"])
                      for b in (2, 3)]
            for b in others:
                b.start()
            for b in others:
                b.wait_listening()
            app = os.path.join(d, "app")
            with kqlite.open(app) as db:
                for topic in ("inproc", "client"):
                    db.create_topic(topic, partitions=1, config={"min.insync.replicas": 2})
            port = _free_port()
            broker = open_broker(app, zookeeper=hosts, broker_id=1,
                                 listen=f"127.0.0.1:{port}", default_replication_factor=3)
            bootstrap = f"127.0.0.1:{port}"
            from confluent_kafka.admin import AdminClient
            _wait_formed(AdminClient({"bootstrap.servers": bootstrap}), 3)
            _wait_isr(broker, ("inproc", "client"))
            in_process = _time_in_process(broker, value, count, -1)
            client = _time_client(ck, bootstrap, value, count, "all")
            in_process_1 = _time_in_process(broker, value, count, 1)
            client_1 = _time_client(ck, bootstrap, value, count, 1)
        finally:
            if broker is not None:
                broker.close(controlled=False)
            for b in others:
                b.terminate()
            for b in others:
                b.stop()
            zk.stop()
    note = f"{count} sequential appends of {VALUE_SIZE} B, RF3, min.insync.replicas=2"
    ctx.add("acks_all_append_p50", IN_PROCESS, statistics.median(in_process), "s", n=count,
            seconds=sum(in_process), note=note)
    ctx.add("acks_all_append_p50", CLIENT, statistics.median(client), "s", n=count,
            seconds=sum(client), note=note + ", linger.ms=0")
    ctx.add("acks_1_append_p50", IN_PROCESS_1, statistics.median(in_process_1), "s",
            n=count, seconds=sum(in_process_1), note=note)
    ctx.add("acks_1_append_p50", CLIENT_1, statistics.median(client_1), "s", n=count,
            seconds=sum(client_1), note=note + ", linger.ms=0")


def _wait_isr(broker, topics, timeout=120):
    """Until broker 1 leads ``topics`` with both followers in the ISR (an acks=all
    append answers then, rather than waiting for a follower to catch up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = [broker.node.cache.partition(t, 0) for t in topics]
        if all(i is not None and i.leader == 1 and len(i.isr) == 3 for i in infos):
            return
        time.sleep(0.1)
    raise RuntimeError("broker 1 did not lead the measured partitions with a full ISR")


def _time_in_process(broker, value, count, acks):
    for _ in range(20):                             # warm up
        broker.append("inproc", 0, [value], acks=acks)
    out = []
    for _ in range(count):
        start = time.perf_counter()
        broker.append("inproc", 0, [value], acks=acks)
        out.append(time.perf_counter() - start)
    return out


def _time_client(ck, bootstrap, value, count, acks):
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    for _ in range(20):
        producer.produce("client", value, partition=0)
        producer.flush(30)
    out = []
    for _ in range(count):
        start = time.perf_counter()
        producer.produce("client", value, partition=0)
        producer.flush(30)
        out.append(time.perf_counter() - start)
    return out
