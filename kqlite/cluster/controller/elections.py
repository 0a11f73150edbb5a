"""Leader elections the active controller runs on request (Kafka's
``KafkaController.processReplicaLeaderElection`` and ``onReplicaElection``).

Three triggers, one procedure:

- the ElectLeaders API (an admin client, through this broker's handler): PREFERRED moves
  leadership back to each partition's first assigned replica, UNCLEAN gives a leader to a
  partition that has none, from the live ISR or, failing that, from any live replica;
- the ``/admin/preferred_replica_election`` znode that older tools write: a preferred
  election of the partitions it lists, after which the controller deletes the znode;
- the automatic leader rebalance (rules/leader_rebalance.py decides which partitions).

For each partition asked: unknown ones answer UNKNOWN_TOPIC_OR_PARTITION, those of a topic
being deleted INVALID_TOPIC_EXCEPTION, those whose leader is already right
ELECTION_NOT_NEEDED; the rest are elected with rules/election.py's rules (replicas of brokers
shutting down do not count as live), written to ZooKeeper (fenced, conditional on the
partition epoch; a lost race is retried on the fresh state), then LeaderAndIsr goes to
the replicas and UpdateMetadata to every broker. A partition no rule can elect answers
PREFERRED_LEADER_NOT_AVAILABLE (preferred) or ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean).
"""

import logging

from ...protocol import ErrorCode
from ..rules import election
from ..rules.leader_rebalance import imbalanced_partitions
from ..rules.partition_state import NO_LEADER
from .state_changes import (broadcast_metadata, elect_where_needed, send_leader_and_isr,
                            write_state)

__all__ = ["PREFERRED", "UNCLEAN", "HANDLERS", "run_election"]

log = logging.getLogger("kqlite.cluster.controller")

PREFERRED, UNCLEAN = 0, 1     # WIRE: Kafka-defined ElectionType ids
_WRITE_ATTEMPTS = 3


class Elected:
    """One partition's outcome: ``error_code`` and ``message``, and for a successful
    election the new ``leader``."""

    __slots__ = ("error_code", "message", "leader")

    def __init__(self, error_code, message=None, leader=-1):
        self.error_code = error_code
        self.message = message
        self.leader = leader

    def __repr__(self):
        return f"Elected({ErrorCode(self.error_code).name}, leader={self.leader})"


def _needs_election(ctx, tp, election_type):
    state = ctx.states[tp]
    if election_type == PREFERRED:
        return state.leader != ctx.replicas(tp)[0]
    return state.leader == NO_LEADER or state.leader not in ctx.live_brokers


def _decide(ctx, tp, election_type):
    state = ctx.states[tp]
    online = ctx.live_ids - ctx.shutting_down
    if election_type == PREFERRED:
        return election.elect_preferred(ctx.replicas(tp), state, online, ctx.epoch)
    return election.elect_offline(ctx.replicas(tp), state, online, ctx.epoch, unclean=True)


async def run_election(c, election_type, tps, *, trigger):
    """Elect leaders of ``tps`` ([(topic, partition)]); returns {tp: Elected}. ``trigger``
    names the cause in the log ("admin", "znode", "auto")."""
    ctx = c.context
    out = {}
    electable = []
    for tp in dict.fromkeys(tps):
        if tp[0] not in ctx.assignments or tp[1] not in ctx.assignments[tp[0]] \
                or tp not in ctx.states:
            out[tp] = Elected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              "The partition does not exist.")
        elif tp[0] in ctx.topics_being_deleted:
            out[tp] = Elected(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
        elif not _needs_election(ctx, tp, election_type):
            out[tp] = Elected(ErrorCode.ELECTION_NOT_NEEDED)
        else:
            electable.append(tp)
    changed = []
    for tp in electable:
        out[tp] = await _elect_one(c, tp, election_type)
        if out[tp].error_code == ErrorCode.NONE:
            changed.append(tp)
    if changed:
        log.info("controller: %s leader election (%s) moved %s", _TYPE_NAMES[election_type],
                 trigger, {f"{t}-{p}": out[(t, p)].leader for t, p in changed})
        send_leader_and_isr(c, changed)
        broadcast_metadata(c, list(ctx.partitions()))
    return out


async def _elect_one(c, tp, election_type):
    ctx = c.context
    for _ in range(_WRITE_ATTEMPTS):
        if not _needs_election(ctx, tp, election_type):
            return Elected(ErrorCode.ELECTION_NOT_NEEDED)
        new = _decide(ctx, tp, election_type)
        if new is None:
            if election_type == PREFERRED:
                return Elected(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                               f"Failed to elect leader for partition {tp[0]}-{tp[1]}: the "
                               f"preferred replica {ctx.replicas(tp)[0]} is not live and "
                               f"in the ISR {list(ctx.states[tp].isr)}")
            return Elected(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                           f"Failed to elect leader for partition {tp[0]}-{tp[1]}: no "
                           f"replica of {list(ctx.replicas(tp))} is live")
        if await write_state(c, tp, new):
            if new.recovering:
                log.warning("unclean leader election for %s-%d: broker %d leads without "
                            "the records only the old in-sync replicas had", *tp, new.leader)
            return Elected(ErrorCode.NONE, leader=new.leader)
    return Elected(ErrorCode.UNKNOWN_SERVER_ERROR,
                   f"the state of {tp[0]}-{tp[1]} kept changing during the election")


_TYPE_NAMES = {PREFERRED: "preferred", UNCLEAN: "unclean"}


# ---- events ------------------------------------------------------------------------------

async def elect_leaders(c, election_type, tps, future):
    """ElectLeaders from a broker's handler; answers {tp: Elected}."""
    results = await run_election(c, election_type, tps, trigger="admin")
    if not future.done():
        future.set_result(results)


async def preferred_replica_election_znode(c):
    """``/admin/preferred_replica_election`` was created (or the controller just took
    over): elect the partitions it lists, then delete it so tools see it done."""
    ctx = c.context
    wanted = await c.zk(c.store.preferred_replica_election,
                        c.watcher("preferred_replica_election_znode"))
    if wanted is None:
        return
    try:
        await run_election(c, PREFERRED, wanted, trigger="znode")
    finally:
        await c.zk(c.store.delete_preferred_replica_election, ctx.epoch_zk_version)


async def auto_rebalance(c):
    """The periodic check (Kafka's checkAndTriggerAutoLeaderRebalance); the controller
    schedules the next one whatever happens here."""
    ctx = c.context
    try:
        if not c.auto_rebalance:
            return
        due = imbalanced_partitions(ctx.assignments, ctx.states, ctx.live_ids - ctx.shutting_down,
                                    ctx.topics_being_deleted, c.imbalance_percentage)
        if due:
            await run_election(c, PREFERRED, due, trigger="auto")
    finally:
        c.schedule_rebalance(c.imbalance_check_interval_s)


async def topic_config_change(c, topic):
    """A topic's config changed (zookeeper/config_watcher.py): the controller re-reads whether the
    topic allows unclean leader election, and when it now does, elects leaders for its
    partitions that have none (Kafka's TopicUncleanLeaderElectionEnable)."""
    ctx = c.context
    if topic not in ctx.assignments:
        return
    config = await c.zk(c.store.topic_config, topic)
    if config.get("unclean.leader.election.enable", "false").lower() != "true":
        ctx.unclean_topics.discard(topic)
        return
    if topic in ctx.unclean_topics:
        return
    ctx.unclean_topics.add(topic)
    leaderless = [tp for tp in ctx.partitions([topic])
                  if tp in ctx.states and ctx.states[tp].leader not in ctx.live_brokers]
    if leaderless:
        await elect_where_needed(c, leaderless, is_new=False)


HANDLERS = {
    "elect_leaders": elect_leaders,
    "preferred_replica_election_znode": preferred_replica_election_znode,
    "auto_rebalance": auto_rebalance,
    "topic_config_change": topic_config_change,
}
