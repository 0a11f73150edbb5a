"""Transaction state in the compacted ``__transaction_state`` topic of a data dir: the
latest record of every transactional id, read and written as Kafka's transaction
coordinator reads and writes them.

The records are Kafka's (``kqlite.format.transaction_records``), in the partition Kafka
puts an id's records (``internal_topics.transaction_partition_for``: Kafka's own rule,
unlike the offsets topic's), so the topic reads the same as a Kafka broker's.

Several processes write to one data dir: a broker's transaction coordinator (``kqlite
serve``) and the embedded API's transactions. Every read first catches up with what the
others appended, so nothing here is a copy another process's write makes stale; each id's
latest record wins, and a tombstone (an expired id) removes it. A record that cannot be
decoded (a damaged copy, a newer Kafka's value version) is logged and skipped, so that it
hides nothing else of the partition; a key of another version is not a transaction's and
is skipped silently, as Kafka skips it.

:class:`TransactionStateStore` (``Database.transaction_state``) is the data dir's;
:func:`read_transaction_records` is the pure replay both it and a broker loading a
partition use.
"""

import functools
import logging
import threading
from typing import NamedTuple, Optional

from ..errors import CorruptRecordError
from ..format.batch import now_ms
from ..format.internal_topics import (TRANSACTIONS_CONFIG, TRANSACTIONS_PARTITIONS,
                                      TRANSACTIONS_TOPIC, transaction_partition_for)
from ..format.record import Record
from ..format.transaction_records import (TransactionLogValue, decode_transaction_key,
                                          decode_transaction_value, encode_transaction_key,
                                          encode_transaction_value)

__all__ = ["TransactionStateStore", "StoredTransaction", "read_transaction_records",
           "transaction_record"]

log = logging.getLogger("kqlite")


@functools.lru_cache(maxsize=4096)
def _partition(transactional_id):
    return transaction_partition_for(transactional_id, TRANSACTIONS_PARTITIONS)


class StoredTransaction(NamedTuple):
    """An id's latest record: its offset in the partition and its value (None: the id's
    tombstone, it expired)."""
    offset: int
    value: Optional[TransactionLogValue]


def transaction_record(transactional_id, value, timestamp=None, headers=()):
    """The ``__transaction_state`` record of ``value`` (a TransactionLogValue; None: the
    id's tombstone), with record ``headers`` (Kafka's coordinator reads only the key and
    the value)."""
    return Record(key=encode_transaction_key(transactional_id),
                  value=None if value is None else encode_transaction_value(value),
                  timestamp=now_ms() if timestamp is None else timestamp, headers=headers)


def read_transaction_records(records, into=None, *, where=TRANSACTIONS_TOPIC):
    """``{transactional id: StoredTransaction}`` of ``records`` (a partition's, oldest
    first, each read once), added over ``into`` (a previous result, updated in place). The
    ids are in the order of their latest records."""
    latest = {} if into is None else into
    skipped, last = 0, None
    for rec in records:
        try:
            transactional_id = decode_transaction_key(rec.key)
            if transactional_id is None:
                continue
            stored = StoredTransaction(rec.offset, decode_transaction_value(rec.value))
            latest.pop(transactional_id, None)
            latest[transactional_id] = stored
        except CorruptRecordError as exc:
            skipped, last = skipped + 1, exc
    if skipped:
        log.warning("%s: skipped %d unreadable transaction state record(s), last: %s",
                    where, skipped, last)
    return latest


class TransactionStateStore:
    """The latest transaction state record of every id of a data dir (``database``);
    caches what it has read of each partition. See the module docstring.

    The topic is created (with Kafka's configs for it and 50 partitions) on the first
    write, as a Kafka broker creates it on the first FindCoordinator for a transactional
    id. Every log is used under a lease (log_manager.py)."""

    def __init__(self, database):
        self.db = database
        self._lock = threading.Lock()
        self._read_upto = {}   # partition -> next offset to read
        self._latest = {}      # partition -> {transactional id: StoredTransaction}
        # partition -> the coordinator epoch last read from its leader-epoch checkpoint
        # (transaction_recovery.coordinator_epoch says when it is read again)
        self.coordinator_epochs = {}

    @staticmethod
    def partition_for(transactional_id):
        return _partition(transactional_id)

    def _catch_up(self, partition, log_):
        start = max(self._read_upto.get(partition, 0), log_.start_offset)
        latest = self._latest.setdefault(partition, {})
        if start >= log_.end_offset:
            return
        end = [start]

        def counted(records):
            for rec in records:
                end[0] = rec.offset + 1
                yield rec
        read_transaction_records(counted(log_.read(start)), latest,
                                 where=f"{TRANSACTIONS_TOPIC}-{partition}")
        # Only what was read: a record another process appends meanwhile is read next time.
        self._read_upto[partition] = end[0]

    def partition_states(self, partition, newer_than=-1):
        """``{transactional id: StoredTransaction}`` of one partition, caught up with every
        process's writes (tombstoned ids included, with value None); with ``newer_than``
        only the ids whose latest record lies past that offset."""
        with self._lock:
            if self.db.topics.get(TRANSACTIONS_TOPIC) is None:
                return {}
            with self.db.leased_log(TRANSACTIONS_TOPIC, partition) as log_:
                self._catch_up(partition, log_)
            newer = {}
            for transactional_id, stored in reversed(self._latest.get(partition, {}).items()):
                if stored.offset <= newer_than:
                    break                     # the ids are in the order of their records
                newer[transactional_id] = stored
            return newer

    def state(self, transactional_id):
        """The id's latest TransactionLogValue, or None (never written, or expired)."""
        stored = self.partition_states(self.partition_for(transactional_id)).get(
            transactional_id)
        return None if stored is None else stored.value

    def end_offset(self, transactional_id, lease=None):
        """The log end offset of the id's partition (0 before the topic exists): a writer
        that knows where its last record ended learns from it that nobody wrote since.
        ``lease`` (default ``db.leased_log``) gives the partition's log: a transaction
        passes the one it holds for its whole life."""
        if self.db.topics.get(TRANSACTIONS_TOPIC) is None:
            return 0
        with (lease or self.db.leased_log)(TRANSACTIONS_TOPIC,
                                           self.partition_for(transactional_id)) as log_:
            return log_.end_offset

    def write(self, transactional_id, value, timestamp=None, *, headers=(), lease=None):
        """Append the id's record (``value`` None: its tombstone; ``headers``: the record's)
        and return its offset. The caller is the id's coordinator for this write (a
        broker, or the embedded transaction that owns the id): nothing here arbitrates
        between two writers of one id."""
        return self.write_all(transactional_id, [value], timestamp, headers=headers,
                              lease=lease)

    def write_all(self, transactional_id, values, timestamp=None, *, headers=(), lease=None):
        """Append the id's records of ``values`` (in order, one append, each with
        ``headers``) as :meth:`write` does; the offset of the first. ``lease`` as for
        :meth:`end_offset`."""
        self.db.check_writable_topic(TRANSACTIONS_TOPIC, "write the transaction state of "
                                     f"{transactional_id!r} into")
        if self.db.topics.get(TRANSACTIONS_TOPIC) is None:
            self.db.create_topic(TRANSACTIONS_TOPIC, TRANSACTIONS_PARTITIONS,
                                 TRANSACTIONS_CONFIG, exist_ok=True)
        with (lease or self.db.leased_log)(TRANSACTIONS_TOPIC,
                                           self.partition_for(transactional_id)) as log_:
            return log_.append([transaction_record(transactional_id, value, timestamp, headers)
                                for value in values])
