"""A segment's transaction index: Kafka's ``.txnindex`` (``TransactionIndex``, ``AbortedTxn``).

Theory of operation
-------------------
A read_committed reader must leave out the batches of aborted transactions. Which
ones those are is said by the ABORT markers, which may lie far past the data they
cancel; so each partition keeps, per segment, the list of the transactions aborted
there: one entry per ABORT marker that closed a non-empty transaction, appended to
the ``.txnindex`` of the segment holding the marker when the marker is appended
(on a leader and on a follower alike: appending.py). Reads collect the entries that
overlap what they return (:meth:`TransactionIndex.collect`, Kafka's
``collectAbortedTxns``) and the reader skips those producers' transactional batches
between an entry's first offset and its marker.

The file (ON-DISK: Kafka's; ``<20-digit base offset>.txnindex``) has no header and no
checksum: entries of 34 bytes, big-endian, with strictly increasing last offsets::

    version              int16   0 (a reader takes the version from the first byte)
    producer_id          int64
    first_offset         int64   the transaction's first offset
    last_offset          int64   its ABORT marker's offset
    last_stable_offset   int64   the LSO when the marker was appended: the first offset
                                 of the earliest other producer's open transaction,
                                 else the marker's offset + 1 (producer_state.py)

It is created at the first entry (most segments never have one). Like the offset and
time indexes it is derived from the ``.log``, but only *segment recovery* rebuilds it
(loader.py: segments at or above the recovery point after an unclean shutdown, a
segment whose ``.index`` was missing or whose ``.txnindex`` fails :meth:`sane`);
compaction copies the entries of the ABORT markers it keeps (cleaner.py). A
truncation drops the entries of markers at or past the new end; the file goes with
its segment (retention, DeleteRecords, a compaction swap). It is fsynced whenever its
segment's data is (segment.py), so an entry below the recovery point is durable.

Processes sharing a log: an entry is written before the shared state publishes its
marker (sharing.py), so a reader that has caught up with a segment's size finds every
entry of the markers below it in the file. The entries are read on first use and kept;
catching up with another process's appends to the segment (sharing.catch_up) forgets
them (:meth:`invalidate`), and the next use reads the file again.
"""

import os
import struct
from typing import NamedTuple

from ..errors import CorruptRecordError

__all__ = ["AbortedTxn", "AbortedTransaction", "TransactionIndex", "TXNINDEX_SUFFIX", "ENTRY",
           "encode_entries", "decode_entries"]

TXNINDEX_SUFFIX = ".txnindex"      # ON-DISK: Kafka's LogFileUtils.TXN_INDEX_FILE_SUFFIX
ENTRY = struct.Struct(">hqqqq")    # ON-DISK: AbortedTxn, 34 bytes
_VERSION = 0                       # AbortedTxn.CURRENT_VERSION


class AbortedTxn(NamedTuple):
    """One entry: an aborted transaction of ``producer_id`` from ``first_offset`` to its
    ABORT marker at ``last_offset``, and the last stable offset at that marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class AbortedTransaction(NamedTuple):
    """What a read_committed Fetch answers per aborted transaction (Fetch v4+'s
    AbortedTransactions: ProducerId, FirstOffset)."""

    producer_id: int
    first_offset: int


def encode_entries(entries):
    """The file bytes of ``entries`` (AbortedTxn, in order)."""
    return b"".join(ENTRY.pack(_VERSION, *e) for e in entries)


def decode_entries(data, path=None):
    """The AbortedTxns of a ``.txnindex`` file's bytes (a partial entry at the end, which a
    write cut short, is left out). CorruptRecordError for a version above 0, as Kafka's
    reader refuses one ("Unexpected aborted transaction version")."""
    out = []
    for at in range(0, len(data) - len(data) % ENTRY.size, ENTRY.size):
        version = data[at]       # Kafka reads the version field's first byte only
        if version > _VERSION:
            raise CorruptRecordError(f"unexpected aborted transaction version {version}",
                                     path=path, position=at)
        out.append(AbortedTxn._make(ENTRY.unpack_from(data, at)[1:]))
    return out


class TransactionIndex:
    """The ``.txnindex`` of the segment at ``base_offset``; see the module docstring. The
    owning Log serialises access (its thread lock)."""

    __slots__ = ("fs", "path", "base_offset", "_entries", "_file", "_dirty")

    def __init__(self, fs, path, base_offset):
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self._entries = None      # read on first use, and after invalidate()
        self._file = None
        self._dirty = False

    def entries(self):
        """The entries (a list the caller must not change), read from the file on first
        use and after :meth:`invalidate`."""
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def invalidate(self):
        """Another process may have appended entries: read the file again at next use."""
        self._entries = None

    def _read(self):
        if self._file is not None:
            data = self._file.pread(self._file.size(), 0)
        elif self.fs.exists(self.path):
            f = self.fs.open(self.path)
            try:
                data = f.pread(f.size(), 0)
            finally:
                f.close()
        else:
            return []
        return decode_entries(data, self.path)

    def sane(self):
        """Kafka's ``sanityCheck``, and whole entries: False when an entry's marker lies
        below the segment's base offset or the file ends inside an entry (recovery then
        rebuilds it)."""
        if self._file is not None:
            size = self._file.size()
        elif self.fs.exists(self.path):
            size = self.fs.file_size(self.path)
        else:
            return True
        if size % ENTRY.size:
            return False
        try:
            return all(e.last_offset >= self.base_offset for e in self.entries())
        except CorruptRecordError:
            return False

    def append(self, entry):
        """Write one AbortedTxn at the end; its last offset must exceed the last entry's
        (ValueError otherwise, as Kafka's IllegalArgumentException)."""
        entries = self.entries()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"the last offset of appended aborted transaction {entry} is "
                             f"not above the last offset {entries[-1].last_offset} of "
                             f"{self.path}")
        if self._file is None:
            self._file = self.fs.open(self.path, create=True)
        self._file.pwrite(ENTRY.pack(_VERSION, *entry), len(entries) * ENTRY.size)
        self._dirty = True
        entries.append(entry)

    def truncate_to(self, offset):
        """Drop the entries whose marker is at or past ``offset``."""
        entries = self.entries()
        keep = 0
        while keep < len(entries) and entries[keep].last_offset < offset:
            keep += 1
        if keep == len(entries):
            return
        self._truncate(keep)

    def reset(self):
        """Forget every entry (recovery rebuilds them)."""
        if self._entries or self._file is not None or self.fs.exists(self.path):
            self._truncate(0)
        self._entries = []

    def _truncate(self, keep):
        if self._file is None:
            self._file = self.fs.open(self.path, create=True)
        self._file.truncate(keep * ENTRY.size)
        self._dirty = True
        del self.entries()[keep:]

    def write_all(self, entries):
        """Replace the file's content with ``entries`` (a cleaned segment's copy)."""
        self._truncate(0)
        for entry in entries:
            self.append(entry)

    @property
    def exists(self):
        return self._file is not None or self.fs.exists(self.path)

    def collect(self, fetch_offset, upper_bound):
        """Kafka's ``collectAbortedTxns``: ``(entries, complete)`` -- every entry whose
        marker is at or past ``fetch_offset`` and whose first offset is below
        ``upper_bound``; ``complete`` once an entry's last stable offset reaches
        ``upper_bound`` (no later segment can hold a transaction that overlaps), after
        considering that entry."""
        found = []
        for entry in self.entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def sync(self):
        if self._dirty and self._file is not None:
            self._file.sync()
            self._dirty = False

    @property
    def dirty(self):
        return self._dirty

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def delete(self):
        self.close()
        if self.fs.exists(self.path):
            self.fs.remove(self.path)
        self._entries = []

    def __repr__(self):
        return f"TransactionIndex({os.path.basename(self.path)})"
