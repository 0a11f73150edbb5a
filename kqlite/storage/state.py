"""The shared state record in ``.kqlite-state``: what every process must agree on.

A writer rewrites it (64 bytes, one pwrite) at the end of every change while
holding the exclusive lock; any process reads it to learn the log end offset,
the active segment's size and whether segments were added or removed
(``generation``). It also remembers the recovery point after each fsync and the
clean-shutdown flag, so a process that dies mid-append is detected by the next
opener, and the *first unstable offset* (the first offset of the oldest transaction
that is undecided, or decided with its marker not yet below the writer's high
watermark; -1 for none), so that a process whose own producer state is not loaded
or not current still knows where read_committed reads stop (Log.last_stable_offset).
The record carries its own CRC-32C: a torn or foreign file reads as "unknown",
which only means more recovery work, never lost data.

Layout, version 2 (big-endian): magic "KQST", u16 version, u16 flags (bit 0: clean
shutdown), i64 generation, i64 next_offset, i64 active_base, i64 active_size,
i64 log_start_offset, i64 recovery_point, i64 first_unstable_offset, u32 crc32c
of the preceding 64 bytes. Version 1 (written before kqlite had transactions) is
the same without first_unstable_offset (a CRC over 56 bytes); it reads with the
first unstable offset UNKNOWN_UNSTABLE, and the opener then loads the producer
state to learn it.

Mapped in memory
----------------
On a real file system (``OsFile``) the first page of the file is also mapped
shared (:func:`map_state`, shared_page.py), so the record is published and read with a store and
a load, no system call (Linux keeps ``mmap`` and ``pread``/``pwrite`` of one file
coherent, so a process reading it with pread sees the same bytes). A reader can
catch a writer's store half done: the CRC tells, and the read is retried. The
same page holds two words of the write-lock handoff (lock_handoff.py), outside
the CRC: u32 *want* at WANT_AT and u64 *turn* at TURN_AT (native byte order, as
shared memory, never read by another machine), past the record. The file is grown
to one page for this; readers of the record ignore what follows it.
"""

import struct
from collections import namedtuple

from .. import _native
from .fs import OsFile
from .shared_page import PAGE_SIZE, map_page

__all__ = ["State", "read_state", "write_state", "publish", "map_state", "STATE_SIZE", "FLAG_CLEAN",
           "WANT_AT", "TURN_AT", "NO_UNSTABLE", "UNKNOWN_UNSTABLE"]

_LAYOUT = struct.Struct(">4sHHqqqqqqq")
_LAYOUT_V1 = struct.Struct(">4sHHqqqqqq")
_CRC = struct.Struct(">I")
STATE_SIZE = _LAYOUT.size + _CRC.size
_MAGIC = b"KQST"
_VERSION = 2
FLAG_CLEAN = 1
NO_UNSTABLE = -1          # no transaction holds the last stable offset back
UNKNOWN_UNSTABLE = -2     # a version-1 record: nobody said
WANT_AT = 128
TURN_AT = 136
_TORN_RETRIES = 100     # a writer's 68-byte store takes nanoseconds

State = namedtuple("State", "flags generation next_offset active_base active_size "
                            "log_start_offset recovery_point first_unstable_offset")


def map_state(file):
    """The first page of the state ``file`` mapped shared (shared_page.SharedPage), or None
    when ``file`` is not a real OS file (a test's file-system seam keeps its own books of
    every write) or the platform cannot map it."""
    if type(file) is not OsFile:
        return None
    if file.size() < PAGE_SIZE:
        file.truncate(PAGE_SIZE)      # growing only: concurrent openers may do it too
    return map_page(file.fileno())


def read_raw(file, mapped=None):
    """The record's bytes as stored (STATE_SIZE of them, or fewer for a short file)."""
    if mapped is None:
        return file.pread(STATE_SIZE, 0)
    return mapped[:STATE_SIZE].tobytes()


def read_state(file, mapped=None):
    """The State in ``file`` (through its mapping ``mapped`` if given), or None if it is
    empty, torn or not a kqlite state file."""
    raw = read_raw(file, mapped)
    state = _parse(raw)
    if state is not None or mapped is None:
        return state
    for _ in range(_TORN_RETRIES):
        if raw[:4] != _MAGIC:
            return None
        raw = mapped[:STATE_SIZE].tobytes()     # caught a writer mid-store: look again
        state = _parse(raw)
        if state is not None:
            return state
    return None


def _parse(raw):
    version = raw[4:6]
    layout = _LAYOUT if version == b"\x00\x02" else _LAYOUT_V1 if version == b"\x00\x01" \
        else None
    if layout is None or raw[:4] != _MAGIC or len(raw) < layout.size + _CRC.size:
        return None
    if _CRC.unpack_from(raw, layout.size)[0] != _native.crc32c(raw[:layout.size]):
        return None
    fields = layout.unpack_from(raw)
    if layout is _LAYOUT_V1:
        return State(*fields[2:], UNKNOWN_UNSTABLE)
    return State(*fields[2:])


def write_state(file, state, sync=False, mapped=None):
    publish(file, mapped, *state, sync=sync)


def publish(file, mapped, flags, generation, next_offset, active_base, active_size,
            log_start_offset, recovery_point, first_unstable_offset, sync=False):
    """:func:`write_state` from the fields (the one-record append's path: no State)."""
    raw = _LAYOUT.pack(_MAGIC, _VERSION, flags, generation, next_offset, active_base,
                       active_size, log_start_offset, recovery_point, first_unstable_offset)
    raw += _CRC.pack(_native.crc32c(raw))
    if mapped is None:
        file.pwrite(raw, 0)
    else:
        mapped[:STATE_SIZE] = raw
    if sync:
        file.sync()     # fdatasync writes the mapping's dirty page too
