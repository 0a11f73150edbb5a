"""kqlite's two wire names of offset-preserving mirror topics, for the broker and the mirror.

Theory of operation: neither is Kafka's. ``MIRROR_SOURCE`` is the topic config that marks
a mirror topic (storage/config_rules.py holds its row, spelt the same: storage sits below
the protocol, and tests/mirror/test_mirror_topics.py holds the two equal);
``MIRROR_APPEND_ID`` is the Produce transactional id of a mirror's append, and
``MIRROR_CLIENT_ID`` the client id of the mirror's requests (kqlite/mirror/client.py's
default), by which a mirror topic takes DeleteRecords and CreatePartitions from its mirror
only (kqlite/server/mirror_guard.py). Why a mirror append travels in a Produce, and why
neither id grants anything without CLUSTER_ACTION: kqlite/server/mirror_append.py.
"""

__all__ = ["MIRROR_SOURCE", "MIRROR_APPEND_ID", "MIRROR_CLIENT_ID"]

MIRROR_SOURCE = "kqlite.mirror.source"
MIRROR_APPEND_ID = "__kqlite_mirror_append"
MIRROR_CLIENT_ID = "kqlite-mirror"
