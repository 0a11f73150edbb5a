"""One transactional scenario run (issue 26): a topic written by transactional producers
of two clients (confluent-kafka and kafka-python), a consume-transform-produce pipeline
from a source topic to a sink, read_committed and read_uncommitted readers, the faults,
the final reads, and the exactly-once checker's reports.

    outcome = run_txn_scenario(cluster, "txns", [lambda: hard_bounce(...)])
    assert outcome.errors() == {}, outcome.describe()

The transaction coordinators are named by the leaders of ``__transaction_state`` as
ZooKeeper has them (:func:`coordinator_of`), so a fault can aim at the coordinator of a
producer's transactional id.
"""

import dataclasses
import sys
import time
import traceback

import pytest
from confluent_kafka import Producer

from kqlite.format.internal_topics import kafka_partition_for_key

from .exactly_once import check_pipeline, check_transactions
from .history import FAIL, INFO, OK, History
from .nemesis import leader_of
from .scenario import create_topic
from .txn_workload import (SENDS_FAILED, KafkaPythonProducerWorker, PipelineWorker,
                           TxnProducerWorker, committed_offsets)
from .workload import ConsumerWorker, final_read, key_of

__all__ = ["run_txn_scenario", "TxnOutcome", "coordinator_of", "TXN_STATE",
           "TXN_STATE_PARTITIONS", "TXN_BROKER_OPTIONS"]

TXN_STATE = "__transaction_state"
TXN_STATE_PARTITIONS = 5
# Fewer state partitions than Kafka's 50: each broker loads fewer at every election.
TXN_BROKER_OPTIONS = ("--transaction-state-log-num-partitions", str(TXN_STATE_PARTITIONS),
                      "--offsets-topic-num-partitions", "5",
                      "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
                      "1000")
COMMITTED_READER, UNCOMMITTED_READER = 100, 200
# Seconds for the pipeline to commit its whole source once the faults are healed: a
# liveness guard. librdkafka's transactional calls wait up to 30 s each (txn_workload.py)
# and a transaction left open through a fault is aborted by its 20 s timeout, so a step
# caught by the last fault can hold the pipeline over a minute before it goes on.
CATCH_UP = 120
FINAL, SOURCE_READ, SINK_READ = 999, 997, 998
PIPELINE = 50


def _where(thread):
    """The last frames of ``thread``'s stack: which client call a stalled worker is in
    (the history shows only that a transaction began)."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return "(the thread has ended)"
    return "".join(traceback.format_stack(frame)[-3:])


def coordinator_of(cluster, tid):
    """The broker coordinating ``tid`` now (the leader of its ``__transaction_state``
    partition, as ZooKeeper has it), or None."""
    return leader_of(cluster, TXN_STATE, kafka_partition_for_key(tid, TXN_STATE_PARTITIONS))


def producer_tid(process):
    return f"txn-producer-{process}"


@dataclasses.dataclass
class TxnOutcome:
    report: object              # the TxnReport of the read_committed readers
    uncommitted: object         # the TxnReport of the read_uncommitted reader (control)
    pipeline: dict              # check_pipeline's anomalies
    history: History
    faults: list
    clients: list               # (process, client name) of each transactional producer

    def outcomes(self, process):
        """``{ok: n, fail: n, info: n, "sends failed": n}`` of the transactions
        ``process`` completed (the last: aborted because a send failed, see
        txn_workload.py)."""
        counts = {OK: 0, FAIL: 0, INFO: 0, SENDS_FAILED: 0}
        for op in self.history.ops():
            if op.process == process and op.f == "txn" and op.type in counts:
                counts[op.type] += 1
                counts[SENDS_FAILED] += op.type == FAIL and SENDS_FAILED in op.value[1]
        return counts

    def errors(self):
        found = dict(self.report.errors())
        found.update({name: len(v) for name, v in self.pipeline.items() if v})
        return found

    def describe(self, limit=10):
        lines = [self.report.summary(), f"  read_uncommitted: {self.uncommitted.summary()}"]
        lines += [f"  {client} producer {p}: {self.outcomes(p)}" for p, client in self.clients]
        lines += [f"  fault: {f}" for f in self.faults]
        for name, found in list(self.report.anomalies.items()) + list(self.pipeline.items()):
            if found:
                lines.append(f"  {name}: {found[:limit]}")
        return "\n".join(lines)


def _fill(cluster, topic, partitions, count):
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for n in range(count):
        producer.produce(topic, value=f"in-{n}".encode(), partition=n % partitions)
    assert producer.flush(60) == 0, f"{topic} not filled"


def _committed_transactions(history):
    return sum(op.f == "txn" and op.type == OK and op.process != PIPELINE
               for op in history.ops())


def run_txn_scenario(cluster, topic, faults, *, partitions=3, producers=2,
                     kafka_python_producers=1, inputs=300, warmup=10, cooldown=1.0,
                     final_window=30.0):
    """Run ``faults`` one after another while the workload runs (they start once
    ``warmup`` transactions committed), then heal, let the pipeline catch up with its
    ``inputs`` source records, read everything to the end and check. ``producers``
    confluent-kafka producers are processes 0.., then ``kafka_python_producers``
    kafka-python ones."""
    history = History()
    source, sink = f"{topic}-source", f"{topic}-sink"
    leaders = [sorted(cluster.brokers)[p % len(cluster.brokers)] for p in range(partitions)]
    for name in (topic, source, sink):
        create_topic(cluster, name, partitions, leaders=leaders)
    _fill(cluster, source, partitions, inputs)
    workers = [TxnProducerWorker(history, i, cluster.bootstrap, producer_tid(i), topic,
                                 partitions) for i in range(producers)]
    workers += [KafkaPythonProducerWorker(history, i, cluster.bootstrap, producer_tid(i),
                                          topic, partitions)
                for i in range(producers, producers + kafka_python_producers)]
    clients = [(w.process, "kafka-python" if isinstance(w, KafkaPythonProducerWorker)
                else "confluent-kafka") for w in workers]
    pipeline = PipelineWorker(history, PIPELINE, cluster.bootstrap, "txn-pipeline", "pipeline",
                              source, sink, partitions)
    readers = [ConsumerWorker(history, COMMITTED_READER, cluster.bootstrap, topic, partitions),
               ConsumerWorker(history, UNCOMMITTED_READER, cluster.bootstrap, topic,
                              partitions, isolation="read_uncommitted")]
    for w in workers + [pipeline] + readers:
        w.start()
    done = []
    try:
        cluster.wait_for(lambda: _committed_transactions(history) >= warmup,
                         f"{warmup} transactions committed before the faults")
        for fault in faults:
            began = time.monotonic()
            what = fault()
            done.append(f"{what} [{time.monotonic() - began:.1f} s]")
        time.sleep(cooldown)
        for w in workers:
            w.stop()
        cluster.net.heal()
        for b in cluster.brokers.values():
            b.resume()
        everything = {key_of(source, p): (inputs - p + partitions - 1) // partitions
                      for p in range(partitions)}
        try:
            cluster.wait_for(lambda: committed_offsets(cluster.bootstrap, "pipeline", source,
                                                       partitions) == everything,
                             "the pipeline caught up with its source", timeout=CATCH_UP)
        except pytest.fail.Exception as exc:
            # What the pipeline last did says where it waits (a transaction's step, or
            # reading the committed offsets).
            steps = "\n".join(str(op) for op in history.ops()
                              if op.process == PIPELINE and op.f == "txn")
            pytest.fail(f"{exc}; the pipeline's transactions, last ones last:\n"
                        f"{steps[-4000:]}\nwhere the pipeline's thread is now:\n"
                        f"{_where(pipeline)}", pytrace=False)
    finally:
        for w in workers + [pipeline] + readers:
            w.stop()
        cluster.net.heal()
        for b in cluster.brokers.values():
            b.resume()
    final_read(history, FINAL, cluster.bootstrap, topic, partitions, window=final_window)
    final_read(history, SINK_READ, cluster.bootstrap, sink, partitions, window=final_window)
    committed = committed_offsets(cluster.bootstrap, "pipeline", source, partitions)
    ops = history.ops()
    outputs = [v for op in ops if op.process == SINK_READ and op.f == "poll" and op.type == OK
               for pairs in op.value.values() for _offset, v in pairs]
    inputs_at = {key_of(source, p): range(everything[key_of(source, p)])
                 for p in range(partitions)}
    topic_ops = [op for op in ops if op.process != PIPELINE]
    return TxnOutcome(
        report=check_transactions(topic_ops, readers=[COMMITTED_READER], final=FINAL),
        uncommitted=check_transactions(topic_ops, readers=[UNCOMMITTED_READER], final=FINAL),
        pipeline=check_pipeline(inputs_at, outputs, committed), history=history,
        faults=done, clients=clients)
