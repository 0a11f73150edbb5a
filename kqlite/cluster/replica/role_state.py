"""Which role this broker holds for one replicated partition: the state the partition
(partition.py) and its two role objects (leader_role.py, follower_role.py) share.

Theory of operation. Only the role changes of the partition write it (LeaderAndIsr's
``become_leader`` and ``become_follower``, StopReplica's ``stop_replica``), under the
partition's leadership lock, with one exception: a committed ISR change moves the
partition epoch (leader_role.py). The roles read it to know whether they are the one in
force: the leader role acts only while ``leader_state`` is the LeaderState it started
with, the follower role only while ``following``, and an answer from storage is kept
only if ``generation`` has not moved since the call began (every role change bumps it).
Everything here is read and written on the event loop.
"""

__all__ = ["RoleState"]


class RoleState:
    """The role of this broker (``broker_id``) for one partition. ``leader_epoch`` is the
    epoch known before the first LeaderAndIsr (-1 for a new partition)."""

    def __init__(self, broker_id, leader_epoch):
        self.broker_id = broker_id
        self.leader_state = None     # the rules/leader_state.LeaderState while leading
        self.following = False
        self.leader = -1             # the leader's broker id while following
        self.leader_epoch = leader_epoch
        self.partition_epoch = -1
        self.replicas = ()
        self.follower_isr = ()       # the ISR LeaderAndIsr named, while following
        self.generation = 0          # bumped by every role change

    @property
    def leading(self):
        return self.leader_state is not None
