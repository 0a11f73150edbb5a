"""One scenario run: a topic, the workload running while the nemesis acts, the final
read, and the checker's report.

    outcome = run_scenario(cluster, "events", [lambda: hard_bounce(cluster, 1, "events")])
    assert outcome.report.errors() == {}, outcome.describe()
"""

import dataclasses
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from .checker import check
from .cluster import WAIT
from .history import OK, History
from .workload import ConsumerWorker, ProducerWorker, final_read

__all__ = ["create_topic", "run_scenario", "Outcome"]


def create_topic(cluster, topic, partitions=1, *, min_isr=2, unclean=False, leaders=None):
    """Replication factor = cluster size; ``leaders`` (one broker per partition) makes
    that broker the preferred leader (the first of the replica list)."""
    config = {"min.insync.replicas": str(min_isr),
              "unclean.leader.election.enable": "true" if unclean else "false"}
    ids = sorted(cluster.brokers)
    if leaders:
        assignment = [[lead] + [b for b in ids if b != lead] for lead in leaders]
        # librdkafka wants the partition count along with the assignment.
        new = NewTopic(topic, num_partitions=len(assignment), replication_factor=-1,
                       replica_assignment=assignment, config=config)
    else:
        new = NewTopic(topic, partitions, len(ids), config=config)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def created():
        try:
            admin.create_topics([new], request_timeout=WAIT)[topic].result(timeout=WAIT)
        except KafkaException as exc:
            # A broker that just came back is registered before the controller (and so
            # the broker answering) counts it live: try again until it does.
            if exc.args[0].code() != KafkaError.INVALID_REPLICA_ASSIGNMENT:
                raise
            return False
        return True
    cluster.wait_for(created, f"topic {topic} created")
    for p in range(partitions):
        cluster.wait_for(lambda: (s := cluster.partition_state(topic, p)) is not None
                         and s["leader"] >= 0, f"{topic}-{p} has a leader")


@dataclasses.dataclass
class Outcome:
    report: object
    history: History
    faults: list

    def describe(self, anomaly=None, limit=15):
        """The summary, the faults, and a few examples of each anomaly (for messages)."""
        lines = [self.report.summary()] + [f"  fault: {f}" for f in self.faults]
        for name, found in self.report.anomalies.items():
            if found and (anomaly is None or name == anomaly):
                lines.append(f"  {name}: {found[:limit]}")
        return "\n".join(lines)


def run_scenario(cluster, topic, faults, *, partitions=1, idempotent=True, producers=2,
                 consumers=1, warmup_acks=50, cooldown=1.0, final_window=30.0, quiet=3.0,
                 history=None):
    """Run ``faults`` (callables returning a description) one after another while
    ``producers`` and ``consumers`` work, then heal every link, read to the end and
    check. The faults start once ``warmup_acks`` sends were acknowledged. A fault that
    watches the workload gets the ``history`` passed in."""
    history = History() if history is None else history
    workers = [ProducerWorker(history, i, cluster.bootstrap, topic, partitions,
                              idempotent=idempotent) for i in range(producers)]
    readers = [ConsumerWorker(history, 100 + i, cluster.bootstrap, topic, partitions)
               for i in range(consumers)]
    for w in workers + readers:
        w.start()
    done = []
    try:
        cluster.wait_for(lambda: sum(op.f == "send" and op.type == OK
                                     for op in history.ops()) >= warmup_acks,
                         f"{warmup_acks} sends acknowledged before the faults")
        for fault in faults:
            began = time.monotonic()
            what = fault()
            done.append(f"{what} [{time.monotonic() - began:.1f} s]")
        time.sleep(cooldown)
    finally:
        for w in workers:
            w.stop()
        for r in readers:
            r.stop()
        cluster.net.heal()
        for b in cluster.brokers.values():
            b.resume()
    final_read(history, 999, cluster.bootstrap, topic, partitions, window=final_window,
               quiet=quiet)
    return Outcome(check(history.ops()), history, done)
