"""Kafka's replication matrix (AT-15; ``replication_test.py`` of Kafka's system tests) in
its quick form, and the Jepsen 2013 scenario (AT-18) with its unsafe control.

Each scenario runs the queue workload (two acks=all producers, one consumer) on a topic
of replication factor 3 over three brokers while the nemesis acts, reads everything back
and checks the history: with ``min.insync.replicas=2`` and no unclean election nothing
may be lost, skipped or inconsistent (and with idempotence nothing duplicated). The
unsafe control (``min.insync.replicas=1``, unclean election on) must show loss, which
proves the checker can see it. ``--soak`` repeats each bounce five times (AT-15's x5).
"""

import pytest

from harness.cluster import node
from harness.history import History
from harness.nemesis import (clean_bounce, hard_bounce, kill_controller, leader_of,
                             wait_full_isr)
from harness.scenario import create_topic, run_scenario

TOPIC = "events"


def _bounces(soak):
    return 5 if soak else 1


def _assert_safe(outcome, idempotent=True):
    allowed = () if idempotent else ("duplicate",)
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert outcome.report.errors(allowed) == {}, outcome.describe()
    print(outcome.describe())


# The default run covers these faults in test_matrix_full.py (one shared cluster); these
# variants, each on a cluster of its own, run with --soak.
@pytest.mark.soak
@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_hard_bounce_of_the_leader(fault_cluster, soak, idempotent):
    cluster = fault_cluster()
    create_topic(cluster, TOPIC, min_isr=2)
    faults = [lambda: hard_bounce(cluster, leader_of(cluster, TOPIC), TOPIC)] * _bounces(soak)
    _assert_safe(run_scenario(cluster, TOPIC, faults, idempotent=idempotent), idempotent)


@pytest.mark.soak
def test_clean_bounce_of_the_leader(fault_cluster, soak):
    cluster = fault_cluster()
    create_topic(cluster, TOPIC, min_isr=2)
    faults = [lambda: clean_bounce(cluster, leader_of(cluster, TOPIC), TOPIC)] * _bounces(soak)
    _assert_safe(run_scenario(cluster, TOPIC, faults))


@pytest.mark.soak
def test_hard_kill_of_the_controller(fault_cluster, soak):
    cluster = fault_cluster()
    # The controller leads the partition too, so its death also moves the leadership.
    create_topic(cluster, TOPIC, min_isr=2, leaders=[cluster.controller()])
    faults = [lambda: kill_controller(cluster, TOPIC)] * _bounces(soak)
    _assert_safe(run_scenario(cluster, TOPIC, faults))


def _isolated_leader_then_killed(cluster, history, rejoin=True):
    """Jepsen 2013: the leader (also the controller, so that it can shrink its own ISR)
    is cut from its followers until the ISR is just itself, keeps taking writes from
    clients, then dies; a new leader is chosen (or none, if no ISR member is left and
    unclean election is off); then everything heals and the old leader comes back."""
    leader = leader_of(cluster, TOPIC)
    others = [b for b in cluster.brokers if b != leader]
    cluster.net.isolate(node(leader), [node(b) for b in others])
    cluster.wait_for(lambda: cluster.partition_state(TOPIC)["isr"] == [leader],
                     f"the ISR shrunk to the isolated leader {leader}")
    shrunk = len(history)
    cluster.wait_for(lambda: len(history) > shrunk + 200,
                     "the workload went on while the leader was alone in its ISR")
    cluster[leader].kill()
    cluster.wait_session_expired(leader)
    cluster.wait_for(lambda: leader_of(cluster, TOPIC) != leader,
                     f"broker {leader} no longer the leader")
    new_leader = leader_of(cluster, TOPIC)
    cluster.net.heal()
    cluster[leader].start().wait_listening()
    cluster.wait_for(lambda: leader in cluster.registered(), f"broker {leader} back")
    if rejoin:
        wait_full_isr(cluster, TOPIC)
    return (f"leader {leader} isolated from {others} until ISR=[{leader}], killed; "
            f"leader then {new_leader}")


def _jepsen_2013(cluster, *, min_isr, unclean, idempotent=True):
    create_topic(cluster, TOPIC, min_isr=min_isr, unclean=unclean,
                 leaders=[cluster.controller()])
    history = History()
    # After an unclean election the old leader's extra records are truncated: it may
    # take a while to rejoin, and that is not what the control is about.
    fault = lambda: _isolated_leader_then_killed(cluster, history, rejoin=not unclean)  # noqa
    return run_scenario(cluster, TOPIC, [fault], history=history, idempotent=idempotent)


def test_jepsen_2013_isolated_leader_loses_nothing_with_min_isr_2(fault_cluster):
    cluster = fault_cluster()
    _assert_safe(_jepsen_2013(cluster, min_isr=2, unclean=False))


def test_jepsen_2013_unsafe_control_loses_acknowledged_writes(fault_cluster):
    cluster = fault_cluster()
    # Without idempotence: librdkafka's idempotent producer fails fatally on the sequence
    # gap the unclean election opens, which would stop the workload.
    outcome = _jepsen_2013(cluster, min_isr=1, unclean=True, idempotent=False)
    print(outcome.describe())
    errors = outcome.report.errors(allowed=("duplicate",))
    # Loss shows as lost-write/unseen (acknowledged, never read), or as inconsistent
    # offsets: a value the consumer read from the deposed leader before it was truncated
    # away, its offset then holding another value.
    loss = sum(errors.get(name, 0) for name in ("lost-write", "unseen", "inconsistent-offsets"))
    assert loss > 0, outcome.describe()
    print("ISR at the end:", cluster.partition_state(TOPIC))


# -- Randomized schedules (soak) ----------------------------------------------------------------

def _cut_leader_from_a_follower(cluster, rng):
    """partition_pair on the leader and a follower that is not the controller: the
    leader's ISR shrink goes through the controller (AlterPartition), so a leader cut
    from the controller cannot shrink its ISR at all, in Kafka as here; its acks=all
    writes wait for the heal, and the nemesis has no reaction to wait for."""
    from harness.nemesis import partition_pair
    leader, controller = leader_of(cluster, TOPIC), cluster.controller()
    followers = [b for b in sorted(cluster.brokers) if b not in (leader, controller)]
    return partition_pair(cluster, leader, rng.choice(followers), TOPIC)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(3))
def test_random_nemesis_schedule_loses_nothing(fault_cluster, seed):
    """Twelve faults drawn at random (seeded; the seed is in the test id) among every
    kind the nemesis has, under the safe configuration."""
    import random

    from harness.nemesis import isolate_from_zookeeper, pause_past_session, restart_zookeeper
    rng = random.Random(seed)
    cluster = fault_cluster()
    create_topic(cluster, TOPIC, min_isr=2)
    ids = sorted(cluster.brokers)
    kinds = [
        lambda: hard_bounce(cluster, rng.choice(ids), TOPIC),
        lambda: hard_bounce(cluster, leader_of(cluster, TOPIC), TOPIC),
        lambda: clean_bounce(cluster, leader_of(cluster, TOPIC), TOPIC),
        lambda: kill_controller(cluster, TOPIC),
        lambda: pause_past_session(cluster, rng.choice(ids), TOPIC),
        lambda: isolate_from_zookeeper(cluster, rng.choice(ids), TOPIC),
        lambda: restart_zookeeper(cluster, TOPIC, down_seconds=rng.uniform(0, 2)),
        lambda: _cut_leader_from_a_follower(cluster, rng),
    ]
    faults = [lambda: rng.choice(kinds)() for _ in range(12)]
    _assert_safe(run_scenario(cluster, TOPIC, faults, idempotent=bool(seed % 2)),
                 idempotent=bool(seed % 2))
