"""Replacing segments crash-safely: Kafka's ``.cleaned`` / ``.swap`` / ``.deleted`` suffixes.

Compaction (cleaner.py) writes each replacement segment as ``<base>.log.cleaned``
(+ ``.index.cleaned``, ``.timeindex.cleaned``, and ``.txnindex.cleaned`` when it
keeps ABORT markers), then :func:`swap_in` and :func:`remove_deleted` put it in
place of the segments it replaces (a segment without a ``.txnindex`` simply has no
such file at any step):

  1. write ``.cleaned`` files (log, index, timeindex) and fsync them
  2. rename every ``.cleaned`` to ``.swap``, the ``.log`` last  <- commit point
  3. fsync the directory
  4. rename every file of the replaced segments to ``.deleted``
  5. fsync the directory (so step 6 can never be durable without step 4)
  6. rename every ``.swap`` to its final name, the ``.log`` last
  7. fsync the directory
  8. remove the ``.deleted`` files

Recovery: :func:`recover_swaps` runs under the write lock when a log is opened,
when any process reloads its segment list and before a compaction (the swap holds
the write lock too, so recovery never meets a swap in progress). A
``<base>.log.swap`` is completed: every segment file whose base lies in
[base, end of the swap segment) is deleted, the directory fsynced, and the
``.swap`` files renamed into place (a missing offset or time index is rebuilt
later; a ``.txnindex`` already at its final name is the new one's, renamed before
the ``.log``, and stays: only recovery rebuilds a transaction index); index
``.swap`` files without their ``.log.swap`` are deleted. When a log is opened,
:func:`remove_stale_cleaned` deletes ``.cleaned`` files unless a compaction holds
the cleaner lock (the old segments are intact), and the Log removes ``.deleted``
files. Whatever step a crash interrupts, the files afterwards hold either the old
or the new segments for every offset range, never both and never neither
(tests/storage/test_compaction.py crashes at every step).
"""

import logging
import os

from .locking import FileLock
from .scan import SCAN_OK, SegmentWalk
from .segment import (INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX,
                      parse_segment_name, segment_name)

__all__ = ["swap_in", "remove_deleted", "recover_swaps", "remove_stale_cleaned",
           "CLEANED_SUFFIX", "SWAP_SUFFIX", "DELETED_SUFFIX", "CLEANER_LOCK_FILE",
           "FILE_SUFFIXES"]

log = logging.getLogger("kqlite.storage")

# ON-DISK: Kafka's file suffixes for a segment being replaced.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
CLEANER_LOCK_FILE = ".kqlite-cleaner"   # kqlite's own: held by a running compaction
# The .log is renamed last; a segment's .txnindex may not exist.
FILE_SUFFIXES = (TXNINDEX_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, LOG_SUFFIX)
_OPTIONAL = TXNINDEX_SUFFIX


def _path(directory, base, suffix):
    return os.path.join(directory, segment_name(base, suffix))


def swap_in(fs, directory, replacements):
    """Steps 2-7 for ``[(new_base, [old_base, ...]), ...]`` whose ``.cleaned`` files
    are written and fsynced. Open descriptors of the old files stay valid."""
    for base, _ in replacements:                              # 2. .cleaned -> .swap
        for suffix in FILE_SUFFIXES:
            cleaned = _path(directory, base, suffix + CLEANED_SUFFIX)
            if suffix != _OPTIONAL or fs.exists(cleaned):
                fs.rename(cleaned, _path(directory, base, suffix + SWAP_SUFFIX))
    fs.fsync_dir(directory)                                   # 3.
    for _, olds in replacements:                              # 4. old -> .deleted
        for old in olds:
            for suffix in FILE_SUFFIXES:
                path = _path(directory, old, suffix)
                if fs.exists(path):
                    fs.rename(path, path + DELETED_SUFFIX)
    fs.fsync_dir(directory)                                   # 5.
    for base, _ in replacements:                              # 6. .swap -> final names
        for suffix in FILE_SUFFIXES:
            swapped = _path(directory, base, suffix + SWAP_SUFFIX)
            if suffix != _OPTIONAL or fs.exists(swapped):
                fs.rename(swapped, _path(directory, base, suffix))
    fs.fsync_dir(directory)                                   # 7.


def remove_deleted(fs, directory, bases):
    """Step 8: remove the ``.deleted`` files of the replaced segments."""
    for base in bases:
        for suffix in FILE_SUFFIXES:
            path = _path(directory, base, suffix + DELETED_SUFFIX)
            if fs.exists(path):
                fs.remove(path)


# -- Recovery --------------------------------------------------------------------------------

def remove_stale_cleaned(fs, directory):
    """Delete ``.cleaned`` files unless a compaction is running (holding the cleaner lock)."""
    names = [n for n in fs.listdir(directory) if n.endswith(CLEANED_SUFFIX)]
    if not names:
        return
    lock = FileLock(fs.open(os.path.join(directory, CLEANER_LOCK_FILE), create=True))
    try:
        if lock.try_lock(True):
            for name in names:
                if fs.exists(os.path.join(directory, name)):
                    fs.remove(os.path.join(directory, name))
    finally:
        lock.unlock()
        lock.file.close()


def _swap_end(fs, path):
    """(next offset after the last valid batch, whole file valid) of a segment file."""
    f = fs.open(path)
    try:
        end = None
        walk = SegmentWalk(f, 0, f.size(), verify_crc=True)
        for b in walk:
            end = b.last_offset + 1
        return end, walk.status == SCAN_OK
    finally:
        f.close()


def recover_swaps(fs, directory, dry_run=False):
    """Complete the swaps a crash interrupted (see the module docstring); True if any.

    ``dry_run`` only reports whether there is anything to do.
    """
    parsed = [(parse_segment_name(n), n) for n in fs.listdir(directory)]
    parsed = [(p[0], p[1], n) for p, n in parsed if p is not None]
    swaps = sorted(base for base, suffix, _ in parsed if suffix == LOG_SUFFIX + SWAP_SUFFIX)
    orphans = [n for base, suffix, n in parsed
               if suffix.endswith(SWAP_SUFFIX) and base not in swaps]
    if dry_run or not (swaps or orphans):
        return bool(swaps or orphans)
    for name in orphans:                      # index .swap files whose .log never got there
        fs.remove(os.path.join(directory, name))
    logs = sorted(base for base, suffix, _ in parsed if suffix == LOG_SUFFIX)

    def path(base, suffix):
        return os.path.join(directory, segment_name(base, suffix))

    for base in swaps:
        end, whole = _swap_end(fs, path(base, LOG_SUFFIX + SWAP_SUFFIX))
        if (end is None or not whole) and fs.exists(path(base, LOG_SUFFIX)):
            log.error("%s: discarding unreadable %s; the original segment is intact",
                      directory, segment_name(base, LOG_SUFFIX + SWAP_SUFFIX))
            for suffix in FILE_SUFFIXES:
                if fs.exists(path(base, suffix + SWAP_SUFFIX)):
                    fs.remove(path(base, suffix + SWAP_SUFFIX))
            continue
        for old in logs:                      # the segments the swap replaces
            if base <= old < (end if end is not None else base + 1):
                for suffix in FILE_SUFFIXES:
                    if fs.exists(path(old, suffix)):
                        fs.remove(path(old, suffix))
        fs.fsync_dir(directory)               # the old files are gone before the new arrive
        for suffix in FILE_SUFFIXES:
            if fs.exists(path(base, suffix + SWAP_SUFFIX)):
                fs.rename(path(base, suffix + SWAP_SUFFIX), path(base, suffix))
            elif suffix != _OPTIONAL and fs.exists(path(base, suffix)):
                fs.remove(path(base, suffix))     # an index is rebuilt from the log
        log.warning("%s: completed the interrupted compaction swap of segment %d",
                    directory, base)
    fs.fsync_dir(directory)
    return True
