"""Partition directories of topics: made with their ``partition.metadata``, removed
crash-safely when their topic is deleted.

Each ``<topic>-<partition>`` directory holds Kafka's ``partition.metadata`` naming
the topic id it belongs to. Directories are made when a topic is created and, if
missing (a power loss before they were durable), again when a partition is first
opened; a directory holding another topic id is refused, never adopted or removed
(it is data of a different topic: Kafka's ZooKeeper mode refuses it the same way).

Deleting a topic follows Kafka's ZooKeeper mode, where ``/admin/delete_topics/<topic>``
records a deletion the controller then completes:

1. record the deletion in ``.kqlite/deleting/<topic>.<topic id>.json`` (durable; the
   topic part shortened when the name would pass 255 bytes);
2. remove the definition from the topic store: the commit point, the topic is gone;
3. remove the partition directories, each one's ``partition.metadata`` last, so that
   a half-removed directory still says whose it was, and fsync the data dir;
4. remove the record.

A crash (or an I/O error) after step 1 leaves a record that
:func:`finish_pending_deletions` completes when the data dir is next opened and
before a topic is created: it removes the directories of a topic whose definition
is gone, or leaves the record alone while the definition is still there (the
deletion did not commit, or another process is in the middle of it). It removes
only directories whose ``partition.metadata`` names the deleted topic id, or that
have none while no topic of that name exists, so a topic created again under the
same name keeps its data.
"""

import json
import logging
import os

from ..errors import KqliteError, StorageError
from ..storage.fs import TMP_SUFFIX, atomic_write
from .files import make_dirs_durable, remove_tree
from .layout import (PARTITION_METADATA, meta_dir, partition_dir, read_partition_metadata,
                     write_partition_metadata)
from .topic_names import fit_file_name, valid_topic_name

__all__ = ["ensure_partition_dirs", "remove_new_partition_dirs", "record_deletion",
           "drop_deletion_record", "delete_partition_dirs", "finish_pending_deletions"]

log = logging.getLogger("kqlite")


def ensure_partition_dirs(fs, data_dir, meta, partitions):
    """Make the directories of ``partitions`` of the topic ``meta`` with their
    partition.metadata, durably; raises KqliteError for a directory of another topic."""
    made = False
    for p in partitions:
        pdir = partition_dir(data_dir, meta["name"], p)
        if not fs.exists(pdir):
            fs.makedirs(pdir)
            made = True
        found = _metadata_of(fs, pdir, meta["topic_id"])
        if found != meta["topic_id"]:
            raise KqliteError(
                f"partition directory {pdir} belongs to topic id {found}, not to topic "
                f"{meta['name']!r} (id {meta['topic_id']}): it was copied from another data "
                f"dir or cluster; move it away")
    if made:
        # A Log fsyncs the parent of a directory it makes itself; these are made here.
        fs.fsync_dir(data_dir)


# Processes opening a new topic's partition race to write its partition.metadata: all
# write the same bytes through the same temporary file, which another's rename (or a log
# opening, which removes leftover temporary files) can take away from under a writer.
_METADATA_TRIES = 3


def _metadata_of(fs, pdir, topic_id):
    """The topic id in ``pdir``'s partition.metadata, written as ``topic_id`` if missing."""
    for attempt in range(_METADATA_TRIES):
        found = read_partition_metadata(fs, pdir)
        if found is not None:
            return found
        try:
            write_partition_metadata(fs, pdir, topic_id)
            return topic_id
        except FileNotFoundError:
            if attempt == _METADATA_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def remove_new_partition_dirs(fs, data_dir, meta):
    """Take back what a failed create of topic ``meta`` made: directories holding its
    topic id, and empty ones (a directory with other contents is not ours to remove)."""
    for p in range(meta["partitions"]):
        pdir = partition_dir(data_dir, meta["name"], p)
        try:
            names = fs.listdir(pdir)
        except FileNotFoundError:
            continue
        if read_partition_metadata(fs, pdir) == meta["topic_id"] or \
                set(names) <= {PARTITION_METADATA + ".tmp"}:
            remove_tree(fs, pdir, last=(PARTITION_METADATA,))


def _deleting_dir(data_dir):
    return meta_dir(data_dir, "deleting")


def _record_path(data_dir, meta):
    # The record holds the whole definition; its name only has to be unique (the topic
    # id) and readable, so a long topic name is shortened to fit.
    return os.path.join(_deleting_dir(data_dir),
                        fit_file_name(meta["name"], f".{meta['topic_id']}.json",
                                      spare=len(TMP_SUFFIX)))


def record_deletion(fs, data_dir, meta):
    """Step 1: make the coming deletion of topic ``meta`` durable."""
    try:
        make_dirs_durable(fs, _deleting_dir(data_dir))
        atomic_write(fs, _record_path(data_dir, meta), json.dumps(meta).encode())
    except OSError as exc:
        raise StorageError(f"cannot delete topic {meta['name']!r}: {exc}") from exc


def drop_deletion_record(fs, data_dir, meta):
    """The deletion of ``meta`` did not commit: forget it."""
    try:
        fs.remove(_record_path(data_dir, meta))
    except FileNotFoundError:
        pass


def delete_partition_dirs(fs, data_dir, meta, redefined):
    """Steps 3 and 4 for the deleted topic ``meta``; ``redefined``: a topic of the same
    name exists again (its directories must stay)."""
    for p in range(meta["partitions"]):
        pdir = partition_dir(data_dir, meta["name"], p)
        if not fs.exists(pdir):
            continue
        found = read_partition_metadata(fs, pdir)
        if found == meta["topic_id"] or (found is None and not redefined):
            remove_tree(fs, pdir, last=(PARTITION_METADATA,))
    fs.fsync_dir(data_dir)
    drop_deletion_record(fs, data_dir, meta)


def finish_pending_deletions(fs, data_dir, store):
    """Complete the deletions a crash or an I/O error interrupted (see above)."""
    try:
        _finish_pending_deletions(fs, data_dir, store)
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot finish an interrupted topic deletion in {data_dir}: "
                           f"{exc}") from exc


def _finish_pending_deletions(fs, data_dir, store):
    try:
        names = fs.listdir(_deleting_dir(data_dir))
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(_deleting_dir(data_dir), name)
        try:
            f = fs.open(path)
        except FileNotFoundError:
            continue            # finished by another process meanwhile
        try:
            meta = json.loads(f.pread(f.size(), 0))
        except ValueError:
            fs.remove(path)     # torn by a crash before it was durable: never committed
            continue
        finally:
            f.close()
        if not isinstance(meta, dict) or not valid_topic_name(meta.get("name")):
            log.error("ignoring %s: it does not name a topic this data dir can hold", path)
            continue
        store.refresh(meta["name"])
        current = store.get(meta["name"])
        if current is not None and current["topic_id"] == meta["topic_id"]:
            continue
        log.info("finishing the deletion of topic %s (id %s)", meta["name"], meta["topic_id"])
        delete_partition_dirs(fs, data_dir, meta, redefined=current is not None)
