"""ZooKeeper session expiry ten times in a row (AT-21, KAFKA-4229): the session of the
active controller is expired ten times, one right after the other (the next expiry
starts as soon as the last victim registered again, without waiting for the ISRs to
heal), alternately by cutting it from ZooKeeper past the session timeout and by pausing
the process (SIGSTOP) past it. Meanwhile the queue workload runs on a topic of three
partitions.

Pass, at the end: exactly one controller (``/controller`` names a registered broker and
exactly one broker's own ``ActiveControllerCount`` gauge is 1: no broker still believes
it controls), every broker registered, every partition of every topic led by a live
broker with every replica in its ISR, and the workload's history without anomaly (every
acknowledged write read back: a produce/consume round works).

No unsafe control: expiry moves leadership only between in-sync replicas and the
broker comes back with its log whole (a session expiry loses no data), so even
``min.insync.replicas=1`` with unclean election has nothing to lose here; what this
scenario can break is liveness (a stuck broker, two controllers, a partition without
a leader), which the end state checks.
"""

from harness.nemesis import isolate_from_zookeeper, pause_past_session, wait_full_isr
from harness.scenario import create_topic, run_scenario

TOPIC = "expiry"
PARTITIONS = 3
ROUNDS = 10


def _expire_the_controller(cluster, round_):
    # Right after the last victim registered again, the election its expiry started may
    # still be under way: /controller is then absent for a moment.
    victim = cluster.wait_for(cluster.controller, "a controller elected")
    expire = isolate_from_zookeeper if round_ % 2 == 0 else pause_past_session
    return f"round {round_}: " + expire(cluster, victim, TOPIC, settle=False)


def _every_partition_led_with_full_isr(cluster):
    everyone = sorted(cluster.brokers)
    topics = cluster.admin.get_children("/brokers/topics")
    for topic in topics:
        partitions = len(cluster.admin.get_children(f"/brokers/topics/{topic}/partitions"))
        wait_full_isr(cluster, topic, partitions)
        for p in range(partitions):
            state = cluster.partition_state(topic, p)
            assert state["leader"] in everyone and sorted(state["isr"]) == everyone, \
                (topic, p, state)
    return topics


def test_ten_session_expiries_in_a_row_leave_one_controller_and_no_stuck_broker(
        fault_cluster, soak):
    cluster = fault_cluster(metrics=True)
    create_topic(cluster, TOPIC, PARTITIONS, min_isr=2)
    rounds = ROUNDS * (3 if soak else 1)
    faults = [lambda r=r: _expire_the_controller(cluster, r) for r in range(rounds)]
    outcome = run_scenario(cluster, TOPIC, faults, partitions=PARTITIONS, quiet=1.5)
    print(outcome.describe())

    assert sorted(cluster.registered()) == sorted(cluster.brokers)
    topics = _every_partition_led_with_full_isr(cluster)
    assert TOPIC in topics
    controller = cluster.controller()
    assert controller in cluster.brokers
    # Each broker's own view: exactly one believes it is the active controller, and it is
    # the one ZooKeeper names (read after the ISRs settled: no election is running).
    believers = cluster.wait_for(
        lambda: (lambda found: found if len(found) == 1 else None)(
            [b for b, broker in cluster.brokers.items()
             if broker.metrics()["kafka_controller_kafkacontroller_activecontrollercount"]]),
        "exactly one broker reporting itself the active controller")
    assert believers == [cluster.controller()]
    epoch, _ = cluster.controller_epoch()
    assert epoch >= rounds + 1, f"controller epoch {epoch} after {rounds} expiries"
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert outcome.report.errors() == {}, outcome.describe()
