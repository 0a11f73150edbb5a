"""KIP-101 scenario 1 (AT-16): a follower restarts with a high watermark behind its log
end, then the leader dies at once. Before KIP-101 the follower truncated to its own
high watermark when it restarted, so records every replica had, acknowledged to
producers, were cut from it; becoming leader, it made everyone else truncate to match.
kqlite's follower truncates by leader epoch (``kqlite/cluster/rules/truncation.py``): it
keeps its log and lets the leader's epoch say where the logs part.

The run: two brokers, a topic of replication factor 2 with ``min.insync.replicas=1``
and ``acks=all`` (KIP-101's and Kafka's ``shouldSurviveFastLeaderChange`` setting), the
queue workload running. The follower is SIGKILLed; its high watermark is the one
``replication-offset-checkpoint`` last recorded (written every second here, so it lags
the log end by up to a second of writes, where the broker restarts from). It restarts
and rejoins the ISR; the leader is SIGKILLed at once, so the follower leads; the old
leader restarts and rejoins. Once (five times with ``--soak``).

Pass: no anomaly, and the follower's data dir at its crash really held acknowledged
records past its checkpointed high watermark (the scenario happened: a truncation by
high watermark would have cut them).

Unsafe control. kqlite has no way to truncate by high watermark (and should not), so
the control replays that rule on a copy of the follower's partition as it was at its
crash: cut at the checkpointed high watermark, it misses acknowledged records, and the
checker, given the acknowledged sends of the run up to the crash and a read of the cut
copy, reports them (``unseen``). The same copy cut where the leader-epoch rule says
(``truncation_offset`` with the leader's answer for the follower's latest epoch, read
from the leader's leader-epoch cache at that moment) keeps every one of them.

Scenario 2 (divergence after both replicas lose unflushed data: the leader returns
shorter and writes new records at offsets the follower still holds) is
``test_kip101_divergence.py``, with the same kind of control.
"""

import os

import pytest

from harness.cluster import FaultCluster
from harness.checker import check
from harness.history import INVOKE, OK, History, Op
from harness.nemesis import leader_of, wait_full_isr
from harness.replica_logs import checkpointed_high_watermark, copy_partition
from harness.scenario import create_topic, run_scenario
from harness.workload import key_of
from kqlite.cluster.rules.truncation import leader_epoch_end, truncation_offset
from kqlite.cluster.zookeeper.process import ZooKeeperUnavailable, find_zookeeper
from kqlite.storage import Isolation
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.leader_epoch import LeaderEpochCache
from kqlite.storage.log import Log

TOPIC = "kip101"
LEADER, FOLLOWER = 1, 2


def _crash_follower_then_leader(cluster, history, snapshots, workdir):
    """One round: SIGKILL the follower, keep a copy of its partition (and of the
    leader's, for its epoch cache) as they were, restart it, and once it is back in the
    ISR kill the leader at once; restart the old leader."""
    leader = leader_of(cluster, TOPIC)
    follower = next(b for b in cluster.brokers if b != leader)
    cluster[follower].kill()
    round_dir = os.path.join(workdir, f"round-{len(snapshots)}")
    snapshots.append({
        "acked_before": len(history),
        "follower": copy_partition(cluster[follower].partition_dir(TOPIC),
                                   os.path.join(round_dir, "follower")),
        "hw": checkpointed_high_watermark(cluster[follower].data_dir, TOPIC) or 0,
        "leader": copy_partition(cluster[leader].partition_dir(TOPIC),
                                 os.path.join(round_dir, "leader"))})
    cluster.wait_session_expired(follower)
    cluster[follower].start().wait_listening()
    wait_full_isr(cluster, TOPIC)
    cluster[leader].kill()
    cluster.wait_session_expired(leader)
    cluster.wait_for(lambda: leader_of(cluster, TOPIC) == follower,
                     f"the restarted follower {follower} leads")
    cluster[leader].start().wait_listening()
    wait_full_isr(cluster, TOPIC)
    return f"follower {follower} killed and restarted, then leader {leader} killed at once"


@pytest.fixture(scope="module")
def scenario_1(tmp_path_factory, request):
    try:
        find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    workdir = tmp_path_factory.mktemp("kip101")
    cluster = FaultCluster(workdir / "cluster", 2, broker_options=[
        "--replica-high-watermark-checkpoint-interval-ms", "1000"]).start()
    try:
        create_topic(cluster, TOPIC, min_isr=1, leaders=[LEADER])
        history, snapshots = History(), []
        rounds = 5 if request.config.getoption("--soak") else 1
        fault = lambda: _crash_follower_then_leader(cluster, history, snapshots,  # noqa
                                                    str(workdir))
        outcome = run_scenario(cluster, TOPIC, [fault] * rounds, history=history, quiet=1.5)
    except BaseException:
        print(cluster.logs())
        cluster.stop()
        raise
    cluster.stop()
    return outcome, snapshots


def _log_end(copy):
    log = Log.open(copy, create=False)
    try:
        return log.end_offset
    finally:
        log.close()


def _acked_before(outcome, snapshot):
    """(value, offset) of the sends acknowledged before the follower's crash."""
    return [(op.value[1], op.value[2]) for op in outcome.history.ops()[:snapshot["acked_before"]]
            if op.f == "send" and op.type == OK]


def test_follower_restart_then_leader_death_loses_nothing(scenario_1):
    outcome, snapshots = scenario_1
    print(outcome.describe())
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert outcome.report.errors() == {}, outcome.describe()
    first = snapshots[0]
    beyond_hw = [v for v, offset in _acked_before(outcome, first) if offset >= first["hw"]]
    assert beyond_hw, (f"no acknowledged record past the follower's checkpointed high "
                       f"watermark {first['hw']}: the scenario did not happen")
    print(f"acknowledged records past the follower's high watermark at its crash: "
          f"{len(beyond_hw)} (high watermark {first['hw']}, log end "
          f"{_log_end(first['follower'])})")


def _read_after_truncation(snapshot, offset, history_ops):
    """The checker's report on the sends acknowledged before the crash and a final read
    of the follower's copy cut at ``offset``."""
    log = Log.open(snapshot["follower"], create=False)
    try:
        log.truncate_to(offset)
        kept = [(r.offset, r.value.decode()) for r in log.read(isolation=Isolation.LOG_END)]
    finally:
        log.close()
    key = key_of(TOPIC, 0)
    ops = [op for op in history_ops[:snapshot["acked_before"]] if op.f == "send"]
    n = len(ops)
    ops += [Op(999, INVOKE, "assign", [key], index=n), Op(999, OK, "assign", [key], index=n + 1),
            Op(999, INVOKE, "poll", None, index=n + 2),
            Op(999, OK, "poll", {key: kept}, index=n + 3)]
    return check(ops)


def test_unsafe_control_truncation_by_high_watermark_loses_acknowledged_writes(
        scenario_1, tmp_path):
    outcome, snapshots = scenario_1
    snapshot = snapshots[0]
    ops = outcome.history.ops()
    # The leader-epoch rule on a copy: the leader's answer for the follower's latest
    # epoch, from the leader's epoch cache and log end at the follower's crash.
    by_epoch = dict(snapshot, follower=copy_partition(snapshot["follower"],
                                                      str(tmp_path / "by-epoch")))
    follower_epochs = LeaderEpochCache(DEFAULT_FS, by_epoch["follower"])
    leader_epochs = LeaderEpochCache(DEFAULT_FS, snapshot["leader"])
    answer = leader_epoch_end(leader_epochs, follower_epochs.latest_epoch,
                              _log_end(snapshot["leader"]))
    cut = truncation_offset(follower_epochs, answer, _log_end(by_epoch["follower"]),
                            snapshot["hw"])
    by_leader_epoch = _read_after_truncation(by_epoch, cut.offset, ops)
    print("truncated by leader epoch at", cut, "->", by_leader_epoch.summary())
    by_hw = _read_after_truncation(snapshot, snapshot["hw"], ops)
    print("truncated by high watermark at", snapshot["hw"], "->", by_hw.summary())
    lost = by_hw.counts()["unseen"] + by_hw.counts()["lost-write"]
    assert lost > 0, by_hw.summary()
    assert by_leader_epoch.counts()["unseen"] + by_leader_epoch.counts()["lost-write"] == 0, \
        by_leader_epoch.summary()
