"""The "clean" mark of the shared state, and what a Log handle that only read owes the disk.

Theory of operation
-------------------
Opening skips crash recovery when the shared state (state.py) says the last user closed
cleanly. So before the first byte of a change lands, the mark must durably say "not
clean": otherwise a power cut after the change could bring back an older "clean" state,
recovery would be skipped, and acknowledged records past the old state's size would be
cut as never acknowledged (docs/durability.md, "Opening did not fsync the 'not clean'
mark").

Every path that changes a log's files (append, roll, truncation, retention, deletion,
a compaction swap, a leader epoch) starts, under the write lock and after catching up,
with ``Log._check_writable``; the first such call of a handle makes the mark durable
(:func:`mark_not_clean`: the shared state with the clean flag off, fdatasynced). A handle
that opened a cleanly closed log and only reads never writes the mark, so a Spark task
or a consumer opening, reading and closing a data dir issues no write and no fsync.

A handle whose open itself changed the files (crash recovery, a new log, a dead writer's
tail cut, leftovers removed) marks at open, as every handle did before, and publishes a
new generation so that other processes reload their views.

Closing (:func:`close_untouched`): a handle that never marked has nothing of its own to
make durable (another process's appends are that process's to sync), except a high
watermark replication pinned on it, which it checkpoints. Otherwise it writes nothing,
unless it is the last user and the state is not clean: then someone else wrote and did
not close cleanly (it died, or closed while this handle was open), and the ordinary
close runs (flush, checkpoints, fsynced clean mark), as before.

Checkpoints (:func:`write_checkpoints`): the three per-partition entries a close or a flush
round writes are skipped while they equal what this handle read at open or last wrote.
"""

import time

from .data_dir import LOG_START_FILE, RECOVERY_POINT_FILE, REPLICATION_OFFSET_FILE
from .sharing import write_shared_state
from .state import FLAG_CLEAN

__all__ = ["opened", "mark_not_clean", "write_checkpoints",
           "close_untouched"]


def opened(lg, state, recovered, listing_before, checkpoints):
    """After loading, under the write lock: mark at once (and publish a new generation)
    when opening changed the files, else keep the shared state's generation and leave the
    mark to the first write. ``recovered`` says crash recovery ran, ``listing_before`` is
    the directory listing taken before loading, ``checkpoints`` what
    PartitionCheckpoints.read found."""
    lg._checkpointed = (checkpoints.get(RECOVERY_POINT_FILE), checkpoints.get(LOG_START_FILE),
                        checkpoints.get(REPLICATION_OFFSET_FILE))
    changed = (state is None or recovered or lg.recovery_reports
               or sorted(lg.fs.listdir(lg.path)) != listing_before)
    if changed:
        mark_not_clean(lg)
    else:
        lg._generation = state.generation
        lg._marked = False


def mark_not_clean(lg):
    """Make "not clean" durable before this handle's first change (caller holds the write
    lock and has caught up: the state it publishes is the current one)."""
    write_shared_state(lg, 0, sync=True)
    lg._marked = True


def write_checkpoints(lg):
    """Log._write_checkpoints: the partition's checkpoint entries, unless they equal those
    last read or written (then nothing is written)."""
    if lg._read_only:         # the cluster broker's checkpoints are its own
        return
    # A replica's HW that replication did not pin may be stale, or past the commit.
    hw = None if lg._hw_from_checkpoint else lg._high_watermark
    rp, start = lg.recovery_point, lg.log_start_offset
    known_rp, known_start, known_hw = lg._checkpointed
    if (rp, start) != (known_rp, known_start) or hw not in (None, known_hw):
        lg._checkpoints.write(rp, start, hw)
        lg._checkpointed = (rp, start, known_hw if hw is None else hw)
    lg._last_checkpoint = time.monotonic()


def close_untouched(lg):
    """Close a handle that never marked, writing nothing. Returns False when it must
    close the ordinary way instead: it is the last user and the state is not clean (the
    handle is then still open, holding the users' lock exclusively)."""
    with lg._lock:
        if lg._closed:
            return True
        users = lg._shared.users
        users.unlock()
        if users.try_lock(exclusive=True):
            state = lg._shared.read()
            if state is None or not state.flags & FLAG_CLEAN:
                # Keeping the exclusive lock keeps openers (and their recovery) out
                # until the ordinary close has marked the log clean.
                return False
        try:
            if not lg.hw_follows_leo:
                write_checkpoints(lg)   # a high watermark replication pinned: its own
        except OSError as exc:
            lg._failed = exc            # before _release_files: no clean-shutdown marker
            raise
        finally:
            lg._closed = True
            lg._segments.close_all()
            lg._release_files()
    return True
