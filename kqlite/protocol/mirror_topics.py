"""kqlite's two wire names of offset-preserving mirror topics, for the broker and the mirror.

Theory of operation: neither is Kafka's. ``MIRROR_SOURCE`` is the topic config that marks
a mirror topic (storage/config_rules.py holds its row, spelt the same: storage sits below
the protocol, and tests/mirror/test_mirror_topics.py holds the two equal);
``MIRROR_APPEND_ID`` is the Produce transactional id of a mirror's append. Why a mirror
append travels in a Produce, and why the id grants nothing without CLUSTER_ACTION:
kqlite/server/mirror_append.py.
"""

__all__ = ["MIRROR_SOURCE", "MIRROR_APPEND_ID"]

MIRROR_SOURCE = "kqlite.mirror.source"
MIRROR_APPEND_ID = "__kqlite_mirror_append"
