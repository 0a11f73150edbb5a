"""Kafka's internal topics, where its coordinators keep their state: each topic's name,
default partition count and configs, and which of its partitions holds a key.

Theory of operation. A coordinator's state lives in a compacted topic, one record per
key (a group, a transactional id), the latest record of a key winning. The
coordinator of a key is whoever leads the partition that holds the key, so every broker
and every process on a data dir must compute the same partition, and it must be Kafka's,
so that a Kafka broker and Kafka's tools reading the topic find a key where kqlite put
it: :func:`kafka_partition_for_key`. These are on-disk facts (a record written to the
wrong partition is never found again), hence their place beside the record formats.

kqlite placed ``__consumer_offsets`` records by another rule before it took Kafka's:
:func:`legacy_partition_for_key`, which differs from Kafka's for half of all group ids.
Only the move of those records to Kafka's partition reads it (``offsets_relocation``).

``__consumer_offsets``: ``offsets.topic.num.partitions`` (50), compacted, 100 MiB
segments; its records are ``offset_records`` and ``group_records``.

``__transaction_state``: ``transaction.state.log.num.partitions`` (50), compacted,
uncompressed, 100 MiB segments (``transaction.state.log.segment.bytes``), no unclean
leader election (Kafka's TransactionStateManager.transactionTopicConfigs; its
``min.insync.replicas`` is the broker's ``transaction.state.log.min.isr``, a cluster's
business: :data:`TRANSACTIONS_MIN_ISR`); its records are ``transaction_records``, an id's
partition :func:`transaction_partition_for`.
"""

__all__ = ["OFFSETS_TOPIC", "OFFSETS_PARTITIONS", "OFFSETS_CONFIG", "TRANSACTIONS_TOPIC",
           "TRANSACTIONS_PARTITIONS", "TRANSACTIONS_CONFIG", "TRANSACTIONS_MIN_ISR",
           "TRANSACTIONS_REPLICATION_FACTOR", "java_hash", "kafka_abs",
           "kafka_partition_for_key", "legacy_partition_for_key", "legacy_partner_partition",
           "transaction_partition_for"]

OFFSETS_TOPIC = "__consumer_offsets"   # ON-DISK: Kafka's name
OFFSETS_PARTITIONS = 50                # Kafka's offsets.topic.num.partitions default
OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}

TRANSACTIONS_TOPIC = "__transaction_state"  # ON-DISK: Kafka's name
TRANSACTIONS_PARTITIONS = 50           # Kafka's transaction.state.log.num.partitions default
TRANSACTIONS_REPLICATION_FACTOR = 3    # transaction.state.log.replication.factor default
TRANSACTIONS_MIN_ISR = 2               # transaction.state.log.min.isr default
# TransactionStateManager.transactionTopicConfigs, with transaction.state.log.segment.bytes'
# default.
TRANSACTIONS_CONFIG = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                       "segment.bytes": 100 * 1024 * 1024,
                       "unclean.leader.election.enable": "false"}

_INT_SPAN = 2 ** 31


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


def kafka_abs(n):
    """Kafka's ``Utils.abs`` of a 32-bit int: its absolute value, except that
    Integer.MIN_VALUE, which has none, maps to 0."""
    return 0 if n == -2 ** 31 else abs(n)


def kafka_partition_for_key(key, partitions):
    """Kafka's placement of a key in an internal topic of ``partitions`` partitions:
    ``Utils.abs(key.hashCode) % partitions`` (TransactionStateManager ``partitionFor``,
    GroupMetadataManager ``partitionFor``)."""
    return kafka_abs(java_hash(key)) % partitions


def transaction_partition_for(transactional_id, partitions=TRANSACTIONS_PARTITIONS):
    """The partition of ``__transaction_state`` that holds ``transactional_id``'s records
    (Kafka's rule, as for every internal topic)."""
    return kafka_partition_for_key(transactional_id, partitions)


def legacy_partition_for_key(key, partitions):
    """Where kqlite put ``key``'s ``__consumer_offsets`` records before it took Kafka's
    rule: the hash's low 31 bits modulo the count.

    For a hash >= 0, and for Integer.MIN_VALUE, this is Kafka's partition; for any other
    negative hash Kafka takes ``-hash`` and this took ``hash + 2**31`` ("my-group":
    Kafka 12, legacy 36). Read only to find the records still lying there."""
    return (java_hash(key) & 0x7FFFFFFF) % partitions


def legacy_partner_partition(index, partitions):
    """The one partition where the legacy rule put keys that Kafka's rule places in
    partition ``index``, when it is not ``index`` itself (None then).

    For a key whose rules differ (a hash h < 0, h != Integer.MIN_VALUE), Kafka's
    partition K is ``-h % n`` and the legacy one ``(h + 2**31) % n``, which is
    ``(2**31 - K) % n`` whatever h is. The pairing is its own inverse: what the legacy
    rule put in ``index`` for keys Kafka places elsewhere all belongs in its partner, and
    what it put in the partner for keys Kafka places elsewhere all belongs in
    ``index``."""
    partner = (_INT_SPAN - index) % partitions
    return None if partner == index else partner
