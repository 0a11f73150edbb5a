"""Remembering a failed fsync of a segment until recovery has written its pages back.

Theory of operation
-------------------
After a failed fsync Linux marks the pages it could not write clean: they stay
readable from the page cache until evicted, and no later fsync writes them
("fsyncgate"). Recovery would validate those bytes, keep them, and a later power
cut would take them from under newer, acknowledged records. The cure is to write
the kept bytes again before fsyncing them (PostgreSQL's), but on every unclean open
that doubles the work of recovery and makes it fsync everything the killed writer
left in the page cache, although only a failed fsync leaves pages in that state.

So the failure is remembered, and recovery writes back only when one is
remembered. :func:`note` is called when a segment's fdatasync fails: it records the
segment's base offset (the pages of that segment and of any later one may be lost)
in this process's memory and in the marker file ``.kqlite-fsync-failed`` of the
partition directory. The marker is written to the page cache only, never fsynced: it
must outlive the process (another process may recover the log), not the machine,
since a reboot empties the page cache and with it the pages that were lost; if the
disk refuses even that write, this process still knows. :func:`pending` tells the
next recovery from which offset to write back; :func:`clear` forgets the failure
once the written-back bytes are fsynced.
"""

import logging
import os
import threading

__all__ = ["note", "pending", "clear", "MARKER"]

MARKER = ".kqlite-fsync-failed"   # kqlite's own file (Kafka ignores it)

log = logging.getLogger("kqlite.storage")

_lock = threading.Lock()
_noted = {}      # partition directory -> lowest base offset of a segment whose fsync failed


def note(fs, directory, base_offset):
    """A segment of the log in ``directory`` starting at ``base_offset`` failed its
    fdatasync. Never raises: the caller is already reporting the failure."""
    with _lock:
        low = min(_noted.get(directory, base_offset), base_offset)
        _noted[directory] = low
    path = os.path.join(directory, MARKER)
    try:
        stored = _read(fs, path)
        if stored is not None:
            low = min(low, stored)
        f = fs.open(path, create=True)
        try:
            f.truncate(0)
            f.pwrite(b"%d\n" % low, 0)
        finally:
            f.close()
    except OSError as exc:
        log.error("%s: cannot record that an fsync failed (%s); only this process will "
                  "write the unsynced records back when it reopens the log", directory, exc)


def pending(fs, directory):
    """The offset from which recovery must write the log back before fsyncing it, or
    None when no failed fsync is remembered."""
    with _lock:
        low = _noted.get(directory)
    try:
        stored = _read(fs, os.path.join(directory, MARKER))
    except OSError:
        stored = None
    if stored is not None:
        low = stored if low is None else min(low, stored)
    return low


def clear(fs, directory):
    """Recovery has written back and fsynced everything :func:`pending` asked for."""
    with _lock:
        _noted.pop(directory, None)
    path = os.path.join(directory, MARKER)
    if fs.exists(path):
        fs.remove(path)


def _read(fs, path):
    """The offset in the marker file at ``path``; 0 (everything) when it is unreadable,
    None when there is none."""
    if not fs.exists(path):
        return None
    f = fs.open(path)
    try:
        text = f.pread(32, 0)
    finally:
        f.close()
    try:
        return max(0, int(text))
    except ValueError:
        return 0    # torn: assume the worst
