"""What a mirror topic refuses besides producers: DeleteRecords, CreatePartitions and
config changes from anyone but its mirror, and transactions, on one broker and in a
cluster alike.

Theory of operation. A mirror topic (``kqlite.mirror.source`` set, mirror_append.py) is
the source's log at the source's offsets; only its mirror may move it. Three admin
requests would otherwise change it under the mirror:

  =========================  ==============================================  =================
  request on a mirror topic  taken from                                      else
  =========================  ==============================================  =================
  DeleteRecords              the mirror (its log start follows the           POLICY_VIOLATION
                             source's)                                       (44)
  CreatePartitions           the mirror (the source grew)                    POLICY_VIOLATION
                                                                             (44)
  (Incremental)AlterConfigs  anyone, when the only change is the mark        POLICY_VIOLATION
                             removed (``kqlite mirror promote``), or when    (44)
                             nothing changes
  =========================  ==============================================  =================

*The mirror* is a request whose client id is ``MIRROR_CLIENT_ID`` from a principal with
CLUSTER_ACTION on the cluster, the authority a mirror's append needs
(handlers/mirror_produce.py): the client id only chooses the path, the ACL grants it.
Every check reads the topic's config as the request is served (ZooKeeper's in a
cluster, so every broker and the controller agree), after Kafka's own checks of the
request's form and authorization, and before anything is changed.

Why POLICY_VIOLATION. Kafka answers a well-formed request whose change a rule the broker
holds about the topic forbids with POLICY_VIOLATION: DeleteRecords on a topic whose
``cleanup.policy`` lacks ``delete`` ("can not be deleted due to the configured policy",
Partition.deleteRecordsOnLeader; handlers/offsets.py answers it the same way), and the
changes its pluggable topic policies (``create.topic.policy.class.name``,
``alter.config.policy.class.name``) refuse. Clients raise it as
PolicyViolationException: not retriable, the broker's message shown, which is what an
operator who tried to change a read-only mirror topic needs to read. The other candidates
say something false: TOPIC_AUTHORIZATION_FAILED (the principal may alter the topic; the
topic's state forbids it), INVALID_REQUEST (the request is well formed; the producer's
refusal uses it only because Produce has no policy code its clients treat as fatal),
INVALID_PARTITIONS (the count is valid) and INVALID_CONFIG (the values are valid).

Transactions. A transaction's partitions get its coordinator's COMMIT or ABORT marker, an
offset of their own: a mirror topic added to a transaction would take one, its log end
would pass the source's, and the mirror's next batch (at the source's offset, now below
the log end) would be refused for ever. So AddPartitionsToTxn refuses a mirror topic's
partitions (:func:`transaction_refusals`), from a producer (v0-3) and from a partition
leader adding or verifying them (v4+; in a cluster the leader's own verification asks
the same, kqlite/cluster/coordinators/txn_verification.py), whoever asks: not even the
mirror writes transactions into its topic. The code is the producer refusal's,
INVALID_REQUEST (mirror_append.py), so a transactional producer is told what a plain one
is. Kafka itself answers a partition a transactional producer may not write
TOPIC_AUTHORIZATION_FAILED (no WRITE, or an internal topic); that would say the
principal lacks an ACL it may well hold, as above. Both codes make the transaction
abortable in the clients (the Java producer's "Could not add partitions to transaction
due to errors", librdkafka's abortable error), never retried and never fatal to the
producer: it aborts, and its other topics are untouched. As Kafka answers any refused
partition, the request's other partitions are OPERATION_NOT_ATTEMPTED. TxnOffsetCommit
names a mirror topic only as the topic its group read, which is allowed: its marker goes
to ``__consumer_offsets``.
"""

from ..errors import ConfigError, UnknownTopicError
from ..protocol import ErrorCode
from ..protocol.acl import CLUSTER, AclOperation
from ..protocol.mirror_topics import MIRROR_CLIENT_ID, MIRROR_SOURCE
from ..storage.config import LogConfig
from .partition import PartitionError

__all__ = ["is_mirror_client", "refuse_admin", "config_change_refusal",
           "transaction_refusals"]


def is_mirror_client(authorizer, context):
    """Whether the request is a mirror's (see the module docstring)."""
    return context.client_id == MIRROR_CLIENT_ID and authorizer.authorize(
        context, AclOperation.CLUSTER_ACTION, CLUSTER, log_if_denied=False)


def refuse_admin(config, topic, what, from_mirror):
    """Raise PartitionError(POLICY_VIOLATION) when ``topic`` (whose effective ``config``
    this is) is a mirror topic and the request doing ``what`` is not its mirror's."""
    source = config.get(MIRROR_SOURCE, "")
    if source and not from_mirror:
        raise PartitionError(ErrorCode.POLICY_VIOLATION,
                             f"topic {topic} is a read-only mirror of {source}: only its "
                             f"mirror may {what} until it is promoted (kqlite mirror "
                             f"promote {topic})")


def config_change_refusal(topic, overrides, new):
    """``(POLICY_VIOLATION, message)`` when changing ``topic``'s ``overrides`` to ``new``
    is refused (the module docstring's table), else None. Values are compared as the
    config parses them; a ``new`` that does not parse is left to the change itself, which
    answers INVALID_CONFIG."""
    source = overrides.get(MIRROR_SOURCE)
    if not source:
        return None
    try:
        current = LogConfig(dict(overrides)).overrides()
        wanted = LogConfig(dict(new)).overrides()
    except ConfigError:
        return None
    promoted = {k: v for k, v in current.items() if k != MIRROR_SOURCE}
    if wanted in (current, promoted):
        return None
    return (ErrorCode.POLICY_VIOLATION,
            f"topic {topic} is a read-only mirror of {source}: its configs change only "
            f"by removing {MIRROR_SOURCE} (kqlite mirror promote {topic})")


async def transaction_refusals(replicas, names):
    """``{topic: error code}`` for the topics among ``names`` no transaction may take (the
    module docstring): a mirror topic INVALID_REQUEST; a topic whose config cannot be
    read now (ZooKeeper out of reach) COORDINATOR_NOT_AVAILABLE, which every client
    retries (the Java producer takes UNKNOWN_SERVER_ERROR here as fatal), so no
    partition is added unchecked and no producer dies of a passing outage.
    ``replicas``: the broker's replica manager, whose ``topic_config`` reads the config
    as the request is served (ZooKeeper's in a cluster). A topic that does not exist is
    left to the request's own check."""
    refused = {}
    for name in dict.fromkeys(names):
        try:
            _overrides, config = await replicas.topic_config(name)
        except UnknownTopicError:
            continue
        except PartitionError:
            refused[name] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            continue
        if config.get(MIRROR_SOURCE, ""):
            refused[name] = ErrorCode.INVALID_REQUEST
    return refused
