"""Power loss of one broker (issue 15; AT-22 "last replica standing"), with the journal of
harness/power_loss.py: the broker is SIGKILLed and its data dir rolled back to what it
had fsynced, while ZooKeeper and the other brokers keep running.

Every run: three brokers, a topic of replication factor 3, the queue workload (acks=all),
the fault, a final read and the checker.

* Power loss of a follower, and of the leader, with ``min.insync.replicas=2`` and
  Kafka's default flush settings (never fsync): nothing acknowledged is lost, because
  every acknowledged record was on at least one other ISR member, which keeps it (or
  leads with it) while the power-cut broker comes back empty-handed and catches up.
* Last replica standing: both followers die, the ISR shrinks to the leader alone, and
  then the leader loses power too.

  - ``min.insync.replicas=2`` refuses ``acks=all`` writes while the leader is alone
    (NOT_ENOUGH_REPLICAS), so the leader acknowledges nothing alone. But it is still the
    only ISR member, so it is the one elected when it returns (unclean election is off),
    and the followers truncate to it. With ``flush.messages=1`` its log was fsynced
    before every acknowledgement and nothing is lost.
  - The same with the default flush settings loses what the leader had not fsynced,
    acknowledged when the ISR was whole: Kafka's own hole in ZooKeeper mode (KIP-966,
    fixed only in KRaft by Eligible Leader Replicas). The test shows the checker sees it.
  - The unsafe control, ``min.insync.replicas=1`` with unclean election: the lone leader
    acknowledges writes nobody else has, its power loss drops them.

docs/durability.md ("Power loss in a cluster") says what this means for users.
"""

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import WAIT
from harness.history import OK, History
from harness.nemesis import leader_of, wait_full_isr
from harness.power_loss import ENV, describe, power_loss, power_loss_bounce
from harness.scenario import run_scenario

TOPIC = "events"


@pytest.fixture
def journaled_cluster(fault_cluster, monkeypatch):
    """A fault cluster whose brokers keep the power-loss journal."""
    monkeypatch.setenv(ENV, "1")
    return fault_cluster


def _create_topic(cluster, *, min_isr, unclean=False, flush_messages=None):
    """Replication factor 3, led by the controller (it then stays up while the
    followers die, and moves the ISR itself)."""
    config = {"min.insync.replicas": str(min_isr),
              "unclean.leader.election.enable": "true" if unclean else "false"}
    if flush_messages is not None:
        config["flush.messages"] = str(flush_messages)
    lead = cluster.controller()
    ids = sorted(cluster.brokers)
    new = NewTopic(TOPIC, num_partitions=1, replication_factor=-1,
                   replica_assignment=[[lead] + [b for b in ids if b != lead]], config=config)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([new], request_timeout=WAIT)[TOPIC].result(timeout=WAIT)
    cluster.wait_for(lambda: leader_of(cluster, TOPIC) == lead, f"{TOPIC} led by {lead}")
    wait_full_isr(cluster, TOPIC)


def _assert_safe(outcome, losses, idempotent=True):
    print(outcome.describe())
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert all(stats["bytes"] > 0 for stats in losses), losses   # the cut lost data
    assert outcome.report.errors(() if idempotent else ("duplicate",)) == {}, \
        outcome.describe()


def _loss(outcome):
    """Acknowledged writes missing or overwritten: lost-write, unseen, or an offset
    acknowledged with one value and read with another."""
    errors = outcome.report.errors(allowed=("duplicate",))
    return sum(errors.get(name, 0) for name in ("lost-write", "unseen",
                                                 "inconsistent-offsets"))


# -- One broker loses power; the others had the data -----------------------------------------------

# The default run loses the follower; the leader's power loss (the same guarantee, through
# a failover) runs with --soak.
@pytest.mark.parametrize("role", ["follower", pytest.param("leader", marks=pytest.mark.soak)])
def test_power_loss_of_one_broker_loses_nothing_acknowledged(journaled_cluster, role):
    cluster = journaled_cluster()
    _create_topic(cluster, min_isr=2)
    losses = []

    def fault():
        leader = leader_of(cluster, TOPIC)
        followers = [b for b in cluster.brokers if b != leader]
        target = leader if role == "leader" else max(followers)
        return power_loss_bounce(cluster, target, TOPIC, losses)
    _assert_safe(run_scenario(cluster, TOPIC, [fault]), losses)


# -- Last replica standing ---------------------------------------------------------------------------

def _probe(cluster, attempts=5):
    """One acks=all send without retries: None if acknowledged, else the error code.
    A timeout is asked again: ZooKeeper may show the shrunk ISR before the leader has
    heard of it, and till then the leader waits for the dead followers."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "retries": 0, "enable.idempotence": False,
                         "message.timeout.ms": 20000, "request.timeout.ms": 5000})
    for _ in range(attempts):
        result = []
        producer.produce(TOPIC, b"probe", partition=0,
                         on_delivery=lambda err, _msg: result.append(err))
        producer.flush(WAIT)
        assert result, "the probe got no delivery report"
        if result[0] is None or result[0].code() != KafkaError.REQUEST_TIMED_OUT:
            break
    return None if result[0] is None else result[0].code()


def _last_replica_standing(cluster, history, notes, *, unclean):
    """Kill both followers, wait for the ISR to be the leader alone, probe, let the
    workload go on, cut the leader's power, restart the followers, then the leader."""
    leader = leader_of(cluster, TOPIC)
    followers = [b for b in cluster.brokers if b != leader]
    for b in followers:
        cluster[b].kill()
    cluster.wait_for(lambda: cluster.partition_state(TOPIC)["isr"] == [leader],
                     f"the ISR shrunk to {leader}")
    notes["probe"] = _probe(cluster)
    alone = len(history)
    cluster.wait_for(lambda: len(history) > alone + 200,
                     "the workload went on while the leader was alone in its ISR")
    notes["acked_alone"] = sum(op.f == "send" and op.type == OK
                               for op in history.ops()[alone:])
    notes["loss"] = power_loss(cluster, leader)
    for b in followers:
        cluster.wait_session_expired(b)
        cluster[b].start().wait_listening()
    cluster.wait_for(lambda: all(b in cluster.registered() for b in followers),
                     "the followers registered again")
    if unclean:
        cluster.wait_for(lambda: leader_of(cluster, TOPIC) in followers,
                         "a follower elected uncleanly")
    cluster.wait_session_expired(leader)
    cluster[leader].start().wait_listening()
    cluster.wait_for(lambda: leader in cluster.registered(), f"broker {leader} back")
    if not unclean:
        cluster.wait_for(lambda: leader_of(cluster, TOPIC) == leader,
                         f"the last ISR member {leader} leads again")
        wait_full_isr(cluster, TOPIC)
    return (f"followers {followers} killed, ISR=[{leader}], probe: {notes['probe']}, "
            f"{notes['acked_alone']} acknowledged while alone; "
            f"{describe(leader, notes['loss'])}; leader then {leader_of(cluster, TOPIC)}")


def _run_last_replica_standing(cluster, *, min_isr, unclean=False, flush_messages=None,
                               idempotent=True):
    _create_topic(cluster, min_isr=min_isr, unclean=unclean, flush_messages=flush_messages)
    history, notes = History(), {}
    fault = lambda: _last_replica_standing(cluster, history, notes, unclean=unclean)  # noqa
    outcome = run_scenario(cluster, TOPIC, [fault], history=history, idempotent=idempotent)
    print(outcome.describe())
    return outcome, notes


def test_last_replica_standing_with_min_isr_2_and_fsync_loses_nothing(journaled_cluster):
    cluster = journaled_cluster()
    outcome, notes = _run_last_replica_standing(cluster, min_isr=2, flush_messages=1)
    assert notes["probe"] == KafkaError.NOT_ENOUGH_REPLICAS, notes
    assert notes["acked_alone"] == 0, notes
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert outcome.report.errors() == {}, outcome.describe()


# The unsafe control below already shows the checker seeing this scenario's loss; this
# second control (Kafka's default flush, KIP-966's gap) runs with --soak.
@pytest.mark.soak
def test_last_replica_standing_with_default_flush_loses_what_it_had_not_fsynced(
        journaled_cluster):
    """KIP-966's case: nothing was acknowledged by the leader alone, yet records
    acknowledged while the ISR was whole were only in its page cache, and the followers
    that had them truncate to it when it comes back as the last ISR member."""
    cluster = journaled_cluster()
    outcome, notes = _run_last_replica_standing(cluster, min_isr=2, idempotent=False)
    assert notes["probe"] == KafkaError.NOT_ENOUGH_REPLICAS, notes
    assert notes["acked_alone"] == 0, notes
    assert notes["loss"]["bytes"] > 0, notes
    assert _loss(outcome) > 0, outcome.describe()


def test_last_replica_standing_unsafe_control_min_isr_1_loses_acknowledged_writes(
        journaled_cluster):
    cluster = journaled_cluster()
    # Without idempotence: librdkafka's idempotent producer fails fatally on the
    # sequence gap the unclean election opens.
    outcome, notes = _run_last_replica_standing(cluster, min_isr=1, unclean=True,
                                                idempotent=False)
    assert notes["probe"] is None, notes          # the lone leader acknowledges
    assert notes["acked_alone"] > 0, notes
    assert _loss(outcome) > 0, outcome.describe()
