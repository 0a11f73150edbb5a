"""KIP-101 scenario 2 (AT-17; Kafka's ``EpochDrivenReplicationProtocolAcceptanceTest.
shouldNotAllowDivergentLogs``): both replicas lose power at once and come back with
different suffixes of the log; the one back first leads and writes new records at
offsets the other still holds with other records. Before KIP-101 the other one, on its
return, truncated to its own high watermark, which lay above the point where the logs
parted, so the two replicas kept different records at the same offsets for good.
kqlite's follower truncates by leader epoch (``kqlite/cluster/rules/truncation.py``): the
leader's epoch cache says where its epoch of the follower's latest batch ends, and the
follower cuts there.

The run: two brokers keeping the power-loss journal (``harness/power_loss.py``), a
topic of replication factor 2 with ``min.insync.replicas=1``, the queue workload
(``acks=all``, no idempotence: librdkafka's idempotent producer fails fatally on the
sequence gap a lost tail opens), ``replication-offset-checkpoint`` written every second.

1. The topic starts with ``flush.messages=1``: what is written now is fsynced on both
   replicas (the common prefix, Kafka's test's first messages).
2. ``flush.messages`` goes to "never" (Kafka's default) and the workload goes on.
3. Power cut of both brokers at once: both SIGKILLed, then the leader's data dir rolled
   back to what it had fsynced (the prefix of step 1). The follower keeps everything
   it had: it stands for a broker that fsyncs every append. ``flush.messages`` is a
   topic config and ``kqlite serve`` has no broker-wide ``log.flush.interval.messages``
   (Kafka's test sets it per broker), so instead of a different setting its rollback is
   the empty one: a SIGKILL leaves exactly what ``flush.messages=1`` would have made
   durable. The test asserts that the leader came back with the shorter log.
4. Both ZooKeeper sessions expire; the old leader starts alone. It is still the leader
   and in the ISR in ZooKeeper (no controller was alive to change it), so it leads
   without an unclean election, and acknowledges new records at offsets the follower
   holds with old ones.
5. The follower starts and rejoins the ISR.

Pass: the two replicas' logs become identical (the same batches, compared by base
offset, last offset, leader epoch and CRC, as Kafka's test compares its batch-CRC
sequences, and the same value at every offset); the checker, given every record
acknowledged after the leader's return, the final read through a client and a read of
each replica's log, reports no anomaly (no ``inconsistent-offsets``; duplicates are
allowed without idempotence), so every record acknowledged after the restart is there.
Records acknowledged before the power cut and not fsynced by the leader may be lost,
and are (the test prints how many, and checks that the fsynced prefix survives): the
leader returns without them and, still in the ISR, leads; the follower that kept them
truncates to it. A power cut of every replica at once with Kafka's default flush
settings loses what was not fsynced, in Kafka as here (``docs/durability.md``, "Every
replica at once"); what KIP-101 guarantees is that the replicas then agree.

Unsafe control. kqlite cannot truncate by high watermark (and should not), so the
control replays that rule on a copy of the follower's partition as it was before it
rejoined: cut at its checkpointed high watermark, followed by the leader's records from
there, it holds old records at offsets where the leader holds new ones, and the checker,
given reads of the leader's log and of that log, reports ``inconsistent-offsets``. The
same copy cut where the leader-epoch rule says (``truncation_offset`` with the leader's
``leader_epoch_end`` for the follower's latest epoch) reports none.

Once; three independent runs with ``--soak``.
"""

import itertools
import os
import time

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

from harness.checker import check
from harness.cluster import WAIT, FaultCluster
from harness.history import INVOKE, OK, History, Op
from harness.nemesis import leader_of, wait_acks, wait_full_isr
from harness.power_loss import ENV, describe, journal_dir_of, replay
from harness.replica_logs import checkpointed_high_watermark, copy_partition
from harness.scenario import run_scenario
from harness.workload import key_of
from kqlite.cluster.rules.truncation import leader_epoch_end, truncation_offset
from kqlite.cluster.zookeeper.process import ZooKeeperUnavailable, find_zookeeper
from kqlite.format.batch import parse_header
from kqlite.storage import Isolation
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.leader_epoch import LeaderEpochCache
from kqlite.storage.log import Log

TOPIC = "divergence"
LEADER, FOLLOWER = 1, 2
FINAL_READ = 999                     # run_scenario's final-read process
NEVER = str(2 ** 63 - 1)             # flush.messages: Kafka's default, never fsync
FSYNCED_ACKS = 100                   # acknowledged while every append is fsynced
UNSYNCED_ACKS = 1000                 # then without fsync: more than a checkpoint interval
ALONE_ACKS = 200                     # by the restarted leader before the follower returns


def _read_log(copy):
    """{"end", "records": [(offset, value)], "batches": [(base, last, epoch, crc)]} of
    the log at ``copy`` (a copy: opening it recovers it as the broker would)."""
    log = Log.open(copy, create=False)
    try:
        batches, offset, end = [], log.start_offset, log.end_offset
        while offset < end:
            data = log.read_batches(offset, isolation=Isolation.LOG_END)
            pos = 0
            while pos < len(data):
                h = parse_header(data, pos)
                batches.append((h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc))
                pos += h.size
            offset = batches[-1][1] + 1
        return {"end": end, "batches": batches,
                "records": [(r.offset, r.value.decode())
                            for r in log.read(isolation=Isolation.LOG_END)]}
    finally:
        log.close()


def _create_topic(cluster):
    config = {"min.insync.replicas": "1", "unclean.leader.election.enable": "false",
              "flush.messages": "1"}
    new = NewTopic(TOPIC, num_partitions=1, replication_factor=-1,
                   replica_assignment=[[LEADER, FOLLOWER]], config=config)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([new], request_timeout=WAIT)[TOPIC].result(timeout=WAIT)
    cluster.wait_for(lambda: leader_of(cluster, TOPIC) == LEADER, f"{TOPIC} led by {LEADER}")
    wait_full_isr(cluster, TOPIC)


def _stop_fsync(cluster):
    resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("flush.messages", NEVER, incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout=WAIT)


def _double_power_loss(cluster, history, notes, workdir):
    """Steps 1 to 5 of the module docstring; ``notes`` gets what the tests check."""
    began = time.monotonic()
    phases = notes["phases"] = []

    def phase(name):
        phases.append((name, round(time.monotonic() - began, 1)))
    wait_acks(cluster, history, FSYNCED_ACKS)
    phase("fsynced")
    _stop_fsync(cluster)
    wait_acks(cluster, history, UNSYNCED_ACKS)
    phase("unsynced")
    leader, follower = cluster[LEADER], cluster[FOLLOWER]
    journal = journal_dir_of(leader.data_dir)
    assert leader.alive and os.path.isdir(journal), \
        f"broker {LEADER} is not running with a power-loss journal"
    leader.kill()
    follower.kill()
    notes["crash_index"] = len(history)
    notes["loss"] = replay(journal)
    notes["leader_end"] = _read_log(copy_partition(
        leader.partition_dir(TOPIC), os.path.join(workdir, "leader-after-power-loss")))["end"]
    notes["follower_copy"] = copy_partition(
        follower.partition_dir(TOPIC), os.path.join(workdir, "follower-before-rejoin"))
    notes["follower_end"] = _read_log(copy_partition(
        notes["follower_copy"], os.path.join(workdir, "follower-end")))["end"]
    notes["follower_hw"] = checkpointed_high_watermark(follower.data_dir, TOPIC) or 0
    phase("power cut")
    cluster.wait_session_expired(LEADER)
    cluster.wait_session_expired(FOLLOWER)
    phase("sessions expired")
    # Every acknowledgement from here on comes from the restarted leader: both brokers
    # were down for a whole session timeout, far longer than a delivery report's delay.
    notes["restart_index"] = len(history)
    leader.start().wait_listening()
    phase("leader listening")
    wait_acks(cluster, history, ALONE_ACKS)
    phase("leader acknowledged alone")
    follower.start().wait_listening()
    phase("follower listening")
    wait_full_isr(cluster, TOPIC)
    phase("ISR full")
    return (f"{describe(LEADER, notes['loss'])}, broker {FOLLOWER} SIGKILLed at once: "
            f"log ends {notes['leader_end']} and {notes['follower_end']}; broker {LEADER} "
            f"led alone, then broker {FOLLOWER} rejoined")


def _settled_replicas(cluster, workdir):
    """Reads of both replicas' logs, once they are identical (the follower caught up
    with a stopped workload), or the last ones read when WAIT ran out."""
    counter = itertools.count()
    deadline = time.monotonic() + WAIT
    while True:
        n = next(counter)
        views = {b: _read_log(copy_partition(cluster[b].partition_dir(TOPIC),
                                             os.path.join(workdir, f"final-{n}-{b}")))
                 for b in (LEADER, FOLLOWER)}
        views["leader_copy"] = os.path.join(workdir, f"final-{n}-{LEADER}", f"{TOPIC}-0")
        if views[LEADER]["batches"] == views[FOLLOWER]["batches"] or \
                time.monotonic() > deadline:
            return views
        time.sleep(0.5)


@pytest.fixture(scope="module", params=[1, pytest.param(2, marks=pytest.mark.soak),
                                        pytest.param(3, marks=pytest.mark.soak)],
                ids=lambda run: f"run{run}")
def scenario_2(tmp_path_factory):
    try:
        find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    workdir = tmp_path_factory.mktemp("kip101-divergence")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, "1")
        cluster = FaultCluster(workdir / "cluster", 2, broker_options=[
            "--replica-high-watermark-checkpoint-interval-ms", "1000"]).start()
        try:
            _create_topic(cluster)
            history, notes = History(), {}
            fault = lambda: _double_power_loss(cluster, history, notes, str(workdir))  # noqa
            outcome = run_scenario(cluster, TOPIC, [fault], history=history,
                                   idempotent=False, consumers=0, quiet=1.5)
            views = _settled_replicas(cluster, str(workdir))
        except BaseException:
            print(cluster.logs())
            cluster.stop()
            raise
        logs = cluster.logs()
        cluster.stop()
    return outcome, notes, views, logs


def _assign_and_poll(process, pairs):
    key = key_of(TOPIC, 0)
    return [(process, INVOKE, "assign", [key]), (process, OK, "assign", [key]),
            (process, INVOKE, "poll", None), (process, OK, "poll", {key: pairs})]


def _check(entries):
    """The checker's report on ``entries`` ((process, type, f, value) in order)."""
    return check([Op(p, t, f, v, index=i) for i, (p, t, f, v) in enumerate(entries)])


def _first_difference(a, b):
    for x, y in itertools.zip_longest(a, b):
        if x != y:
            return x, y
    return None


def test_double_power_loss_leaves_identical_replicas_and_loses_nothing_acked_after(
        scenario_2):
    outcome, notes, views, logs = scenario_2
    print(outcome.describe())
    print("phases (s since the fault began):", notes["phases"])
    ops = outcome.history.ops()
    leader_end, follower_end = notes["leader_end"], notes["follower_end"]
    assert notes["loss"]["bytes"] > 0, notes["loss"]
    assert leader_end < follower_end, (
        f"the leader came back with {leader_end} records, the follower with "
        f"{follower_end}: the leader must return shorter for the scenario to happen")
    after = [op for op in ops[notes["restart_index"]:] if op.f == "send" and op.type == OK]
    reused = sorted(op.value[2] for op in after if leader_end <= op.value[2] < follower_end)
    assert reused, (f"no record acknowledged after the restart at an offset in "
                    f"[{leader_end}, {follower_end}) the follower already held")

    lead, follow = views[LEADER], views[FOLLOWER]
    assert lead["batches"] == follow["batches"], (
        f"the replicas' batches differ (base, last, epoch, crc) first at "
        f"{_first_difference(lead['batches'], follow['batches'])}; ends {lead['end']} "
        f"and {follow['end']}\n{logs}")
    assert lead["records"] == follow["records"], \
        _first_difference(lead["records"], follow["records"])

    acked_after = {op.value[1] for op in after}
    entries = [(op.process, op.type, op.f, op.value) for op in ops
               if op.f == "send" and op.type == INVOKE and op.value[1] in acked_after]
    entries += [(op.process, op.type, op.f, op.value) for op in after]
    entries += [(op.process, op.type, op.f, op.value) for op in ops if op.process == FINAL_READ]
    entries += _assign_and_poll(1001, lead["records"])
    entries += _assign_and_poll(1002, follow["records"])
    report = _check(entries)
    print("acknowledged after the restart, final read and both replicas:", report.summary())
    assert report.acknowledged == len(after) > 0
    assert report.counts()["inconsistent-offsets"] == 0, \
        report.anomalies["inconsistent-offsets"][:10]
    assert report.errors(allowed=("duplicate",)) == {}, report.summary()

    kept = {value for _offset, value in lead["records"]}
    before = [op for op in ops[:notes["crash_index"]] if op.f == "send" and op.type == OK]
    lost = [op.value[1:] for op in before if op.value[1] not in kept]
    print(f"acknowledged before the power cut: {len(before)}, of which lost: {len(lost)} "
          f"(every one at or past offset {leader_end}: "
          f"{all(offset >= leader_end for _v, offset in lost)}); acknowledged after the "
          f"restart: {len(after)}, {len(reused)} of them at offsets the follower held; "
          f"log ends at the power cut: leader {leader_end}, follower {follower_end}; "
          f"final log end {lead['end']} on both")
    # What the leader had fsynced (while flush.messages was 1) survives.
    assert all(offset >= leader_end for _value, offset in lost), lost[:10]


def _follower_cut_then_leader(notes, cut, leader_records, into):
    """The follower's log as it was before it rejoined, cut at ``cut``, followed by the
    leader's records from ``cut`` on: what a follower truncating there ends up with."""
    kept = [pair for pair in _read_log(copy_partition(notes["follower_copy"], into))["records"]
            if pair[0] < cut]
    return kept + [pair for pair in leader_records if pair[0] >= cut]


def test_unsafe_control_truncation_by_high_watermark_leaves_divergent_logs(
        scenario_2, tmp_path):
    outcome, notes, views, _logs = scenario_2
    hw, leader_end = notes["follower_hw"], notes["leader_end"]
    assert hw > leader_end, (
        f"the follower's checkpointed high watermark {hw} is not above the leader's log end "
        f"{leader_end} after the power cut: a truncation by high watermark would not diverge")
    leader_records = views[LEADER]["records"]

    follower_epochs = LeaderEpochCache(DEFAULT_FS, notes["follower_copy"])
    leader_epochs = LeaderEpochCache(DEFAULT_FS, views["leader_copy"])
    answer = leader_epoch_end(leader_epochs, follower_epochs.latest_epoch,
                              views[LEADER]["end"])
    cut = truncation_offset(follower_epochs, answer, notes["follower_end"], hw)
    assert cut.complete, cut
    by_epoch = _follower_cut_then_leader(notes, cut.offset, leader_records,
                                         str(tmp_path / "by-epoch"))
    by_hw = _follower_cut_then_leader(notes, hw, leader_records, str(tmp_path / "by-hw"))

    leader_read = _assign_and_poll(1001, leader_records)
    epoch_report = _check(leader_read + _assign_and_poll(1002, by_epoch))
    hw_report = _check(leader_read + _assign_and_poll(1002, by_hw))
    print(f"follower's latest epoch {follower_epochs.latest_epoch}, leader's answer "
          f"{answer}: truncated by leader epoch at {cut.offset} -> {epoch_report.summary()}")
    print(f"truncated by high watermark at {hw} -> {hw_report.summary()}")
    assert hw_report.counts()["inconsistent-offsets"] > 0, hw_report.summary()
    assert epoch_report.counts()["inconsistent-offsets"] == 0, \
        epoch_report.anomalies["inconsistent-offsets"][:10]
