"""The group metadata records of a data dir's ``__consumer_offsets``: written and read back
by the single broker's group coordinator (the records: ``kqlite.format.group_records``).
"""

import logging
import threading

from ..errors import CorruptRecordError
from ..format.batch import now_ms
from ..format.group_records import (decode_group_key, decode_group_value, encode_group_key,
                                    encode_group_value)
from ..format.internal_topics import OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC
from ..format.record import Record
from .offsets import _partition as group_partition

__all__ = ["GroupMetadataStore", "MAX_GROUP_RECORD_BYTES"]

log = logging.getLogger("kqlite.db")

# Kafka's max.message.bytes default for __consumer_offsets (1 MiB + batch overhead): Kafka
# refuses to store a larger group record, so the group is not persisted.
MAX_GROUP_RECORD_BYTES = 1048588


# -- The store --------------------------------------------------------------------------------

class GroupMetadataStore:
    """Writes and reads the group metadata records of a data dir (blocking: run it in a
    storage thread)."""

    def __init__(self, database):
        self.db = database
        self._lock = threading.Lock()

    def store(self, group, value):
        """Append ``value`` (a :class:`GroupMetadataValue`, or None: a tombstone) for
        ``group``. Returns False, storing nothing, when the record is larger than Kafka
        would store."""
        key = encode_group_key(group)
        data = None if value is None else encode_group_value(value)
        if data is not None and len(key) + len(data) > MAX_GROUP_RECORD_BYTES:
            log.warning("group %s: the metadata of generation %d is %d bytes, over the %d "
                        "Kafka stores; not persisted", group, value.generation, len(data),
                        MAX_GROUP_RECORD_BYTES)
            return False
        if self.db.topics.get(OFFSETS_TOPIC) is None:
            self.db.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG,
                                 exist_ok=True)
        with self.db.leased_log(OFFSETS_TOPIC, group_partition(group)) as log_:
            log_.append([Record(key=key, value=data, timestamp=now_ms())])
        return True

    def load(self):
        """``{group: GroupMetadataValue}`` of every group whose latest record is not a
        tombstone. A record that cannot be decoded is logged and skipped."""
        groups = {}
        with self._lock:
            if self.db.topics.get(OFFSETS_TOPIC) is None:
                return groups
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.leased_log(OFFSETS_TOPIC, p) as log_:
                    for rec in log_.read(log_.start_offset):
                        self._apply(groups, p, rec)
        return groups

    @staticmethod
    def _apply(groups, partition, rec):
        try:
            group = decode_group_key(rec.key)
            if group is None:
                return
            if rec.value is None:
                groups.pop(group, None)
            else:
                groups[group] = decode_group_value(rec.value)
        except CorruptRecordError as e:
            log.warning("%s-%d offset %d: skipping a group metadata record: %s", OFFSETS_TOPIC,
                        partition, rec.offset, e)
