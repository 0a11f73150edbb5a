"""How the active controller changes the cluster, in Kafka's order: a partition's new
state is written to ZooKeeper first (the source of truth; fenced by the controller epoch's
zkVersion and conditional on the partition epoch), then LeaderAndIsr goes to the replicas
concerned, then UpdateMetadata to every live broker, so a broker never advertises a
leader that has not been told it leads.

Every function runs in the controller's event task with ``c`` the Controller (``c.zk``,
``c.store``, ``c.channels``, ``c.context``); the event handlers (events.py) and the
elections on request (elections.py) both build on them. Requests go out on the channels
(kqlite/cluster/network/channels.py), one ordered queue per broker that resends until
the broker leaves; a request that fails all the same is logged.
"""

import logging

from ...protocol import ApiKey
from ..rules import election
from .requests import (LEADER_AND_ISR_VERSION, UPDATE_METADATA_VERSION, leader_and_isr,
                       update_metadata)

__all__ = ["write_state", "elect_where_needed", "update_channels", "send",
           "send_leader_and_isr", "broadcast_metadata"]

log = logging.getLogger("kqlite.cluster.controller")


# ---- partition states --------------------------------------------------------------------

async def write_state(c, tp, new):
    """Conditional write of a partition's new state; re-read and report False when it
    changed under us (Kafka retries the election with the fresh state).

    A write whose connection was lost may have been applied all the same, and its resend
    (or the request sent again) then fails the zkVersion condition: when the state read
    back is the one written, it is ours and the write succeeded (Kafka's
    ``checkLeaderAndIsrZkData``, KAFKA-1382). Reporting False there would answer the
    leader INVALID_UPDATE_VERSION, after which it waits for a LeaderAndIsr that no one
    sends, its ISR change pending for good."""
    ctx = c.context
    version = await c.zk(c.store.update_partition_state, tp[0], tp[1], new,
                         ctx.epoch_zk_version)
    if version is None:
        fresh = await c.zk(c.store.partition_state, tp[0], tp[1])
        if fresh is not None:
            ctx.states[tp] = fresh
        return fresh is not None and _same_state(fresh, new)
    ctx.states[tp] = new._replace(partition_epoch=version)
    return True


def _same_state(a, b):
    # Everything the znode holds: the partition epoch is its zkVersion, not its data.
    return a._replace(partition_epoch=-1) == b._replace(partition_epoch=-1)


async def elect_where_needed(c, tps, *, is_new, announce_all=False):
    """Give a leader to every partition of ``tps`` that has none (no state yet, or a dead
    leader), write it, and tell the replicas. With ``announce_all`` every partition's
    replicas hear their state, changed or not (failover, broker startup)."""
    ctx = c.context
    changed = []
    created = {}
    for tp in tps:
        replicas = ctx.replicas(tp)
        state = ctx.states.get(tp)
        if state is None:
            new = election.initial_state(replicas, ctx.live_ids, ctx.epoch)
            if new is not None:
                created.setdefault(tp[0], {})[tp[1]] = new
            continue
        if state.leader in ctx.live_brokers and state.leader not in ctx.shutting_down:
            continue
        new = election.elect_offline(replicas, state, ctx.live_ids - ctx.shutting_down,
                                     ctx.epoch, unclean=tp[0] in ctx.unclean_topics)
        if new is not None:
            if new.recovering:
                log.warning("unclean leader election for %s-%d: broker %d leads without "
                            "the records only the old in-sync replicas had", *tp, new.leader)
            if await write_state(c, tp, new):
                changed.append(tp)
    for topic, states in created.items():
        await c.zk(c.store.create_partition_states, topic, states, ctx.epoch_zk_version)
        for p, st in states.items():
            ctx.states[(topic, p)] = st._replace(partition_epoch=0)
            changed.append((topic, p))
    send_leader_and_isr(c, list(tps) if announce_all else changed, is_new=is_new)
    broadcast_metadata(c, list(ctx.partitions()))
    return changed


# ---- requests to brokers -------------------------------------------------------------------

def update_channels(c, brokers):
    """One channel per live broker (channels.ChannelManager), to its endpoint on the
    controller's inter-broker listener: new ones opened, moved ones re-pointed, dead ones
    removed (their pending requests fail). A broker without that listener gets none (the
    requests for it fail as for a dead broker), and an error in the log."""
    reachable = {}
    for b, info in sorted(brokers.items()):
        endpoint = info.endpoint(c.listener_name)
        if endpoint is None:
            if b not in c.unreachable:
                log.error("controller %d: broker %d registered no %s listener (it has %s); "
                          "the controller cannot reach it", c.broker.broker_id, b,
                          c.listener_name, ", ".join(e.listener_name for e in info.endpoints))
            continue
        reachable[b] = endpoint
    c.unreachable = set(brokers) - set(reachable)
    for b in set(c.channels.broker_ids) - set(reachable):
        c.channels.remove_broker(b)
    for b, endpoint in reachable.items():
        c.channels.add_broker(b, endpoint.host, endpoint.port)


def send(c, broker_id, api_key, version, body):
    """Queue one request for ``broker_id``; the Future of its response body."""
    future = c.channels.send(broker_id, api_key, version, body)
    future.add_done_callback(lambda f: _log_failure(broker_id, api_key, f))
    return future


def _log_failure(broker_id, api_key, future):
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        log.warning("controller request %d to broker %d failed: %s", api_key, broker_id, exc)


def send_leader_and_isr(c, tps, *, is_new=False):
    """LeaderAndIsr to every live replica of the partitions ``tps`` (those with a state),
    one request per broker naming its own partitions."""
    ctx = c.context
    by_broker = {}
    for tp in tps:
        if tp not in ctx.states:
            continue
        for r in ctx.replicas(tp):
            if r in ctx.live_brokers:
                by_broker.setdefault(r, []).append(tp)
    for broker_id, mine in sorted(by_broker.items()):
        send(c, broker_id, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION,
             leader_and_isr(ctx, broker_id, mine, is_new=is_new))


def broadcast_metadata(c, tps, *, to=None, deleting=()):
    """UpdateMetadata with the live brokers and the states of ``tps`` to every live broker
    (or to the brokers ``to``); ``deleting`` names topics whose partitions brokers drop."""
    ctx = c.context
    for broker_id in sorted(ctx.live_brokers if to is None else to):
        send(c, broker_id, ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION,
             update_metadata(ctx, broker_id, tps, deleting=deleting))
