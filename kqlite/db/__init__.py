"""The embedded API: a data dir of topics (Database), Producer, Consumer, groups, offsets.

Modules, each holding one piece (see database.py for how they fit together):
``database`` (Database, ``kqlite.open``), ``topic_store`` (topic definitions:
the interface and the file store), ``log_manager`` (open logs: leases and the
LRU), ``partition_dirs`` (making and deleting partition directories),
``retention`` (retention and compaction of a whole data dir), ``offsets``
(``__consumer_offsets``), ``producer``, ``consumer``, ``transaction``
(``db.transaction()``, with ``transaction_batches``, ``transaction_rules``,
``transaction_recovery``, ``transaction_owners`` and ``sync_round``), ``groups``
(consumer-group membership between processes), ``partitioner`` (Kafka's murmur2),
``layout`` (names under ``.kqlite/``) and ``files`` (directory helpers over the seam).

This package imports only ``kqlite.storage`` and the layers below it.
"""

from .consumer import Consumer, ConsumerRecord, OffsetAndTimestamp
from .database import Database, PartitionInfo, TopicDescription, open_database
from .layout import META_DIR
from .producer import Producer, RecordMetadata
from .transaction import Transaction
from .transaction_batches import SentRecord
from .topic_store import FileTopicStore, TopicStore

__all__ = ["Database", "open_database", "TopicDescription", "PartitionInfo", "Producer",
           "RecordMetadata", "Transaction", "SentRecord", "Consumer", "ConsumerRecord",
           "OffsetAndTimestamp", "TopicStore",
           "FileTopicStore", "META_DIR"]
