"""The requests the active controller sends to brokers, built from its context
(context.py): LeaderAndIsr, UpdateMetadata and StopReplica in the layouts of the versions
a Kafka 3.9 ZooKeeper-mode controller sends (LeaderAndIsr v7, UpdateMetadata v8,
StopReplica v4), as dicts for the protocol codec. Nothing here talks to a broker:
state_changes.py sends them.
"""

from ..rules.partition_state import LEADER_DURING_DELETE

__all__ = ["leader_and_isr", "update_metadata", "stop_replica", "LEADER_AND_ISR_VERSION",
           "UPDATE_METADATA_VERSION", "STOP_REPLICA_VERSION"]

# WIRE: the versions a Kafka 3.9 ZooKeeper-mode controller sends (IBP >= 3.4).
LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4


def leader_and_isr(ctx, broker_id, tps, *, is_new=False):
    """LeaderAndIsr v7 telling ``broker_id`` the state of partitions ``tps`` (which it
    replicates), from the ControllerContext ``ctx``; live_leaders names the leaders at
    their inter-broker endpoint so a follower can reach them (a leader without that
    listener is left out, as Kafka's ``broker.node(interBrokerListenerName)`` finds
    none)."""
    by_topic = {}
    leaders = set()
    for tp in sorted(tps):
        st = ctx.states[tp]
        leaders.add(st.leader)
        by_topic.setdefault(tp[0], []).append({
            "partition_index": tp[1], "controller_epoch": st.controller_epoch,
            "leader": st.leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr),
            "partition_epoch": st.partition_epoch, "replicas": list(ctx.replicas(tp)),
            "adding_replicas": [], "removing_replicas": [], "is_new": is_new,
            "leader_recovery_state": 1 if st.recovering else 0})
    return {
        "controller_id": ctx.controller_id, "is_k_raft_controller": False,
        "controller_epoch": ctx.epoch, "broker_epoch": ctx.broker_epoch(broker_id),
        "type": 0,
        "topic_states": [{"topic_name": t, "topic_id": ctx.topic_ids.get(t),
                          "partition_states": ps} for t, ps in by_topic.items()],
        "live_leaders": [{"broker_id": b, "host_name": e.host, "port": e.port}
                         for b, e in ((b, ctx.broker_endpoint(b)) for b in sorted(leaders))
                         if e is not None]}


def update_metadata(ctx, broker_id, tps, *, deleting=()):
    """UpdateMetadata v8 for ``broker_id``: the live brokers, each with every endpoint it
    registered (listener name and security protocol id, so that brokers answer clients
    per listener), and the state of ``tps``; partitions of topics in ``deleting`` carry
    leader -2, which tells brokers to drop them from their metadata."""
    by_topic = {}
    for tp in sorted(tps):
        st = ctx.states.get(tp)
        if st is None:
            continue
        leader = LEADER_DURING_DELETE if tp[0] in deleting else st.leader
        by_topic.setdefault(tp[0], []).append({
            "partition_index": tp[1], "controller_epoch": st.controller_epoch,
            "leader": leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr),
            "zk_version": st.partition_epoch, "replicas": list(ctx.replicas(tp)),
            "offline_replicas": ctx.offline_replicas(tp)})
    return {
        "controller_id": ctx.controller_id, "is_k_raft_controller": False, "type": 0,
        "controller_epoch": ctx.epoch, "broker_epoch": ctx.broker_epoch(broker_id),
        "topic_states": [{"topic_name": t, "topic_id": ctx.topic_ids.get(t),
                          "partition_states": ps} for t, ps in by_topic.items()],
        "live_brokers": [{"id": b.broker_id, "rack": b.rack, "endpoints": [
            {"port": e.port, "host": e.host, "listener": e.listener_name,
             "security_protocol": int(e.protocol)} for e in b.endpoints]}
            for _, b in sorted(ctx.live_brokers.items())]}


def stop_replica(ctx, broker_id, tps, *, delete):
    """StopReplica v4 for ``broker_id``'s replicas ``tps``; with ``delete`` their logs go
    too (the leader epoch sent is then LEADER_DURING_DELETE, which skips the epoch check)."""
    by_topic = {}
    for tp in sorted(tps):
        st = ctx.states.get(tp)
        epoch = LEADER_DURING_DELETE if delete else (st.leader_epoch if st else -1)
        by_topic.setdefault(tp[0], []).append({
            "partition_index": tp[1], "leader_epoch": epoch, "delete_partition": delete})
    return {
        "controller_id": ctx.controller_id, "is_k_raft_controller": False,
        "controller_epoch": ctx.epoch, "broker_epoch": ctx.broker_epoch(broker_id),
        "topic_states": [{"topic_name": t, "partition_states": ps}
                         for t, ps in by_topic.items()]}
