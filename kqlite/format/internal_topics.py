"""Kafka's internal topics, where its coordinators keep their state: each topic's name,
default partition count and configs, and which of its partitions holds a key.

Theory of operation. A coordinator's state lives in a compacted topic, one record per
key (a group, later a transactional id), the latest record of a key winning. The
coordinator of a key is whoever leads the partition that holds the key, so every broker
and every process on a data dir must compute the same partition:
:func:`partition_for_key`. These are on-disk facts (a record written to the wrong
partition is never found again), hence their place beside the record formats.

``__consumer_offsets``: ``offsets.topic.num.partitions`` (50), compacted, 100 MiB
segments; its records are ``offset_records`` and ``group_records``.
"""

__all__ = ["OFFSETS_TOPIC", "OFFSETS_PARTITIONS", "OFFSETS_CONFIG", "java_hash",
           "partition_for_key"]

OFFSETS_TOPIC = "__consumer_offsets"   # ON-DISK: Kafka's name
OFFSETS_PARTITIONS = 50                # Kafka's offsets.topic.num.partitions default
OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}


def java_hash(s):
    """Java's ``String.hashCode`` of ``s``: over UTF-16 code units (a character outside
    the BMP counts as its surrogate pair), as a signed 32-bit int."""
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        code = ord(ch)
        units = [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10),
                                               0xDC00 + ((code - 0x10000) & 0x3FF)]
        for u in units:
            h = (31 * h + u) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key, partitions):
    """The partition of an internal topic of ``partitions`` partitions that holds
    ``key``: the hash's low 31 bits modulo the count, as kqlite has always placed
    ``__consumer_offsets`` records.

    Kafka 3.9 computes ``Utils.abs(key.hashCode) % partitions`` (GroupMetadataManager
    ``partitionFor``, TransactionStateManager ``partitionFor``), which agrees with this
    only for hashes >= 0 and for Integer.MIN_VALUE: for a negative hash, Kafka takes
    ``-hash`` and this takes ``hash + 2**31`` ("my-group": Kafka 12, kqlite 36). Data
    dirs already hold commits where this puts them; changing the rule moves them out of
    reach, so it is left as it is here and changed, if ever, with a migration."""
    return (java_hash(key) & 0x7FFFFFFF) % partitions
