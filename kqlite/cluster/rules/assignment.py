"""Replica assignment for new topics and partitions: Kafka's rack-unaware scheme.

Kafka spreads replicas so that (1) leaders (first replicas) go round-robin over the
brokers, starting at a random broker, and (2) the followers of consecutive partitions are
shifted, so that losing one broker moves its load onto several others rather than one.
The shift grows by one every time the partition id wraps around the broker list. With a
fixed start index the result is deterministic, which is how Kafka's tests pin it down
(brokers 0-4, 10 partitions, replication factor 3, start 0 gives
``[0,1,2] [1,2,3] [2,3,4] [3,4,0] [4,0,1] [0,2,3] [1,3,4] [2,4,0] [3,0,1] [4,1,2]``).
"""

import random

from ...errors import KqliteError

__all__ = ["InvalidReplicationFactorError", "InvalidReplicaAssignmentError",
           "assign_replicas", "check_assignment"]


class InvalidReplicationFactorError(KqliteError):
    """More replicas asked for than there are live brokers (or fewer than one)."""


class InvalidReplicaAssignmentError(KqliteError):
    """An explicit assignment names unknown brokers, repeats one, or is uneven."""


def assign_replicas(partitions, replication_factor, brokers, *, start_index=-1,
                    first_partition=0, rng=random):
    """{partition id: (replica broker ids)} for ``partitions`` new partitions numbered from
    ``first_partition``, over the live broker ids ``brokers``.

    ``start_index`` >= 0 fixes both the first leader and the initial follower shift (as
    Kafka's ``fixedStartIndex``); -1 picks them at random, as a broker does."""
    broker_list = sorted(set(brokers))
    if partitions <= 0:
        raise KqliteError(f"number of partitions must be at least 1, not {partitions}")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > len(broker_list):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the number of live "
            f"brokers ({len(broker_list)})")
    n = len(broker_list)
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    out = {}
    for partition in range(max(0, first_partition), max(0, first_partition) + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [broker_list[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(broker_list[(first + step) % n])
        out[partition] = tuple(replicas)
    return out


def check_assignment(assignment, live_brokers):
    """Validate an explicit assignment ({partition: replicas}) as Kafka's
    ``validateReplicaAssignment`` does: partitions numbered 0..n-1, one replication factor
    for all, no broker twice in a partition, every broker live."""
    if not assignment:
        raise InvalidReplicaAssignmentError("the assignment names no partitions")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(
            f"partitions must be numbered 0..{len(assignment) - 1}, got {sorted(assignment)}")
    factors = {len(r) for r in assignment.values()}
    if len(factors) != 1 or 0 in factors:
        raise InvalidReplicaAssignmentError(
            "every partition must have the same, non-zero number of replicas")
    live = set(live_brokers)
    for p, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {p} names a broker twice: {replicas}")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"partition {p} names brokers that are not live: {unknown}")
