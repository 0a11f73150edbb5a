"""The shared state record in ``.kqlite-state``: what every process must agree on.

A writer rewrites it (64 bytes, one pwrite) at the end of every change while
holding the exclusive lock; any process reads it to learn the log end offset,
the active segment's size and whether segments were added or removed
(``generation``). It also remembers the recovery point after each fsync and the
clean-shutdown flag, so a process that dies mid-append is detected by the next
opener. The record carries its own CRC-32C: a torn or foreign file reads as
"unknown", which only means more recovery work, never lost data.

Layout (big-endian): magic "KQST", u16 version, u16 flags (bit 0: clean
shutdown), i64 generation, i64 next_offset, i64 active_base, i64 active_size,
i64 log_start_offset, i64 recovery_point, u32 crc32c of the preceding 60 bytes.
"""

import struct
from collections import namedtuple

from .. import _native

__all__ = ["State", "read_state", "write_state", "STATE_SIZE", "FLAG_CLEAN"]

_LAYOUT = struct.Struct(">4sHHqqqqqq")
_CRC = struct.Struct(">I")
STATE_SIZE = _LAYOUT.size + _CRC.size
_MAGIC = b"KQST"
_VERSION = 1
FLAG_CLEAN = 1

State = namedtuple("State", "flags generation next_offset active_base active_size "
                            "log_start_offset recovery_point")


def read_state(file):
    """The State in ``file``, or None if it is empty, torn or not a kqlite state file."""
    raw = file.pread(STATE_SIZE, 0)
    if len(raw) != STATE_SIZE:
        return None
    fields = _LAYOUT.unpack_from(raw)
    if fields[0] != _MAGIC or fields[1] != _VERSION:
        return None
    if _CRC.unpack_from(raw, _LAYOUT.size)[0] != _native.crc32c(raw[:_LAYOUT.size]):
        return None
    return State(*fields[2:])


def write_state(file, state, sync=False):
    raw = _LAYOUT.pack(_MAGIC, _VERSION, *state)
    file.pwrite(raw + _CRC.pack(_native.crc32c(raw)), 0)
    if sync:
        file.sync()
