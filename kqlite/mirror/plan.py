"""What a mirror should copy now, from what the two clusters hold: a pure planning step.

Theory of operation. Each refresh (``refresh_interval``, MM2's
``refresh.topics.interval.seconds``) the runner asks both clusters for their topics and
calls :func:`plan`; whatever the plan says is then done (topics created, partitions added)
and its partitions are mirrored. New source topics and added partitions are so picked up
while the mirror runs. A source topic is, in this order (MM2's
``MirrorSourceConnector.shouldReplicateTopic``):

=========  ===========================================================================
INTERNAL   an internal name (``__*``, ``.*``, ``*-internal``, ``*.internal``): never
CYCLE      it came from this flow's target (the policy's cycle walk): never
HEARTBEAT  a heartbeats topic: always, whatever the filter says
EXCLUDED   not chosen by the topic filter
CHOSEN     chosen by the filter
=========  ===========================================================================

For a copied topic the target topic is the policy's remote name; one missing is created
with the source's partition count, one with fewer partitions grows to it (partition
counts only grow), and every source partition that exists on both sides is mirrored.

:func:`copied_configs` is MM2's ``DefaultConfigPropertyFilter`` with
``use.defaults.from=target``: only configs set on the source topic itself are copied,
none that is read-only or sensitive, and never the ones MM2 excludes (replication
throttles, the timestamp type and its bound, unclean election, ``min.insync.replicas``).
"""

from typing import Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

from .policy import ReplicationPolicy, is_cycle, is_internal_topic

__all__ = ["Plan", "plan", "copied_configs", "INTERNAL", "CYCLE", "HEARTBEAT", "EXCLUDED",
           "CHOSEN", "EXCLUDED_CONFIGS"]

INTERNAL = "internal"
CYCLE = "cycle"
HEARTBEAT = "heartbeat"
EXCLUDED = "excluded"
CHOSEN = "chosen"

EXCLUDED_CONFIGS = frozenset((
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms", "message.timestamp.type",
    "unclean.leader.election.enable", "min.insync.replicas",
    # kqlite's mark of an offset-preserving mirror topic: a copy of a mirror topic is no
    # mirror of the same source (the preserving mirror sets its own mark).
    "kqlite.mirror.source"))
# DescribeConfigs' config_source for a value set on the topic itself.
DYNAMIC_TOPIC_CONFIG = 1


class Plan(NamedTuple):
    """``topics``: source topic -> remote topic for every copied topic; ``create``:
    remote topic -> (source topic, partition count) to create; ``grow``: remote topic ->
    new partition count; ``partitions``: the (source topic, partition) pairs to mirror
    now; ``decisions``: source topic -> the rule that decided it."""
    topics: Dict[str, str]
    create: Dict[str, Tuple[str, int]]
    grow: Dict[str, int]
    partitions: List[Tuple[str, int]]
    decisions: Dict[str, str]


def decide(topic: str, chosen: Callable[[str], bool], policy: ReplicationPolicy,
           target_alias: str) -> str:
    """The rule (module docstring) that decides whether ``topic`` is copied."""
    if is_internal_topic(topic):
        return INTERNAL
    if is_cycle(policy, topic, target_alias):
        return CYCLE
    if topic == "heartbeats" or topic.endswith(".heartbeats"):
        return HEARTBEAT
    if not chosen(topic):
        return EXCLUDED
    return CHOSEN


def plan(source: Mapping[str, int], target: Mapping[str, int],
         chosen: Callable[[str], bool], policy: ReplicationPolicy, source_alias: str,
         target_alias: str) -> Plan:
    """``source`` and ``target``: topic -> partition count as each cluster answered."""
    topics, create, grow, partitions, decisions = {}, {}, {}, [], {}
    for topic in sorted(source):
        rule = decisions[topic] = decide(topic, chosen, policy, target_alias)
        if rule not in (HEARTBEAT, CHOSEN):
            continue
        remote = topics[topic] = policy.format_remote_topic(source_alias, topic)
        count = source[topic]
        have = target.get(remote)
        if have is None:
            create[remote] = (topic, count)
            have = 0
        elif have < count:
            grow[remote] = count
        partitions.extend((topic, p) for p in range(min(count, have)))
    return Plan(topics, create, grow, partitions, decisions)


def copied_configs(entries: Iterable[Mapping[str, object]],
                   excluded: Iterable[str] = EXCLUDED_CONFIGS) -> Dict[str, Optional[str]]:
    """The configs MM2 copies from DescribeConfigs ``entries`` (name, value, read_only,
    is_sensitive, config_source)."""
    skip = frozenset(excluded)
    out: Dict[str, Optional[str]] = {}
    for e in entries:
        name = str(e["name"])
        if e.get("read_only") or e.get("is_sensitive") or name in skip:
            continue
        if e.get("config_source") != DYNAMIC_TOPIC_CONFIG:
            continue
        value = e.get("value")
        out[name] = None if value is None else str(value)
    return out
