"""The nemesis: the faults a scenario throws at a :class:`~.cluster.FaultCluster`, each
written as "do it, then wait until the cluster visibly reacted" (a new leader, an
expired session, a broker back in the ISR), so scenarios are driven by what the
cluster does and never by sleeps tuned to this machine.

Every function returns a short text for the scenario's log, and leaves the cluster with
every broker running and every link healed unless its name says otherwise.
"""

import os
import time

import pytest

from .cluster import WAIT, node

__all__ = ["leader_of", "leaders_of", "wait_leader_other_than", "wait_full_isr", "hard_bounce",
           "clean_shutdown", "hard_shutdown", "restart", "wait_acks",
           "clean_bounce", "kill_controller", "pause_past_session", "isolate_from_zookeeper",
           "restart_zookeeper", "partition_pair"]


def leader_of(cluster, topic, partition=0):
    state = cluster.partition_state(topic, partition)
    return state["leader"] if state else None


def wait_leader_other_than(cluster, topic, old, partition=0):
    return cluster.wait_for(
        lambda: (lambda l: l if l not in (None, -1, old) else None)(
            leader_of(cluster, topic, partition)),
        f"{topic}-{partition} led by a broker other than {old}")


def wait_full_isr(cluster, topic, partitions=1):
    everyone = sorted(cluster.brokers)
    for p in range(partitions):
        try:
            cluster.wait_for(
                lambda: (s := cluster.partition_state(topic, p)) is not None
                and sorted(s["isr"]) == everyone and s["leader"] in everyone,
                f"{topic}-{p} has every broker in its ISR", timeout=2 * WAIT)
        except pytest.fail.Exception as exc:   # cluster.wait_for gave up
            raise AssertionError(f"{exc}; its state: {cluster.partition_state(topic, p)}, "
                                 f"registered: {cluster.registered()}, controller: "
                                 f"{cluster.controller()}") from None


def leaders_of(cluster, topic, partitions=1):
    """{partition: leader} as ZooKeeper has it (None where unknown)."""
    return {p: leader_of(cluster, topic, p) for p in range(partitions)}


def _restart(cluster, broker_id):
    cluster[broker_id].start().wait_listening()
    cluster.wait_for(lambda: broker_id in cluster.registered(),
                     f"broker {broker_id} registered again")


def restart(cluster, broker_id, topic, partitions=1):
    """Start a stopped broker and wait for it back in every ISR of ``topic``."""
    _restart(cluster, broker_id)
    wait_full_isr(cluster, topic, partitions)
    return f"restart of broker {broker_id}"


def _wait_gone(cluster, broker_id, topic, partitions, was_controller):
    """After a broker stopped: another controller if it was the one, another leader
    for every partition it led, and it out of every ISR."""
    if was_controller:
        cluster.wait_for(lambda: cluster.controller() not in (None, broker_id),
                         f"a controller other than {broker_id}")
    for p in range(partitions):
        cluster.wait_for(
            lambda: (s := cluster.partition_state(topic, p)) is not None
            and s["leader"] not in (None, -1, broker_id) and broker_id not in s["isr"],
            f"{topic}-{p} led by another broker, {broker_id} out of its ISR")


def hard_shutdown(cluster, broker_id, topic, partitions=1):
    """SIGKILL, then wait for ZooKeeper to expire the session, for another controller
    (if it was the controller), another leader where it led and its removal from every
    ISR. The broker stays down."""
    was_controller = cluster.controller() == broker_id
    cluster[broker_id].kill()
    cluster.wait_session_expired(broker_id)
    _wait_gone(cluster, broker_id, topic, partitions, was_controller)
    return f"hard shutdown of broker {broker_id}"


def clean_shutdown(cluster, broker_id, topic, partitions=1):
    """SIGTERM (controlled shutdown moves leadership and ISR membership away first), then
    the same waits as :func:`hard_shutdown`. The broker stays down."""
    was_controller = cluster.controller() == broker_id
    code = cluster[broker_id].stop()
    assert code == 0, f"broker {broker_id} exited {code} on SIGTERM:\n{cluster[broker_id].log()}"
    _wait_gone(cluster, broker_id, topic, partitions, was_controller)
    return f"clean shutdown of broker {broker_id}"


def hard_bounce(cluster, broker_id, topic, partitions=1):
    """:func:`hard_shutdown`, restart, wait for it back in every ISR."""
    hard_shutdown(cluster, broker_id, topic, partitions)
    restart(cluster, broker_id, topic, partitions)
    return f"hard bounce of broker {broker_id}"


def clean_bounce(cluster, broker_id, topic, partitions=1):
    """:func:`clean_shutdown`, restart, wait for it back in every ISR."""
    clean_shutdown(cluster, broker_id, topic, partitions)
    restart(cluster, broker_id, topic, partitions)
    return f"clean bounce of broker {broker_id}"


def wait_acks(cluster, history, count):
    """Until ``count`` more sends were acknowledged than when called (the workload went
    on through the fault)."""
    def acked():
        return sum(op.f == "send" and op.type == "ok" for op in history.ops())
    start = acked()
    cluster.wait_for(lambda: acked() >= start + count, f"{count} more acknowledged sends")
    return f"{count} more sends acknowledged"


def kill_controller(cluster, topic):
    """SIGKILL the active controller, wait for another, restart the old one."""
    # The fault before may have moved the controller: /controller can be empty a moment.
    old = cluster.wait_for(cluster.controller, "an active controller")
    cluster[old].kill()
    cluster.wait_for(lambda: cluster.controller() not in (None, old),
                     f"a controller other than {old}")
    _restart(cluster, old)
    wait_full_isr(cluster, topic)
    return f"hard kill of controller {old}, then controller {cluster.controller()}"


def pause_past_session(cluster, broker_id, topic, *, settle=True):
    """SIGSTOP until ZooKeeper expired the broker's session, then SIGCONT; waits for it
    registered again and (with ``settle``) back in every ISR of ``topic``."""
    cluster[broker_id].pause()
    cluster.wait_session_expired(broker_id)
    time.sleep(0.5)
    cluster[broker_id].resume()
    cluster.wait_for(lambda: broker_id in cluster.registered(),
                     f"broker {broker_id} registered again after its pause")
    if settle:
        wait_full_isr(cluster, topic)
    return f"pause of broker {broker_id} past its session"


def isolate_from_zookeeper(cluster, broker_id, topic, *, settle=True):
    """Cut the broker from ZooKeeper until its session expires, then heal; waits as
    :func:`pause_past_session` does."""
    cluster.net.cut(node(broker_id), "zk")
    cluster.wait_session_expired(broker_id)
    cluster.net.heal(node(broker_id), "zk")
    cluster.wait_for(lambda: broker_id in cluster.registered(),
                     f"broker {broker_id} registered again after the cut")
    if settle:
        wait_full_isr(cluster, topic)
    return f"broker {broker_id} cut from ZooKeeper past its session"


def restart_zookeeper(cluster, topic, down_seconds=1.0):
    cluster.restart_zookeeper(down_seconds)
    cluster.wait_for(lambda: len(cluster.registered()) == len(cluster.brokers)
                     and cluster.controller() is not None,
                     "every broker registered after ZooKeeper came back")
    wait_full_isr(cluster, topic)
    return f"ZooKeeper restarted ({down_seconds} s down)"


def partition_pair(cluster, a, b, topic, partition=0, *, idle=None):
    """Cut brokers ``a`` and ``b`` from each other (both stay reachable from ZooKeeper
    and clients) until the partition's ISR changes or its leader moves, then heal.

    A follower cut from its leader leaves the ISR only once it is behind: one that has
    every record stays (Kafka's Replica.isCaughtUp: its end offset is the leader's), so
    an idle partition's ISR has no reason to change. With ``idle`` seconds, the cut
    also ends when the leader's log got no byte for that long since the cut; a write
    that reached it makes the ISR change due again."""
    before = cluster.partition_state(topic, partition)
    cluster.net.cut(node(a), node(b))
    cut_at = time.monotonic()
    leader_dir = cluster[before["leader"]].partition_dir(topic, partition)
    at_cut = _log_bytes(leader_dir)
    written = []

    def reacted():
        if cluster.partition_state(topic, partition) != before:
            return "changed"
        if not written and _log_bytes(leader_dir) != at_cut:
            written.append(time.monotonic() - cut_at)
        if idle is not None and not written and time.monotonic() - cut_at >= idle:
            return "idle"
        return None

    try:
        how = cluster.wait_for(reacted, f"{topic}-{partition}'s state changed while {a} and "
                                        f"{b} were cut apart")
    except pytest.fail.Exception as exc:
        seen = f"{written[0]:.1f} s after the cut" if written else "never"
        raise AssertionError(f"{exc}; the leader {before['leader']}'s log grew: {seen}; "
                             f"state {cluster.partition_state(topic, partition)}") from None
    cluster.net.heal(node(a), node(b))
    wait_full_isr(cluster, topic, partition + 1)
    if how == "idle":
        return (f"brokers {a} and {b} cut apart for {idle:g} s; the ISR of "
                f"{topic}-{partition} kept: no write reached its leader meanwhile")
    return f"brokers {a} and {b} cut apart until the ISR of {topic}-{partition} changed"


def _log_bytes(partition_dir):
    """The bytes of the partition's segment files in one broker's data dir."""
    total = 0
    try:
        names = os.listdir(partition_dir)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith(".log"):
            try:
                total += os.path.getsize(os.path.join(partition_dir, name))
            except FileNotFoundError:
                pass    # deleted (retention, compaction) since the listing
    return total
