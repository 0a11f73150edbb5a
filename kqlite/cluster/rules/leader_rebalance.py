"""Which partitions the automatic leader rebalance moves back to their preferred replica
(Kafka's ``KafkaController.checkAndTriggerAutoLeaderRebalance``), as a pure function.

Every ``leader.imbalance.check.interval.seconds`` the controller groups the partitions
by preferred replica (the first of each assignment). A broker whose share of such
partitions led by someone else exceeds ``leader.imbalance.per.broker.percentage`` gets
those partitions back, each one whose preferred replica can lead now (live and in the
ISR); a broker at or under the threshold is left alone, so a few stray leaders do not
cause a stream of elections. Partitions of topics being deleted take no part.
"""

__all__ = ["imbalanced_partitions", "DEFAULT_CHECK_INTERVAL_S", "DEFAULT_PERCENTAGE",
           "FIRST_CHECK_DELAY_S"]

DEFAULT_CHECK_INTERVAL_S = 300     # leader.imbalance.check.interval.seconds
DEFAULT_PERCENTAGE = 10            # leader.imbalance.per.broker.percentage
FIRST_CHECK_DELAY_S = 5            # Kafka's first check after a controller takes over


def imbalanced_partitions(assignments, states, online, deleting, percentage):
    """The partitions to give back to their preferred replica, sorted.

    ``assignments``: {topic: {partition: replicas}}; ``states``: {(topic, partition):
    PartitionState}; ``online``: broker ids that can lead; ``deleting``: topics being
    deleted; ``percentage``: the per-broker threshold."""
    by_preferred = {}
    for topic, partitions in assignments.items():
        if topic in deleting:
            continue
        for p, replicas in partitions.items():
            if replicas and (topic, p) in states:
                by_preferred.setdefault(replicas[0], []).append((topic, p))
    due = []
    for broker, tps in by_preferred.items():
        astray = [tp for tp in tps if states[tp].leader != broker]
        if len(astray) / len(tps) <= percentage / 100.0:
            continue
        due.extend(tp for tp in astray
                   if broker in online and broker in states[tp].isr)
    return sorted(due)
