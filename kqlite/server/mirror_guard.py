"""What a mirror topic refuses besides producers: DeleteRecords, CreatePartitions and
config changes from anyone but its mirror, on one broker and in a cluster alike.

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
"""

from ..errors import ConfigError
from ..protocol import ErrorCode
from ..protocol.acl import CLUSTER, AclOperation
from ..protocol.mirror_topics import MIRROR_CLIENT_ID, MIRROR_SOURCE
from ..storage.config import LogConfig
from .partition import PartitionError

__all__ = ["is_mirror_client", "refuse_admin", "config_change_refusal"]


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
