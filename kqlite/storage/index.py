"""Sparse offset and time indexes (``.index`` / ``.timeindex``), byte-compatible with Kafka.

An index is a cache of the ``.log`` file, never the truth: it carries no
checksum and is rebuilt from the log whenever it is missing or fails its sanity
check (Kafka's OffsetIndex says the same). Entries are kept in memory as their
raw big-endian bytes so the binary search runs over them directly, and each new
entry is written through to the file at its slot.

``.index`` entry:     int32 offset - baseOffset, int32 position in the .log
``.timeindex`` entry: int64 timestamp, int32 offset - baseOffset
(ON-DISK: Kafka-defined.) kqlite grows index files entry by entry instead of
preallocating them, so a file's size is always a whole number of entries.
"""

import struct

from .. import _native
from ..format.constants import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE

__all__ = ["OffsetIndex", "TimeIndex", "OFFSET_ENTRY", "TIME_ENTRY"]

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class _Index:
    entry = None       # struct of one entry
    entry_size = 0

    def __init__(self, fs, path, base_offset, max_bytes, data=b""):
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry_size)
        self.buf = bytearray(data)
        self._file = None
        self._dirty = False

    @property
    def count(self):
        return len(self.buf) // self.entry_size

    def is_full(self):
        return self.count >= self.max_entries

    def entry_at(self, slot):
        return self.entry.unpack_from(self.buf, slot * self.entry_size)

    def _floor(self, key):
        return _native.index_search(self.buf, self.count, self.entry_size, key)

    def _write(self, raw, write=True):
        if not write:  # a rebuild collects entries in memory and writes the file once
            self.buf += raw
            return
        if self._file is None:
            self._file = self.fs.open(self.path, create=True)
        self._file.pwrite(raw, len(self.buf))
        self.buf += raw
        self._dirty = True

    def truncate_entries(self, count):
        """Keep only the first ``count`` entries, in memory and on disk."""
        if count >= self.count:
            return
        del self.buf[count * self.entry_size:]
        if self._file is None and self.fs.exists(self.path):
            self._file = self.fs.open(self.path)
        if self._file is not None:
            self._file.truncate(len(self.buf))
            self._dirty = True

    def reload_tail(self):
        """Pick up entries another process appended to the file since we last looked."""
        if not self.fs.exists(self.path):
            return
        f = self._file or self.fs.open(self.path)
        try:
            have = len(self.buf)
            size = f.size()
            whole = size - (size - have) % self.entry_size
            if whole > have:
                self.buf += f.pread(whole - have, have)
        finally:
            if f is not self._file:
                f.close()

    def write_all(self):
        """Rewrite the whole file from memory (after a rebuild)."""
        if self._file is None:
            self._file = self.fs.open(self.path, create=True)
        self._file.truncate(0)
        self._file.pwrite(bytes(self.buf), 0)
        self._dirty = True

    def sync(self):
        if self._dirty and self._file is not None:
            self._file.sync()
            self._dirty = False

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    @classmethod
    def load(cls, fs, path, base_offset, max_bytes):
        """Read an index file; returns None when missing or torn (size not a whole entry)."""
        if not fs.exists(path):
            return None
        f = fs.open(path)
        try:
            size = f.size()
            data = f.pread(size, 0) if size else b""
        finally:
            f.close()
        if len(data) % cls.entry_size:
            return None
        return cls(fs, path, base_offset, max_bytes, data)


class OffsetIndex(_Index):
    entry = OFFSET_ENTRY
    entry_size = OFFSET_INDEX_ENTRY_SIZE

    def append(self, offset, position, write=True):
        self._write(OFFSET_ENTRY.pack(offset - self.base_offset, position), write)

    def lookup(self, offset):
        """(offset, position) of the last entry at or below ``offset``; (base, 0) if none."""
        slot = self._floor(offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = OFFSET_ENTRY.unpack_from(self.buf, slot * OFFSET_INDEX_ENTRY_SIZE)
        return self.base_offset + rel, pos

    def fetch_upper_bound_offset(self, position):
        """The offset of the first entry pointing at or past ``position``, None when none
        does (Kafka's OffsetIndex.fetchUpperBoundOffset: the bound of a fetch's aborted
        transactions)."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.entry_at(mid)[1] >= position:
                hi = mid
            else:
                lo = mid + 1
        if lo == self.count:
            return None
        return self.base_offset + self.entry_at(lo)[0]

    def last_position(self):
        """The file position of the last entry: 0 (the segment's start) if there is none."""
        return self.entry_at(self.count - 1)[1] if self.count else 0

    def truncate_to_position(self, position):
        """Drop entries pointing at or past ``position`` (after the log was cut there)."""
        keep = self.count
        while keep and self.entry_at(keep - 1)[1] >= position:
            keep -= 1
        self.truncate_entries(keep)

    def sane(self, log_size):
        """Kafka's sanity check: the last entry points inside the log and offsets rise."""
        if not self.count:
            return True
        slots = sorted({0, self.count - 1})
        prev_rel, prev_pos = -1, -1
        for slot in slots:
            rel, pos = self.entry_at(slot)
            if rel < 0 or rel <= prev_rel or pos <= prev_pos or pos >= log_size:
                return False
            prev_rel, prev_pos = rel, pos
        return True


class TimeIndex(_Index):
    entry = TIME_ENTRY
    entry_size = TIME_INDEX_ENTRY_SIZE

    def last_timestamp(self):
        return self.entry_at(self.count - 1)[0] if self.count else -1

    def maybe_append(self, timestamp, offset, write=True):
        """Add (timestamp, offset) only if it raises the maximum timestamp seen."""
        if timestamp > self.last_timestamp():
            self._write(TIME_ENTRY.pack(timestamp, offset - self.base_offset), write)

    def last_entry(self):
        """(timestamp, offset) of the last entry; (-1, base) if there is none."""
        if not self.count:
            return -1, self.base_offset
        ts, rel = self.entry_at(self.count - 1)
        return ts, self.base_offset + rel

    def lookup(self, timestamp):
        """(timestamp, offset) of the last entry at or below ``timestamp``; (-1, base) if none."""
        slot = self._floor(timestamp)
        if slot < 0:
            return -1, self.base_offset
        ts, rel = TIME_ENTRY.unpack_from(self.buf, slot * TIME_INDEX_ENTRY_SIZE)
        return ts, self.base_offset + rel

    def truncate_to(self, offset):
        """Drop entries whose offset is >= ``offset``."""
        keep = self.count
        while keep and self.base_offset + self.entry_at(keep - 1)[1] >= offset:
            keep -= 1
        self.truncate_entries(keep)

    def sane(self, next_offset):
        if not self.count:
            return True
        slots = sorted({0, self.count - 1})
        prev_ts, prev_rel = None, -1
        for slot in slots:
            ts, rel = self.entry_at(slot)
            if (prev_ts is not None and ts <= prev_ts) or rel < prev_rel \
                    or self.base_offset + rel >= next_offset:
                return False
            prev_ts, prev_rel = ts, rel
        return True
