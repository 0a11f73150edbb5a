"""What the active controller does for each event (Kafka's KafkaController ``process*``).

Every function runs in the controller's event task, one at a time, with ``c`` the
Controller and ``c.context`` its cache of the cluster. ZooKeeper writes go through
``c.zk(...)`` (the ZooKeeper thread), fenced by ``c.context.epoch_zk_version``; a fence
failure raises ControllerMovedError, which makes the controller resign. What a change
writes and sends, and in which order, is state_changes.py's.
"""

import asyncio
import logging
import uuid

from ...protocol import ApiKey, ErrorCode
from ..rules import election
from .requests import (LEADER_AND_ISR_VERSION, STOP_REPLICA_VERSION, leader_and_isr,
                       stop_replica)
from .state_changes import (broadcast_metadata, elect_where_needed, send, send_leader_and_isr,
                            update_channels, write_state)

__all__ = ["HANDLERS", "on_failover", "not_active"]

log = logging.getLogger("kqlite.cluster.controller")


# ---- failover --------------------------------------------------------------------------

async def on_failover(c):
    """Just elected: watch, read the cluster, tell every broker, elect missing leaders."""
    ctx = c.context
    store = c.store
    ctx.live_brokers = await c.zk(store.brokers, c.watcher("broker_change"))
    update_channels(c, ctx.live_brokers)
    topics = await c.zk(store.topics, c.watcher("topic_change"))
    for topic in topics:
        await _load_topic(c, topic)
    # Brokers learn the live set before any LeaderAndIsr (Kafka's onControllerFailover).
    broadcast_metadata(c, [])
    # Replicas that died while there was no controller leave their ISRs now (Kafka's
    # replica state machine starts them as OfflineReplica).
    offline = {r for tp in ctx.partitions() for r in ctx.replicas(tp)} - ctx.live_ids
    if offline:
        await _on_brokers_failed(c, offline)
    await elect_where_needed(c, list(ctx.partitions()), is_new=False, announce_all=True)
    await topic_deletion(c)


async def _load_topic(c, topic):
    ctx = c.context
    assignment = await c.zk(c.store.topic_assignment, topic,
                            c.watcher("partition_modification", topic))
    if assignment.topic_id is None:
        # Topics created by tools that do not set an id get one (Kafka's processTopicIds).
        assignment = assignment._replace(topic_id=uuid.uuid4())
        await c.zk(c.store.set_topic_assignment, topic, assignment, ctx.epoch_zk_version)
    ctx.assignments[topic] = dict(assignment.partitions)
    ctx.topic_ids[topic] = assignment.topic_id
    config = await c.zk(c.store.topic_config, topic)
    if config.get("unclean.leader.election.enable", "false").lower() == "true":
        ctx.unclean_topics.add(topic)
    else:
        ctx.unclean_topics.discard(topic)
    for p in assignment.partitions:
        state = await c.zk(c.store.partition_state, topic, p)
        if state is not None:
            ctx.states[(topic, p)] = state


# ---- brokers -------------------------------------------------------------------------------

async def broker_change(c):
    ctx = c.context
    now = await c.zk(c.store.brokers, c.watcher("broker_change"))
    known = ctx.live_brokers
    new = {b for b in now if b not in known}
    dead = {b for b in known if b not in now}
    bounced = {b for b in now if b in known and now[b].epoch > known[b].epoch}
    if not (new or dead or bounced):
        return
    log.info("controller: brokers new %s, dead %s, bounced %s", sorted(new), sorted(dead),
             sorted(bounced))
    ctx.live_brokers = {b: i for b, i in now.items() if b not in bounced}
    ctx.shutting_down -= dead | bounced
    if dead | bounced:
        await _on_brokers_failed(c, dead | bounced)
    ctx.live_brokers = now
    update_channels(c, now)
    if new | bounced:
        await _on_brokers_started(c, new | bounced)


async def _on_brokers_failed(c, failed):
    """Leaders on failed brokers are replaced; failed replicas leave the ISRs."""
    ctx = c.context
    changed = []
    for tp, state in sorted(ctx.states.items()):
        if tp[0] in ctx.topics_being_deleted or not failed & set(ctx.replicas(tp)):
            continue
        # Kafka's two transitions: the partition goes offline and is re-elected from its
        # live ISR; then each failed replica leaves the ISR (leader -1 if it still leads,
        # the last member always stays). Each change bumps the leader epoch.
        new = state
        if state.leader in failed:
            new = election.elect_offline(ctx.replicas(tp), state, ctx.live_ids, ctx.epoch,
                                         unclean=tp[0] in ctx.unclean_topics) or state
        for b in sorted(failed):
            new = election.remove_replica(new, b, ctx.epoch) or new
        if new is not state and await write_state(c, tp, new):
            changed.append(tp)
    send_leader_and_isr(c, changed)
    broadcast_metadata(c, list(ctx.partitions()))


async def _on_brokers_started(c, started):
    """New brokers learn everything, their replicas hear their leaders, and partitions
    that had no leader get one if a started broker can lead."""
    ctx = c.context
    # Every other broker learns the new live set (Kafka's onBrokerStartup sends them an
    # UpdateMetadata without partitions), the new ones everything.
    broadcast_metadata(c, [], to=set(ctx.live_brokers) - set(started))
    broadcast_metadata(c, list(ctx.partitions()), to=started)
    theirs = [tp for tp in ctx.partitions() if started & set(ctx.replicas(tp))]
    by_broker = {}
    for tp in theirs:
        for b in ctx.replicas(tp):
            if b in started and tp in ctx.states:
                by_broker.setdefault(b, []).append(tp)
    for b, tps in sorted(by_broker.items()):
        send(c, b, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, leader_and_isr(ctx, b, tps))
    leaderless = [tp for tp in ctx.partitions()
                  if tp not in ctx.states or ctx.states[tp].leader not in ctx.live_brokers]
    if leaderless:
        await elect_where_needed(c, leaderless, is_new=False)
    if ctx.topics_being_deleted:
        await topic_deletion(c)


# ---- topics ------------------------------------------------------------------------------

async def topic_change(c):
    ctx = c.context
    topics = set(await c.zk(c.store.topics, c.watcher("topic_change")))
    added = sorted(topics - set(ctx.assignments))
    for topic in sorted(set(ctx.assignments) - topics):
        _forget_topic(ctx, topic)
    for topic in added:
        await _load_topic(c, topic)
    if added:
        await elect_where_needed(c, list(ctx.partitions(added)), is_new=True)


async def partition_modification(c, topic):
    """A topic's assignment changed (partitions added by CreatePartitions)."""
    ctx = c.context
    if topic not in ctx.assignments:
        return
    try:
        assignment = await c.zk(c.store.topic_assignment, topic,
                                c.watcher("partition_modification", topic))
    except Exception:
        return   # deleted meanwhile: topic_change handles it
    added = [(topic, p) for p in assignment.partitions if p not in ctx.assignments[topic]]
    ctx.assignments[topic] = dict(assignment.partitions)
    if added:
        await elect_where_needed(c, added, is_new=True)


def _forget_topic(ctx, topic):
    ctx.assignments.pop(topic, None)
    ctx.topic_ids.pop(topic, None)
    ctx.unclean_topics.discard(topic)
    ctx.topics_being_deleted.discard(topic)
    for tp in [tp for tp in ctx.states if tp[0] == topic]:
        del ctx.states[tp]


async def topic_deletion(c):
    """Topics marked under /admin/delete_topics: brokers drop them from metadata, every
    replica deletes its log (StopReplica with delete), then the znodes go. A topic with an
    offline replica waits until that broker is back, as in Kafka."""
    ctx = c.context
    marked = await c.zk(c.store.topics_marked_for_deletion, c.watcher("topic_deletion"))
    for topic in marked:
        if topic not in ctx.assignments:
            await c.zk(c.store.delete_topic_znodes, topic, ctx.epoch_zk_version)
            continue
        ctx.topics_being_deleted.add(topic)
        tps = list(ctx.partitions([topic]))
        broadcast_metadata(c, tps, deleting={topic})
        replicas = {r for tp in tps for r in ctx.replicas(tp)}
        if not replicas <= ctx.live_ids:
            log.info("controller: deletion of %s waits for brokers %s", topic,
                     sorted(replicas - ctx.live_ids))
            continue
        pending = []
        for r in sorted(replicas):
            mine = [tp for tp in tps if r in ctx.replicas(tp)]
            pending.append(send(c, r, ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION,
                                stop_replica(ctx, r, mine, delete=True)))
        # Replies arrive on the broker channels; waiting here keeps deletion ordered
        # with later events for the same topic (a re-creation must not race it).
        results = await asyncio.gather(*pending, return_exceptions=True)
        if any(isinstance(r, BaseException) or r.get("error_code") for r in results):
            log.warning("controller: deletion of %s: a replica did not confirm; retrying "
                        "when brokers change", topic)
            continue
        await c.zk(c.store.delete_topic_znodes, topic, ctx.epoch_zk_version)
        _forget_topic(ctx, topic)
        log.info("controller: topic %s deleted", topic)


# ---- requests from brokers -------------------------------------------------------------

def not_active(kind, payload):
    """Requests reaching a broker that is not the controller (Kafka: NOT_CONTROLLER, or
    STALE_CONTROLLER_EPOCH for ControlledShutdown)."""
    code = ErrorCode.STALE_CONTROLLER_EPOCH if kind == "controlled_shutdown" \
        else ErrorCode.NOT_CONTROLLER
    for item in payload:
        if isinstance(item, asyncio.Future) and not item.done():
            item.set_result({"error_code": code})


async def controlled_shutdown(c, broker_id, broker_epoch, future):
    """A broker shutting down cleanly: move leadership of its partitions elsewhere and
    take it out of ISRs; answer with the partitions it still leads."""
    ctx = c.context
    if broker_id not in ctx.live_brokers:
        future.set_result({"error_code": ErrorCode.BROKER_NOT_AVAILABLE,
                           "remaining_partitions": []})
        return
    if broker_epoch != -1 and broker_epoch < ctx.broker_epoch(broker_id):
        future.set_result({"error_code": ErrorCode.STALE_BROKER_EPOCH,
                           "remaining_partitions": []})
        return
    ctx.shutting_down.add(broker_id)
    led, followed = [], []
    for tp, state in sorted(ctx.states.items()):
        if broker_id not in ctx.replicas(tp) or tp[0] in ctx.topics_being_deleted:
            continue
        if state.leader == broker_id:
            if len(ctx.replicas(tp)) > 1:
                new = election.elect_for_shutdown(ctx.replicas(tp), state, ctx.live_ids,
                                                  ctx.shutting_down, ctx.epoch)
                if new is not None and await write_state(c, tp, new):
                    led.append(tp)
        else:
            new = election.remove_replica(state, broker_id, ctx.epoch)
            if new is not None and await write_state(c, tp, new):
                followed.append(tp)
    send_leader_and_isr(c, led + followed)
    if followed:
        send(c, broker_id, ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION,
             stop_replica(ctx, broker_id, followed, delete=False))
    broadcast_metadata(c, list(ctx.partitions()))
    remaining = [{"topic_name": t, "partition_index": p}
                 for (t, p), st in sorted(ctx.states.items()) if st.leader == broker_id]
    future.set_result({"error_code": ErrorCode.NONE, "remaining_partitions": remaining})


async def alter_partition(c, broker_id, broker_epoch, items, future):
    """ISR changes proposed by leaders (AlterPartition), validated in Kafka's order.
    ``items``: [(topic, partition, leader_epoch, new_isr, partition_epoch, recovering)]
    (``recovering``: the LeaderRecoveryState the leader asks for is RECOVERING); the answer
    is a list of (error code, PartitionState or None) in the same order."""
    ctx = c.context
    if broker_epoch != ctx.broker_epoch(broker_id) or broker_id not in ctx.live_brokers:
        future.set_result((ErrorCode.STALE_BROKER_EPOCH, []))
        return
    answers = []
    changed = []
    for topic, p, leader_epoch, new_isr, partition_epoch, recovering in items:
        tp = (topic, p)
        state = ctx.states.get(tp)
        if state is None or topic in ctx.topics_being_deleted:
            answers.append((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
            continue
        if partition_epoch > state.partition_epoch or leader_epoch > state.leader_epoch:
            answers.append((ErrorCode.NOT_CONTROLLER, None))
            continue
        if leader_epoch < state.leader_epoch:
            answers.append((ErrorCode.FENCED_LEADER_EPOCH, None))
            continue
        if tuple(new_isr) == tuple(state.isr) and recovering == state.recovering:
            answers.append((ErrorCode.NONE, state))     # already applied: idempotent
            continue
        if partition_epoch < state.partition_epoch:
            answers.append((ErrorCode.INVALID_UPDATE_VERSION, None))
            continue
        # The requested recovery state is checked, not the stored one: after an unclean
        # election the leader ends recovery with the expansion that admits a follower.
        if recovering and (len(new_isr) > 1 or not state.recovering):
            answers.append((ErrorCode.INVALID_REQUEST, None))
            continue
        if any(b not in ctx.live_brokers or b in ctx.shutting_down for b in new_isr) or \
                state.leader not in new_isr:
            answers.append((ErrorCode.INELIGIBLE_REPLICA, None))
            continue
        new = state._replace(isr=tuple(new_isr), controller_epoch=ctx.epoch,
                             recovering=recovering)
        if await write_state(c, tp, new):
            answers.append((ErrorCode.NONE, ctx.states[tp]))
            changed.append(tp)
        else:
            answers.append((ErrorCode.INVALID_UPDATE_VERSION, None))
    future.set_result((ErrorCode.NONE, answers))
    if changed:
        broadcast_metadata(c, changed)


HANDLERS = {
    "broker_change": broker_change,
    "topic_change": topic_change,
    "partition_modification": partition_modification,
    "topic_deletion": topic_deletion,
    "controlled_shutdown": controlled_shutdown,
    "alter_partition": alter_partition,
}

