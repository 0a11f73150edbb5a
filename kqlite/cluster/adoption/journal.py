"""The record of one adoption in progress, ``<data dir>/.kqlite/adoption/journal.json``.

Theory of operation
-------------------
An adoption changes two places that cannot change together, ZooKeeper and the data dir,
and it changes the data dir in several files. The journal is written (durably: temporary
file, fsync, rename, directory fsync) once every check has passed and before the first
change, and it holds everything the later steps need, so a broker that restarts after a
crash never plans again from a half-changed dir: it reads the journal and runs the
remaining steps (steps.py), each of which is idempotent.

    field               what
    version             1
    state               the last step completed (steps.py's STEPS names)
    broker_id           the adopting broker
    cluster_id          the cluster's id (meta.properties gets it)
    topics              [{name, topic_id, replicas: {p: [ids]}, config}], as registered
    high_watermarks     {topic: {partition: log end at planning}}: every embedded record
                        is committed, so the adopted HW is the log end
    offsets             {group: [[topic, partition, offset, leader epoch, metadata]]}:
                        the committed offsets to carry into the cluster (carry_offsets.py)
    set_aside           the internal partition dirs (and topic definitions) moved under
                        ``.kqlite/adoption/set-aside``: never replicas of the cluster's
                        internal topics

The journal is removed when the last step (the offsets carried) is done, and with it the
set-aside dirs. A data dir with a journal is an adoption in progress whatever else it
holds; ``kqlite.open()`` sees the replicated mark once step ``identity`` has run.
"""

import json
import os
import shutil

from ...db.layout import meta_dir
from ...errors import KqliteError
from ...storage.fs import atomic_write

__all__ = ["JOURNAL_VERSION", "journal_path", "set_aside_dir", "read_journal",
           "write_journal", "remove_journal", "JournalError"]

JOURNAL_VERSION = 1


class JournalError(KqliteError):
    """The adoption journal cannot be read: the adoption cannot resume by itself."""


def journal_path(data_dir):
    return meta_dir(data_dir, "adoption", "journal.json")


def set_aside_dir(data_dir, *parts):
    return meta_dir(data_dir, "adoption", "set-aside", *parts)


def read_journal(fs, data_dir):
    """The journal's dict, or None when no adoption is in progress."""
    path = journal_path(data_dir)
    if not fs.exists(path):
        return None
    f = fs.open(path)
    try:
        data = f.pread(f.size(), 0)
    finally:
        f.close()
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise JournalError(f"{path} is damaged ({exc}): remove it to plan the adoption "
                           f"again, after checking ZooKeeper's topics") from None
    if not isinstance(doc, dict) or doc.get("version") != JOURNAL_VERSION:
        raise JournalError(f"{path} is not an adoption journal this kqlite reads")
    return doc


def write_journal(fs, data_dir, doc):
    fs.makedirs(os.path.dirname(journal_path(data_dir)))
    atomic_write(fs, journal_path(data_dir),
                 json.dumps(dict(doc, version=JOURNAL_VERSION), sort_keys=True).encode())


def remove_journal(fs, data_dir):
    """Remove the set-aside dirs, then the journal (last: a crash in between leaves a
    journal whose set-aside dirs are partly gone, which the removal does again)."""
    root = set_aside_dir(data_dir)
    if fs.exists(root):
        # The file-system seam has no directory removal: these are whole partition dirs
        # the cluster never reads, removed as a tool would remove them.
        shutil.rmtree(root)
    path = journal_path(data_dir)
    if fs.exists(path):
        fs.remove(path)
        fs.fsync_dir(os.path.dirname(path))

