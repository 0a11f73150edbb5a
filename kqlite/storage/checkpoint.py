"""Kafka's text checkpoint files, written crash-safely.

Format (ON-DISK, Kafka's ``CheckpointFile``)::

    <version>\n
    <entry count>\n
    <entry>\n ...

where an entry is ``topic partition offset`` (recovery point, log start offset,
replication offset, cleaner offset) or ``epoch startOffset`` (leader epochs).

Writes go to ``<file>.tmp``, are fsynced, renamed over the file and the directory
is fsynced, as Kafka's ``Utils.atomicMoveWithFallback`` does: after a crash the
file holds the old or the new contents, never a mix. A missing file reads as no
entries; a malformed one raises CorruptRecordError naming the file and line.
"""

from ..errors import CorruptRecordError
from .fs import atomic_write

__all__ = ["read_checkpoint", "write_checkpoint", "read_offsets", "update_offsets",
           "CHECKPOINT_VERSION"]

CHECKPOINT_VERSION = 0  # ON-DISK: Kafka's checkpoint version


def read_checkpoint(fs, path, fields=3):
    """Return the entries of a checkpoint file as lists of ``fields`` strings."""
    if not fs.exists(path):
        return []
    f = fs.open(path)
    try:
        text = f.pread(f.size(), 0).decode("utf-8", "replace")
    finally:
        f.close()
    lines = text.split("\n")
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (ValueError, IndexError):
        raise CorruptRecordError("malformed checkpoint header", path=path) from None
    if version != CHECKPOINT_VERSION:
        raise CorruptRecordError(f"unknown checkpoint version {version}", path=path)
    entries = []
    for n, line in enumerate(lines[2:2 + count], start=3):
        parts = line.split(" ")
        if len(parts) != fields:
            raise CorruptRecordError(f"line {n}: expected {fields} fields in {line!r}", path=path)
        entries.append(parts)
    if len(entries) != count:
        raise CorruptRecordError(f"expected {count} entries, found {len(entries)}", path=path)
    return entries


def write_checkpoint(fs, path, entries):
    """Atomically replace ``path`` with the given entries (sequences of values)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(" ".join(str(v) for v in entry) for entry in entries)
    atomic_write(fs, path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_offsets(fs, path):
    """A ``topic partition offset`` checkpoint as ``{(topic, partition): offset}``."""
    try:
        return {(t, int(p)): int(o) for t, p, o in read_checkpoint(fs, path)}
    except ValueError:
        raise CorruptRecordError("non-numeric partition or offset", path=path) from None


def update_offsets(fs, path, changes):
    """Merge ``{(topic, partition): offset or None}`` into a checkpoint (None removes).

    Callers serialise concurrent updates (the data-dir lock).
    """
    try:
        current = read_offsets(fs, path)
    except CorruptRecordError:
        current = {}  # a checkpoint is advisory: rebuilding it from the logs is always safe
    for tp, offset in changes.items():
        if offset is None:
            current.pop(tp, None)
        else:
            current[tp] = offset
    write_checkpoint(fs, path, [(t, p, o) for (t, p), o in sorted(current.items())])
