"""A cluster broker's Prometheus metrics under Kafka's names.

Kafka publishes these as JMX MBeans; Prometheus usually scrapes them through the JMX
exporter, whose Kafka rules lower-case ``kafka.<domain><type=T, name=N>`` to
``kafka_<domain>_<t>_<n>``, turn a meter's ``...PerSec`` count into a ``_total``
counter, and keep any further key (``clientId``) as a label. kqlite emits the same
names, so dashboards and alerts written for Kafka read a kqlite cluster unchanged;
docs/configuration.md ("Cluster metrics") maps each to its Kafka MBean.

As in Kafka, the replica-manager gauges count what this broker hosts (under-replicated
and under-min-ISR only among the partitions it leads), and the controller gauges are
0 on every broker but the active controller. Everything is read from in-memory state
on the event loop: a scrape never waits on ZooKeeper or on disk.

The ISR counters count the changes the controller committed (Kafka marks its meters at
the same point: a successful AlterPartition answer). Each replicated partition counts
its own; a partition dropped from this broker (StopReplica with delete) takes its count
with it, so the source keeps the final counts of the partitions it last saw and the
broker totals never go down. kqlite's own counter of follower fetches answered from a
leader's memory (replica/recent_batches.py) is kept the same way.
"""

from .rules.partition_state import LEADER_DURING_DELETE, NO_LEADER

__all__ = ["ClusterMetricsSource"]

_FETCHER_LABELS = {"clientId": "Replica"}   # Kafka's fetcher metrics carry clientId=Replica
# Counters each replicated partition keeps; the broker's totals are their sums.
_COUNTERS = ("isr_shrinks", "isr_expands", "recent_reads")


def _hosted(replicas):
    """{(topic, index): ReplicatedPartition} this broker hosts now."""
    return {(p.topic, p.index): p for p in replicas.hosted_replicas()}


class ClusterMetricsSource:
    """``source()`` for :meth:`kqlite.server.metrics.Metrics.add_source`, over a
    :class:`~kqlite.cluster.node.ClusterNode` (its replica manager and controller are
    read when scraped, so the source may be registered before the node starts)."""

    def __init__(self, node):
        self.node = node
        self._seen = {}             # (topic, index) -> the partition object last scraped
        self._retired = dict.fromkeys(_COUNTERS, 0)    # of partitions no longer hosted

    def counter_totals(self):
        """{name in _COUNTERS: its total on this broker since it started}."""
        partitions = _hosted(self.node.replicas)
        for key, old in list(self._seen.items()):
            if partitions.get(key) is not old:
                for name in _COUNTERS:
                    self._retired[name] += getattr(old, name)
                del self._seen[key]
        self._seen.update(partitions)
        return {name: self._retired[name] + sum(getattr(p, name) for p in partitions.values())
                for name in _COUNTERS}

    def __call__(self):
        replicas = self.node.replicas
        hosted = list(_hosted(replicas).values())
        led = [p for p in hosted if p.is_leader]
        totals = self.counter_totals()

        def gauge(name, help_text, value, labels=None):
            return name, "gauge", help_text, [(labels or {}, value)]

        def counter(name, help_text, value):
            return name, "counter", help_text, [({}, value)]

        yield gauge("kafka_server_replicamanager_partitioncount",
                    "Partitions hosted by this broker, led or followed.", len(hosted))
        yield gauge("kafka_server_replicamanager_leadercount",
                    "Partitions this broker leads.", len(led))
        yield gauge("kafka_server_replicamanager_underreplicatedpartitions",
                    "Partitions led here whose ISR is smaller than their replica set.",
                    sum(1 for p in led if p.under_replicated))
        yield gauge("kafka_server_replicamanager_underminisrpartitioncount",
                    "Partitions led here whose ISR is below min.insync.replicas.",
                    sum(1 for p in led if p.under_min_isr))
        yield counter("kafka_server_replicamanager_isrshrinks_total",
                      "ISR shrinks committed by the controller for partitions led here.",
                      totals["isr_shrinks"])
        yield counter("kafka_server_replicamanager_isrexpands_total",
                      "ISR expansions committed by the controller for partitions led here.",
                      totals["isr_expands"])
        yield counter("kqlite_follower_fetches_from_memory_total",
                      "Follower fetches of partitions led here answered from the leader's "
                      "memory of its last appends, without a storage read.",
                      totals["recent_reads"])
        fetchers = replicas.fetchers
        yield gauge("kafka_server_replicafetchermanager_maxlag",
                    "The largest lag, in offsets, of a followed partition behind its "
                    "leader's high watermark.", fetchers.lag(), _FETCHER_LABELS)
        yield gauge("kafka_server_replicafetchermanager_failedpartitionscount",
                    "Followed partitions whose fetching failed for good.",
                    len(fetchers.failed_partitions()), _FETCHER_LABELS)
        active, offline, total = self._controller_counts()
        yield gauge("kafka_controller_kafkacontroller_activecontrollercount",
                    "1 on the active controller, 0 on other brokers.", active)
        yield gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                    "Partitions without a live leader (active controller only).", offline)
        yield gauge("kafka_controller_kafkacontroller_globalpartitioncount",
                    "Partitions in the cluster (active controller only).", total)

    def _controller_counts(self):
        controller = self.node.controller
        context = controller.context if controller is not None else None
        if context is None:
            return 0, 0, 0
        total = offline = 0
        for tp in context.partitions():
            total += 1
            if tp[0] in context.topics_being_deleted:
                continue    # as Kafka: a topic queued for deletion is not "offline"
            state = context.states.get(tp)
            leader = state.leader if state is not None else NO_LEADER
            if leader in (NO_LEADER, LEADER_DURING_DELETE) or leader not in context.live_brokers:
                offline += 1
        return 1, offline, total
