"""Where the embedded API keeps things in a data dir (names spelled once, here).

A data dir is a Kafka ``log.dirs`` directory: one ``<topic>-<partition>``
directory per partition, Kafka's checkpoints and ``meta.properties``. What Kafka
keeps in ZooKeeper or on the group coordinator, kqlite keeps under ``.kqlite/``:

``.kqlite/topics/<topic>.json``     topic definitions (see topic_store.py)
``.kqlite/deleting/<topic>.<id>``   a topic deletion in progress (see database.py)
``.kqlite/groups/<group>/``         consumer-group membership (see groups.py)
``.kqlite/transactions/<h>.owner``  transactional ids the embedded API owns, and their
``.kqlite/transactions/<h>.lock``   owners' locks (see transaction_owners.py)

and other layers add their own entries (the broker's producer ids, the Spark sink).
"""

import os

from ..storage.fs import atomic_write
from .topic_names import check_topic_name

__all__ = ["META_DIR", "meta_dir", "partition_dir", "PARTITION_METADATA",
           "read_partition_metadata", "write_partition_metadata"]

META_DIR = ".kqlite"
PARTITION_METADATA = "partition.metadata"   # ON-DISK: Kafka's name and text format


def meta_dir(data_dir, *parts):
    """``<data_dir>/.kqlite/<parts...>``."""
    return os.path.join(data_dir, META_DIR, *parts)


def partition_dir(data_dir, topic, partition):
    """``<data_dir>/<topic>-<partition>``; raises InvalidTopicError for a name that
    would put it anywhere else."""
    check_topic_name(topic)
    if not isinstance(partition, int) or partition < 0:
        raise ValueError(f"a partition is a non-negative integer, not {partition!r}")
    return os.path.join(data_dir, f"{topic}-{partition}")


def read_partition_metadata(fs, pdir):
    """The topic id a partition directory says it belongs to; None when the file is
    missing or unreadable (it is rewritten from the topic definition then)."""
    try:
        f = fs.open(os.path.join(pdir, PARTITION_METADATA))
    except FileNotFoundError:
        return None
    try:
        text = f.pread(4096, 0).decode("utf-8", "replace")
    finally:
        f.close()
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return fields.get("topic_id") if fields.get("version") == "0" else None


def write_partition_metadata(fs, pdir, topic_id):
    # Not fsynced: the topic definition is the truth and a lost or torn file is rewritten
    # from it the next time the partition is opened.
    atomic_write(fs, os.path.join(pdir, PARTITION_METADATA),
                 f"version: 0\ntopic_id: {topic_id}\n".encode(), durable=False)
