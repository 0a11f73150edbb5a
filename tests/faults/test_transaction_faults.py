"""Transactions under faults on a 3-broker cluster (issue 26), checked by the exactly-once
checker (harness/exactly_once.py): read_committed readers see every committed transaction
whole and once and never an aborted one's value, and a consume-transform-produce
pipeline's committed offsets match its outputs.

Default run (short):

- the coordinator killed mid-commit: its EndTxn answered (PrepareCommit logged) while its
  connections to one partition's leader are cut, so that partition's marker is not
  written; it is SIGKILLed; the broker elected in its place loads the partition, finds
  the PrepareCommit and writes the missing marker, and the deposed coordinator's marker
  epoch is fenced by that partition's leader (TRANSACTION_COORDINATOR_FENCED); the
  producer's next transaction commits; then that partition's leader fails over, and its
  new leader's last stable offset is the old one's;
- the scenario (three transactional producers, two confluent-kafka and one kafka-python,
  over three partitions led by three brokers, one transaction in four aborted, the
  pipeline, a read_committed and a read_uncommitted reader) through every nemesis of the
  issue once, one after another: the coordinator SIGKILLed and restarted, SIGSTOPped
  past its ZooKeeper session, a partition leader SIGKILLed, the controller SIGKILLed,
  the coordinator cut from a partition leader until that partition's ISR changed (or
  it stayed idle: harness/nemesis.partition_pair), a power loss of the coordinator
  (the undo journal of harness/power_loss.py, on for the whole cluster): 0 anomalies,
  and every producer committed; the same checker over the read_uncommitted reader
  reports aborted reads (the negative control: the checker can fail).

With ``--soak``: the scenario under each nemesis alone, three times in a row, with a
longer pipeline and warm-up.
"""

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from harness.cluster import node
from harness.exactly_once import check_transactions
from harness.history import INVOKE, OK, History
from harness.nemesis import (hard_bounce, hard_shutdown, kill_controller, leader_of,
                             leaders_of, partition_pair, pause_past_session, restart, wait_full_isr)
from harness.power_loss import ENV, power_loss_bounce
from harness.scenario import create_topic
from harness.txn_scenario import (TXN_BROKER_OPTIONS, TXN_STATE, TXN_STATE_PARTITIONS,
                                  coordinator_of, producer_tid, run_txn_scenario)
from harness.workload import final_read, key_of
from kqlite.cluster.network.broker_client import BrokerConnection
from kqlite.format.internal_topics import kafka_partition_for_key
from kqlite.protocol import ApiKey, ErrorCode

E = ErrorCode
WAIT = 60


def _ask(address, api_key, version, body):
    host, port = address.rsplit(":", 1)

    async def go():
        conn = await BrokerConnection.connect(host, int(port), request_timeout=15)
        try:
            return await conn.request(api_key, version, body)
        finally:
            await conn.close()
    return asyncio.run(go())


def _describe(cluster, broker_id, tid):
    (state,) = _ask(cluster[broker_id].address, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                    {"transactional_ids": [tid]})["transaction_states"]
    return state


def _latest(cluster, broker_id, topic, *, read_committed, leading=True):
    """ListOffsets LATEST of partition 0 from ``broker_id``: the last stable offset with
    ``read_committed``, else the high watermark; None when it does not lead the partition
    (yet) and not ``leading``."""
    answer = _ask(cluster[broker_id].address, ApiKey.LIST_OFFSETS, 4, {
        "replica_id": -1, "isolation_level": 1 if read_committed else 0,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    (partition,) = answer["topics"][0]["partitions"]
    if not leading and partition["error_code"] == E.NOT_LEADER_OR_FOLLOWER:
        return None
    assert partition["error_code"] == E.NONE, partition
    return partition["offset"]


def _read_committed(cluster, topic, partitions):
    """The values of ``topic`` a read_committed reader sees up to the last stable offset."""
    # Nothing committed: a consumer's close waits for its last commit, and while the
    # scenario's cut keeps the group's coordinator unknown that wait has no end.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "failover-read",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, at_end = [], set()
    deadline = time.monotonic() + 10       # a liveness guard: the caller asks again
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is None:
                seen.append(msg.value().decode())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    finally:
        consumer.close()
    return sorted(seen)


def test_a_coordinator_killed_mid_commit_is_finished_by_its_successor(fault_cluster):
    cluster = fault_cluster(broker_options=TXN_BROKER_OPTIONS)
    tid, topic = "mid-commit", "mid-commit"
    history = History()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                         "acks": "all", "request.timeout.ms": 5000,
                         "reconnect.backoff.max.ms": 500})
    producer.init_transactions(WAIT)
    index = kafka_partition_for_key(tid, TXN_STATE_PARTITIONS)
    wait_full_isr(cluster, TXN_STATE, TXN_STATE_PARTITIONS)
    coordinator = coordinator_of(cluster, tid)
    cut_from, written_on = [b for b in sorted(cluster.brokers) if b != coordinator]
    create_topic(cluster, topic, 2, leaders=[cut_from, written_on])
    wait_full_isr(cluster, topic, 2)

    # The coordinator cannot open connections to the leader of partition 0 any more (that
    # leader still fetches from it, and still asks it to verify the producer's batch).
    cluster.net.cut(node(coordinator), node(cut_from), both_ways=False)
    values = {key_of(topic, 0): ["mid-commit-0"], key_of(topic, 1): ["mid-commit-1"]}
    history.add(0, INVOKE, "txn", ("t0", values))
    producer.begin_transaction()
    producer.produce(topic, value=b"mid-commit-0", partition=0)
    producer.produce(topic, value=b"mid-commit-1", partition=1)
    producer.commit_transaction(WAIT)           # PrepareCommit is logged
    history.add(0, OK, "txn", ("t0", "committed"))
    # Partition 1 is decided, partition 0 not: its last stable offset stays below the
    # transaction's value (markers are not atomic across partitions, in Kafka either).
    cluster.wait_for(lambda: _read_committed(cluster, topic, 2) == ["mid-commit-1"],
                     "the marker of partition 1 written")
    waiting = _describe(cluster, coordinator, tid)
    assert waiting["transaction_state"] == "PrepareCommit"
    assert _read_committed(cluster, topic, 2) == ["mid-commit-1"]
    deposed_epoch = cluster.partition_state(TXN_STATE, index)["leader_epoch"]

    hard_shutdown(cluster, coordinator, TXN_STATE, TXN_STATE_PARTITIONS)
    cluster.net.heal()
    successor = coordinator_of(cluster, tid)
    assert successor not in (None, coordinator)
    cluster.wait_for(lambda: _read_committed(cluster, topic, 2) ==
                     ["mid-commit-0", "mid-commit-1"], "the commit finished by the successor")
    cluster.wait_for(lambda: _describe(cluster, successor, tid)["transaction_state"] ==
                     "CompleteCommit", "the commit completed by the successor")

    # A late ABORT from the deposed coordinator, as it would send it: fenced.
    answer = _ask(cluster[cut_from].address, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": waiting["producer_id"], "producer_epoch": waiting["producer_epoch"],
         "transaction_result": False, "coordinator_epoch": deposed_epoch,
         "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    (marker,) = answer["markers"]
    assert marker["topics"][0]["partitions"][0]["error_code"] == \
        E.TRANSACTION_COORDINATOR_FENCED

    restart(cluster, coordinator, TXN_STATE, TXN_STATE_PARTITIONS)
    history.add(0, INVOKE, "txn", ("t1", {key_of(topic, 0): ["after-0"]}))
    producer.begin_transaction()
    producer.produce(topic, value=b"after-0", partition=0)
    producer.commit_transaction(WAIT)
    history.add(0, OK, "txn", ("t1", "committed"))
    # commit_transaction() returns once the decision is logged; the markers follow.
    cluster.wait_for(lambda: _read_committed(cluster, topic, 2) ==
                     ["after-0", "mid-commit-0", "mid-commit-1"], "the next commit read")
    final_read(history, 999, cluster.bootstrap, topic, 2, quiet=1.0)
    report = check_transactions(history.ops(), readers=[], final=999)
    assert report.errors() == {} and report.committed == 2, report.summary()

    # Partition 0's leader fails over: its follower, now leader, has the same last stable
    # offset, which is its high watermark (nothing is undecided there).
    stable = _latest(cluster, cut_from, topic, read_committed=True)
    hard_shutdown(cluster, cut_from, topic, 2)
    new_leader = leader_of(cluster, topic, 0)
    # ZooKeeper names the new leader before its LeaderAndIsr reached it.
    cluster.wait_for(lambda: _latest(cluster, new_leader, topic, read_committed=True,
                                     leading=False) is not None,
                     f"broker {new_leader} leading {topic}-0")
    assert _latest(cluster, new_leader, topic, read_committed=True) == stable == \
        _latest(cluster, new_leader, topic, read_committed=False)


def _cut_partner(cluster, topic, victim):
    """``(topic, partition, broker)``: a partition of the scenario's topics (``topic``,
    then its pipeline's sink and source) and the broker to cut ``victim`` from so that
    the partition's ISR can change: its leader is one of the two and can still reach
    the controller (the ISR changes through the controller's AlterPartition; a leader
    cut from the controller keeps its ISR)."""
    controller = cluster.controller()
    for name in (topic, f"{topic}-sink", f"{topic}-source"):
        for partition, leader in sorted(leaders_of(cluster, name, 3).items()):
            others = [leader] if leader != victim else \
                [b for b in sorted(cluster.brokers) if b != victim]
            for other in others:
                if leader == controller or controller not in (victim, other):
                    return name, partition, other
    pytest.fail(f"no partition of {topic}'s topics whose ISR can change with {victim} "
                "cut off")


def _coordinator_fault(kind, cluster, topic, settle=TXN_STATE_PARTITIONS):
    """The nemesis ``kind`` aimed at producer 0's transaction coordinator, a partition
    leader or the controller (see the module docstring). A bounce waits for ``settle``
    partitions of ``__transaction_state`` to be led elsewhere and back in full ISR."""
    tid = producer_tid(0)

    def coordinator():
        return coordinator_of(cluster, tid)

    def fault():
        # Each fault starts from a whole cluster: the one before may leave the topic's
        # ISRs short a moment, and a leader killed as its ISR's only member leaves its
        # partition offline (no unclean election), which is not this fault.
        wait_full_isr(cluster, topic, 3)
        victim = coordinator()
        if kind == "kill-coordinator":
            return hard_bounce(cluster, victim, TXN_STATE, settle) + " (the coordinator)"
        if kind == "pause-coordinator":
            return pause_past_session(cluster, victim, TXN_STATE) + " (the coordinator)"
        if kind == "power-loss-coordinator":
            return str(power_loss_bounce(cluster, victim, TXN_STATE)) + " (the coordinator)"
        if kind == "cut-coordinator-from-leader":
            # Markers to that leader fail and are retried until the link heals: once
            # a partition's ISR changed for it, or once it stayed idle (every producer
            # may wait on such markers when the cut begins, and write nothing more).
            name, partition, other = _cut_partner(cluster, topic, victim)
            return partition_pair(cluster, victim, other, name, partition,
                                  idle=3 * cluster.lag_time_ms / 1000) + " (the coordinator)"
        if kind == "kill-leader":
            return hard_bounce(cluster, leader_of(cluster, topic, 0), topic, 3) + \
                " (a partition leader)"
        return kill_controller(cluster, topic)
    return fault


_KINDS = ("kill-coordinator", "pause-coordinator", "kill-leader", "kill-controller",
          "cut-coordinator-from-leader", "power-loss-coordinator")


def _assert_exactly_once(outcome):
    print(outcome.describe())
    assert outcome.report.committed > 0 and outcome.report.aborted > 0, outcome.describe()
    for process, _client in outcome.clients:
        assert outcome.outcomes(process)[OK] > 0, outcome.describe()
    assert outcome.errors() == {}, outcome.describe()
    # The negative control: the same checker over the read_uncommitted reader fails.
    assert outcome.uncommitted.errors().get("aborted-read", 0) > 0, outcome.describe()


def test_exactly_once_through_every_nemesis_once(fault_cluster, monkeypatch):
    monkeypatch.setenv(ENV, "1")          # the brokers journal: power-loss-coordinator
    cluster = fault_cluster(broker_options=TXN_BROKER_OPTIONS)
    topic = "eos"
    # The quick tier: each nemesis once, one after another; a bounce of the coordinator
    # waits for one state partition only, and a short pipeline.
    faults = [_coordinator_fault(kind, cluster, topic, settle=1) for kind in _KINDS]
    _assert_exactly_once(run_txn_scenario(cluster, topic, faults, inputs=120, warmup=5))


@pytest.mark.soak
@pytest.mark.parametrize("kind", _KINDS)
def test_exactly_once_soak(fault_cluster, monkeypatch, kind):
    if kind == "power-loss-coordinator":
        monkeypatch.setenv(ENV, "1")
    cluster = fault_cluster(broker_options=TXN_BROKER_OPTIONS)
    topic = f"eos-{kind}"
    _assert_exactly_once(run_txn_scenario(
        cluster, topic, [_coordinator_fault(kind, cluster, topic)] * 3, inputs=1000,
        warmup=30, cooldown=30.0))
