"""How a refused check is answered: Kafka's error code for each resource type, and the
text Kafka's ``Errors.message()`` gives each where a response carries an error message.

A request refused for a topic answers TOPIC_AUTHORIZATION_FAILED (29), for a group
GROUP_AUTHORIZATION_FAILED (30), for the cluster CLUSTER_AUTHORIZATION_FAILED (31), for a
transactional id TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): where in the response, and
whether for the whole request or one entry, is each handler's business (docs/architecture.md,
"Authorization").
"""

from ...protocol import ErrorCode
from ...protocol.acl import ResourceType

__all__ = ["REFUSAL", "refusal_message"]

REFUSAL = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
           ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
           ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
           ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

# WIRE: Kafka's Errors messages of the four codes.
_MESSAGES = {ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
             ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
             ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
             ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                 "Transactional Id authorization failed."}


def refusal_message(code):
    """Kafka's message for an authorization error ``code``."""
    return _MESSAGES[code]
