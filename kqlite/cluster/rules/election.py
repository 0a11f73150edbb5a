"""Leader election and ISR changes the controller decides: Kafka's rules, as pure functions.

Each function takes a partition's assignment, its current state (``PartitionState``,
partition_state.py) and the set of live brokers, and returns the new state to write to
ZooKeeper (or None when no leader can be chosen). Writing it, fenced and conditional on
the partition epoch, is the controller's job (zookeeper/store.py); keeping the decisions
pure lets the tests check them exhaustively.

Every change of leader bumps the leader epoch, so followers and clients can tell an old
leader's word from the new one's (KIP-101, KIP-320). A replica leaving the ISR bumps it as
well. The ISR never becomes empty: when its last member dies, that member stays in it
("last replica standing"), which is what lets it come back as a clean leader.
"""

from .partition_state import NO_LEADER, PartitionState

__all__ = ["initial_state", "elect_offline", "elect_preferred", "elect_for_shutdown",
           "remove_replica"]


def initial_state(assignment, live, controller_epoch):
    """A new partition: the first live replica leads, every live replica is in the ISR,
    leader epoch 0. None when no replica is live."""
    live_replicas = tuple(r for r in assignment if r in live)
    if not live_replicas:
        return None
    return PartitionState(live_replicas[0], 0, live_replicas, controller_epoch)


def elect_offline(assignment, state, live, controller_epoch, *, unclean=False):
    """The leader is gone (or there is none): the first replica in assignment order that is
    live and in the ISR. With ``unclean`` and no such replica, the first live replica,
    which then leads alone and is marked as recovering (KIP-704); records only the old
    ISR had are lost then, which is why it is off by default. None: no leader possible."""
    isr = set(state.isr)
    for r in assignment:
        if r in live and r in isr:
            new_isr = tuple(x for x in state.isr if x in live)
            return PartitionState(r, state.leader_epoch + 1, new_isr, controller_epoch,
                                  False, state.partition_epoch)
    if unclean:
        for r in assignment:
            if r in live:
                return PartitionState(r, state.leader_epoch + 1, (r,), controller_epoch, True,
                                      state.partition_epoch)
    return None


def elect_preferred(assignment, state, live, controller_epoch):
    """Move leadership back to the preferred replica (the first in the assignment), only if
    it is live and in the ISR; None otherwise or when it already leads."""
    preferred = assignment[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch,
                          False, state.partition_epoch)


def elect_for_shutdown(assignment, state, live, shutting_down, controller_epoch):
    """A broker is shutting down cleanly: lead from the first replica that is live, in the
    ISR and not shutting down; the ISR loses the shutting-down brokers. None: no other
    replica can take over."""
    for r in assignment:
        if r in live and r in state.isr and r not in shutting_down:
            new_isr = tuple(x for x in state.isr if x not in shutting_down)
            return PartitionState(r, state.leader_epoch + 1, new_isr, controller_epoch,
                                  False, state.partition_epoch)
    return None


def remove_replica(state, replica, controller_epoch):
    """A replica went offline: take it out of the ISR (unless it is the last member) and,
    if it led, leave the partition without a leader. The leader epoch goes up either way.
    None when the replica is not in the ISR (Kafka leaves such partitions alone)."""
    if replica not in state.isr:
        return None
    leader = NO_LEADER if state.leader == replica else state.leader
    isr = state.isr if len(state.isr) == 1 else tuple(r for r in state.isr if r != replica)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch,
                          state.recovering, state.partition_epoch)
