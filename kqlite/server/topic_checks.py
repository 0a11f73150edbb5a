"""The checks a topic request passes before anything is stored, answered with Kafka's
error codes: the topic name (Kafka's ``Topic.validate``), an explicit replica
assignment in CreateTopics (``AdminZkClient.validateTopicCreate``) and in
CreatePartitions (``ZkAdminManager.createPartitions``).

A single broker knows one broker id, its own; an assignment naming any other is refused
as a KRaft controller refuses a broker that is not registered
(INVALID_REPLICA_ASSIGNMENT). Each raises :class:`~.partition.PartitionError`.
"""

from ..db.topic_names import InvalidTopicError, check_topic_name
from ..protocol import ErrorCode
from .partition import PartitionError

__all__ = ["check_topic", "assigned_partition_count", "check_new_partitions"]


def check_topic(name):
    """Raise PartitionError(INVALID_TOPIC_EXCEPTION) unless ``name`` follows Kafka's rules
    for topic names."""
    try:
        check_topic_name(name)
    except InvalidTopicError as exc:
        raise PartitionError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None


def _refuse(message):
    return PartitionError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def assigned_partition_count(broker_id, assignments):
    """The partition count CreateTopics' ``assignments`` (``[{"partition_index",
    "broker_ids"}]``) ask for, once each partition is found to have exactly this broker
    as its replica."""
    indexes = [a["partition_index"] for a in assignments]
    if sorted(indexes) != list(range(len(indexes))):
        raise _refuse("partitions should be a consecutive 0-based integer sequence")
    for a in assignments:
        replicas, index = a["broker_ids"], a["partition_index"]
        if not replicas:
            raise _refuse(f"partition {index} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise _refuse(f"duplicate replica assignment for partition {index}")
        unknown = sorted(set(replicas) - {broker_id})
        if unknown:
            raise _refuse(f"partition {index} is assigned to broker(s) "
                          f"{', '.join(map(str, unknown))}, but only broker {broker_id} "
                          f"exists")
    return len(assignments)


def check_new_partitions(broker_id, current, total, assignments):
    """CreatePartitions growing a topic of ``current`` partitions to ``total``, with the
    replicas of each new partition in ``assignments`` (lists of broker ids) or None.
    Raises PartitionError(INVALID_PARTITIONS or INVALID_REPLICA_ASSIGNMENT) in Kafka's
    order: the count first."""
    if total < current:
        raise PartitionError(ErrorCode.INVALID_PARTITIONS,
                             f"the topic currently has {current} partitions, which is higher "
                             f"than the requested {total}")
    if total == current:
        raise PartitionError(ErrorCode.INVALID_PARTITIONS,
                             f"the topic already has {current} partitions")
    if assignments is None:
        return
    unknown = sorted({b for replicas in assignments for b in replicas} - {broker_id})
    if unknown:
        raise _refuse(f"unknown broker(s) in replica assignment: "
                      f"{', '.join(map(str, unknown))}")
    if len(assignments) != total - current:
        raise _refuse(f"increasing the number of partitions by {total - current} but "
                      f"{len(assignments)} assignments provided")
    if any(list(replicas) != [broker_id] for replicas in assignments):
        raise _refuse(f"each partition has one replica, on broker {broker_id}")
