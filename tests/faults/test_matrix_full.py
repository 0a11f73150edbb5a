"""Kafka's replication matrix in full (AT-15; ``replication_test.py`` of Kafka's system
tests): 3 brokers, a topic of 3 partitions with replication factor 3,
``min.insync.replicas=2``, ``acks=all``; each failure mode against the leader and
against the controller.

=================  ==============================================================
clean shutdown     SIGTERM (controlled shutdown); the broker stays down while the
                   workload goes on and through the final read
hard shutdown      SIGKILL; the same
clean bounce       SIGTERM, restart, back in every ISR (x1; x5 with ``--soak``)
hard bounce        SIGKILL, wait for ZooKeeper to expire the session (and for a new
                   controller and new leaders), restart, back in every ISR (x1; x5)
=================  ==============================================================

"The leader" is the leader of partition 0, made a broker other than the controller
(the preferred leaders rotate from it), so the two targets are different brokers: the
leader run moves leadership only, the controller run moves the controller and the
leadership of the partition it leads. The leader runs use an idempotent producer (no
duplicate allowed), the controller runs a plain one (duplicates from retries allowed),
as Kafka runs the matrix with and without idempotence.

Pass: every acknowledged value is read back, nothing read is skipped, reordered or
inconsistent. All eight runs share one cluster (each with its own topic; a broker left
down is started again between runs), which is safe because each run checks only its
own topic and begins by waiting for every broker registered and a controller.

No unsafe control here: these failures cannot lose an ``acks=all`` write even with
``min.insync.replicas=1`` and unclean election on, because an acknowledged write is on
every ISR member and each failure takes at most one broker while the other two stay in
the ISR (a new leader is always a clean one). Loss needs the ISR to shrink to the
leader alone first: that is the Jepsen 2013 scenario and its control
(``test_replication_matrix.py``).
"""

import pytest

from harness.cluster import FaultCluster
from harness.nemesis import (clean_bounce, clean_shutdown, hard_bounce, hard_shutdown,
                             leader_of, wait_acks, wait_full_isr)
from harness.history import History
from harness.scenario import create_topic, run_scenario
from kqlite.cluster.zookeeper.process import ZooKeeperUnavailable, find_zookeeper

PARTITIONS = 3
MODES = ("clean_shutdown", "hard_shutdown", "clean_bounce", "hard_bounce")
TARGETS = ("leader", "controller")


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    try:
        find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    cluster = FaultCluster(tmp_path_factory.mktemp("matrix") / "cluster", 3).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(shared_cluster, request):
    shared_cluster.restore()
    yield shared_cluster
    if getattr(request.node, "faults_failed", True):
        print(shared_cluster.logs())


def _topic_led_away_from_the_controller(cluster, topic):
    """A topic whose partition 0 prefers a broker other than the controller."""
    controller = cluster.controller()
    ids = sorted(cluster.brokers)
    first = next(b for b in ids if b != controller)
    rotation = ids[ids.index(first):] + ids[:ids.index(first)]
    create_topic(cluster, topic, PARTITIONS, min_isr=2, leaders=rotation)
    wait_full_isr(cluster, topic, PARTITIONS)


def _fault(cluster, history, mode, target, topic):
    def target_id():
        return cluster.controller() if target == "controller" else leader_of(cluster, topic)

    def once():
        victim = target_id()
        if mode in ("clean_shutdown", "hard_shutdown"):
            shutdown = clean_shutdown if mode == "clean_shutdown" else hard_shutdown
            done = shutdown(cluster, victim, topic, PARTITIONS)
            # The workload must go on without it (two replicas = min.insync.replicas).
            return f"{done} (the {target}); {wait_acks(cluster, history, 100)}"
        bounce = clean_bounce if mode == "clean_bounce" else hard_bounce
        return f"{bounce(cluster, victim, topic, PARTITIONS)} (the {target})"
    return once


# The default run covers every mode once and each target twice (the leader with an
# idempotent producer, the controller with a plain one); the other four cells run with
# --soak, which also repeats the bounces five times.
_DEFAULT_CELLS = {("hard_bounce", "leader"), ("clean_bounce", "leader"),
                  ("hard_shutdown", "controller"), ("clean_shutdown", "controller")}
_CELLS = [pytest.param(mode, target, id=f"{mode}-{target}",
                       marks=() if (mode, target) in _DEFAULT_CELLS else pytest.mark.soak)
          for mode in MODES for target in TARGETS]


@pytest.mark.parametrize("mode,target", _CELLS)
def test_replication_matrix(cluster, soak, mode, target):
    topic = f"matrix-{mode}-{target}".replace("_", "-")
    _topic_led_away_from_the_controller(cluster, topic)
    assert leader_of(cluster, topic) != cluster.controller()
    history = History()
    repeats = 5 if soak and mode.endswith("bounce") else 1
    idempotent = target == "leader"
    outcome = run_scenario(cluster, topic, [_fault(cluster, history, mode, target, topic)]
                           * repeats, partitions=PARTITIONS, idempotent=idempotent,
                           history=history, quiet=1.5)
    print(outcome.describe())
    assert outcome.report.acknowledged > 0, outcome.describe()
    allowed = () if idempotent else ("duplicate",)
    assert outcome.report.errors(allowed) == {}, outcome.describe()
