"""MM2's replication policies: how a mirrored topic is named on the target, where a name
came from, and which topics a flow must never copy.

Theory of operation. Kafka 3.9's ``ReplicationPolicy`` (connect/mirror-client) restated:

- ``DefaultReplicationPolicy``: the remote topic is ``<source alias><sep><topic>`` (separator
  ``.``); ``topic_source`` is the text before the first separator and ``upstream_topic``
  the text after it. An alias or topic that itself holds the separator confuses it, as in
  Kafka.
- ``IdentityReplicationPolicy``: names stay as they are, except ``heartbeats``, which is
  renamed as the default policy does so that replication hops can still be counted;
  ``topic_source`` of any other name is the configured source alias. Kafka's javadoc warns
  that this policy "is not able to prevent cycles": ``upstream_topic`` returns the topic
  itself, which ends the cycle walk at once.
- **Internal topics** (``is_internal_topic``): names starting with ``__`` or ``.``, or
  ending in ``-internal`` or ``.internal``; MM2 never mirrors them.
- **Cycles** (``MirrorSourceConnector.isCycle``): a topic is skipped when its source, or the
  source of any topic up its chain of upstream names, is this flow's target. With the
  default policy two clusters can mirror each other without excludes.
"""

import abc
from typing import Optional

__all__ = ["ReplicationPolicy", "DefaultReplicationPolicy", "IdentityReplicationPolicy",
           "is_internal_topic", "is_cycle", "policy_named"]

SEPARATOR = "."
_HEARTBEATS = "heartbeats"


def is_internal_topic(topic: str) -> bool:
    """Kafka's ``ReplicationPolicy.isInternalTopic`` (with the MM2 internal topics' names)."""
    return (topic.startswith("__") or topic.startswith(".")
            or topic.endswith("-internal") or topic.endswith(".internal"))


class ReplicationPolicy(abc.ABC):
    """What both policies share: the cycle walk and the heartbeats rule."""

    name = "?"

    @abc.abstractmethod
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """The target's name for ``topic`` of the cluster ``source_alias``."""

    @abc.abstractmethod
    def topic_source(self, topic: str) -> Optional[str]:
        """The alias of the cluster ``topic`` was mirrored from, None for a local topic."""

    @abc.abstractmethod
    def upstream_topic(self, topic: str) -> Optional[str]:
        """``topic``'s name one hop upstream, None for a local topic."""

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster where it was first written."""
        seen = set()
        while True:
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic or topic in seen:
                return topic
            seen.add(topic)
            topic = upstream


def _default_source(topic: str) -> Optional[str]:
    head, sep, _ = topic.partition(SEPARATOR)
    return head if sep else None


def _default_upstream(topic: str) -> Optional[str]:
    _, sep, tail = topic.partition(SEPARATOR)
    return tail if sep else None


class DefaultReplicationPolicy(ReplicationPolicy):
    """``source.topic``; see the module docstring."""

    name = "default"

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{SEPARATOR}{topic}"

    def topic_source(self, topic: str) -> Optional[str]:
        return _default_source(topic)

    def upstream_topic(self, topic: str) -> Optional[str]:
        return _default_upstream(topic)


class IdentityReplicationPolicy(ReplicationPolicy):
    """Names kept (but heartbeats); see the module docstring."""

    name = "identity"

    def __init__(self, source_alias: Optional[str] = None) -> None:
        self.source_alias = source_alias

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if _is_heartbeats(topic):
            return f"{source_alias}{SEPARATOR}{topic}"
        return topic

    def topic_source(self, topic: str) -> Optional[str]:
        if _is_heartbeats(topic):
            return _default_source(topic)
        return self.source_alias

    def upstream_topic(self, topic: str) -> Optional[str]:
        if _is_heartbeats(topic):
            return _default_upstream(topic)
        return topic


def _is_heartbeats(topic: str) -> bool:
    return topic == _HEARTBEATS or topic.endswith(SEPARATOR + _HEARTBEATS)


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """Whether ``topic`` (a source topic) already came from ``target_alias``, at any hop:
    copying it there would send its records back where they were written."""
    seen = set()
    while topic not in seen:
        seen.add(topic)
        source = policy.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return False
        topic = upstream
    return False


def policy_named(name: str, source_alias: str) -> ReplicationPolicy:
    """``default`` or ``identity`` (``replication.policy.class``'s two built-ins)."""
    if name == "default":
        return DefaultReplicationPolicy()
    if name == "identity":
        return IdentityReplicationPolicy(source_alias)
    raise ValueError(f"unknown replication policy {name!r}: default or identity")
