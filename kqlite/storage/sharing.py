"""How several processes share one log directory.

Theory of operation
-------------------
Each process has its own Log, with its own view of the segments. A change (an
append, a roll, retention, truncation, a compaction swap) happens under the
write lock (:class:`Locked`: the Log's thread lock, then the exclusive flock on
``.kqlite-state``). The first thing done under it is :func:`refresh`, which reads
the shared State record (state.py) and catches up with whatever other processes
wrote; the last is :func:`write_shared_state`. Offsets therefore stay dense and
unique across processes. Readers take only the thread lock and refresh the same
way, so they see other processes' records without reopening. A handle that holds the
write lock never refreshes again until it lets it go: its view is the current one,
and in the middle of a write the shared record is older than the write.

Catching up (:func:`refresh`):

* the same generation, a longer active segment: read the new batch headers
  (:func:`catch_up`);
* another generation (segments rolled, deleted or replaced by compaction, or a
  leader epoch assigned): list the directory again, under the write lock so a
  swap or deletion is never seen half done, keep the segments whose files are
  unchanged (``fs.same_file``) and open the others (:func:`reload_segments`);
* another truncation epoch (the generation's high bits): forget every segment,
  its sizes, indexes and timestamps may describe replaced bytes.

The State also carries the first unstable offset the last writer's producer state
had (state.py): a process whose own producer state is not loaded, or is behind,
limits its read_committed reads with it (Log.last_stable_offset); a process that
appends catches its producer state up under the write lock (appending.producer_state),
so every process judges and learns transactions from the same batches. The
``.txnindex`` entries of another process's appends are read again once a catch-up
saw the segment grow (txn_index.py).

A writer that dies mid-append leaves bytes past the end the State names, or a
segment it rolled but never named. They were never acknowledged; the next writer
cuts them (:func:`cut_dead_writer_tail`) so they cannot resurface.

A Log may keep the write lock from one write to the next (lock_handoff.py): the
next write then starts with a current view and skips the catch-up and the cut,
since no other process could write meanwhile. The State is still published at
the end of every write, into the mapped page (state.py), so readers elsewhere
see every append.
"""

import logging
import os

from ..errors import LogClosedError
from . import lock_handoff, swap
from .locking import FileLock
from .header_summary import note_headers
from .segment import SEGMENT_SUFFIXES, Segment, segment_name
from .segments import list_segment_bases
from .state import UNKNOWN_UNSTABLE, map_state, publish, read_raw, read_state

__all__ = ["SharedFiles", "Locked", "refresh", "write_shared_state", "catch_up",
           "reload_segments", "next_truncation_generation", "truncations", "STATE_FILE",
           "USERS_FILE"]

log = logging.getLogger("kqlite.storage")

# kqlite's own files (Kafka ignores them); locking.py describes both.
STATE_FILE = ".kqlite-state"
USERS_FILE = ".kqlite-users"
# The shared generation counts rolls and deletions in its low 32 bits and truncations in
# the high bits: a process that sees the high bits change must re-read every segment.
_TRUNCATION_EPOCH = 1 << 32


def next_truncation_generation(generation):
    return (generation // _TRUNCATION_EPOCH + 1) * _TRUNCATION_EPOCH


def truncations(generation):
    """How many truncations a generation counts: it changes when records were cut."""
    return generation // _TRUNCATION_EPOCH


class SharedFiles:
    """``.kqlite-state`` (the State record; its flock is the write lock) and
    ``.kqlite-users`` (a shared flock held by every open Log), open for one Log.

    ``mapped`` is the state file's shared page (None under a test's file-system seam);
    ``kept`` says the write lock is held from an earlier write, and the other fields
    are lock_handoff.py's bookkeeping."""

    __slots__ = ("state_file", "write_lock", "users", "page", "mapped", "kept", "taken_at",
                 "last_write", "handed_over_at")

    def __init__(self, fs, directory):
        self.state_file = fs.open(os.path.join(directory, STATE_FILE), create=True)
        self.kept = False
        self.taken_at = self.last_write = 0.0
        self.handed_over_at = None
        try:
            self.page = map_state(self.state_file)
            self.mapped = None if self.page is None else self.page.view
            self.write_lock = FileLock(self.state_file, self.mapped)
            self.users = FileLock(fs.open(os.path.join(directory, USERS_FILE), create=True))
        except BaseException:
            if getattr(self, "page", None) is not None:
                self.page.close()
            self.state_file.close()
            raise

    def read(self):
        return read_state(self.state_file, self.mapped)

    def raw(self):
        """The State record's bytes as stored: they change with every change of the log,
        in any process (a reader may skip its catch-up while they stay the same)."""
        return read_raw(self.state_file, self.mapped)

    def release(self):
        self.users.unlock()
        self.users.file.close()
        self.kept = False
        self.write_lock.unlock()
        if self.page is not None:
            self.mapped = None
            self.page.close()
        self.state_file.close()


class Locked:
    """The write lock as a context: the Log's thread lock, then the flock on
    ``.kqlite-state``; then, with ``refresh``, catch up and cut a dead writer's tail."""

    __slots__ = ("log", "refresh")

    def __init__(self, log, refresh):
        self.log, self.refresh = log, refresh

    def __enter__(self):
        lg = self.log
        lg._lock.acquire()
        shared = lg._shared
        if shared.kept and not lg._closed:
            return      # held since our last write: nobody else wrote meanwhile
        try:
            if lg._closed:
                raise LogClosedError(f"log {lg.path} is closed")
            lock_handoff.before_fresh_lock(shared)
            shared.write_lock.lock(timeout=lg._lock_timeout(), what=f"log {lg.path}")
            shared.taken_at = lock_handoff.now()
        except BaseException:
            lg._lock.release()
            raise
        if self.refresh:
            try:
                _catch_up_shared(lg)
                cut_dead_writer_tail(lg)
            except BaseException:
                self.__exit__(*_FAILED)
                raise

    def __exit__(self, exc_type, exc, tb):
        lg = self.log
        try:
            lock_handoff.keep_or_release(lg, exc_type is not None)
        finally:
            lg._lock.release()


_FAILED = (Exception, None, None)


def write_shared_state(lg, flags=0, sync=False):
    """Publish this process's view (caller holds the write lock)."""
    active = lg._segments[-1]
    shared = lg._shared
    publish(shared.state_file, shared.mapped, flags, lg._generation, active.next_offset,
            active.base_offset, active.size, lg.log_start_offset, lg.recovery_point,
            lg._first_unstable, sync)


def refresh(lg):
    """Catch up with changes other processes made (caller holds lg._lock).

    Nothing to do while this handle holds the write lock: it caught up when it took the
    lock (or has kept it since its last write), so nobody else wrote since. And in the
    middle of a write (a truncation reloading the producer state reads batch headers,
    which refresh) the shared record still describes the log before the write: catching
    up with it would bring back the size and generation the write just replaced, and
    the next append would land past the end of the file."""
    if lg._shared.write_lock.held is None:
        _catch_up_shared(lg)


def _catch_up_shared(lg):
    """:func:`refresh` itself, also under the write lock (Locked, right after taking it)."""
    state = lg._shared.read()
    if state is None:
        return
    active = lg._segments[-1]
    if state.generation != lg._generation or state.active_size < active.size:
        # (A smaller active segment in the same generation: a write of this handle failed
        # after appending part of its batches, before publishing them. They were never
        # acknowledged and the next writer cuts them; the reload forgets them, under the
        # write lock, as it rewrites the indexes.)
        reload_segments(lg, state)
    elif state.active_size > active.size:
        catch_up(active, state.active_size)
    lg.log_start_offset = state.log_start_offset  # every change writes it; it can go down
    lg.recovery_point = max(lg.recovery_point, state.recovery_point)
    if state.first_unstable_offset != UNKNOWN_UNSTABLE:
        lg._first_unstable = state.first_unstable_offset
    end = lg._segments[-1].next_offset
    if lg.hw_follows_leo:
        lg._high_watermark = end
    else:
        # A pinned high watermark moves only forward, except that the log cannot end
        # below it (another process truncated) nor start above it.
        lg._high_watermark = max(min(lg._high_watermark, end), lg.log_start_offset)


def catch_up(seg, size):
    """Learn the batches another process appended to ``seg`` up to ``size`` bytes: their
    index entries from the index files, their end offset and timestamps from their
    headers, folded without an object per batch (header_summary.py)."""
    seg.index.reload_tail()
    seg.timeindex.reload_tail()
    seg.txnindex.invalidate()       # markers among those batches may have entries
    start = seg.size
    seg.size = size
    note_headers(seg, start, size)
    seg.bytes_since_index_entry = size - seg.index.last_position()


def cut_dead_writer_tail(lg):
    """Bytes past the shared state were written by a writer that died before
    acknowledging them; cut them so they cannot resurface (we hold the write lock)."""
    if lg._closed:
        return
    active = lg._segments[-1]
    if active.log.size() > active.size:
        active.log.truncate(active.size)
        active.changes += 1
        # The entry of a marker among the cut bytes may have been written already.
        active.txnindex.invalidate()
        active.txnindex.truncate_to(active.next_offset)
    # A writer that died right after rolling left a segment the state never named;
    # a roll always starts the new segment at the active segment's end offset.
    if active.next_offset > active.base_offset and \
            lg.fs.exists(os.path.join(lg.path, segment_name(active.next_offset))):
        log.warning("%s: deleting segment %d rolled by a writer that died before "
                    "acknowledging it", lg.path, active.next_offset)
        for suffix in SEGMENT_SUFFIXES:
            orphan = os.path.join(lg.path, segment_name(active.next_offset, suffix))
            if lg.fs.exists(orphan):
                lg.fs.remove(orphan)


def reload_segments(lg, state):
    """List the segments again after another process rolled, deleted, replaced or
    truncated some (see the module docstring)."""
    write_lock = lg._shared.write_lock
    if write_lock.held is None:
        # A reader lists the files under the write lock too, so that it never sees a
        # compaction swap or a retention deletion half done.
        write_lock.lock(timeout=lg._lock_timeout(), what=f"log {lg.path}")
        try:
            reload_segments(lg, lg._shared.read() or state)
        finally:
            write_lock.unlock()
        return
    fs, path = lg.fs, lg.path
    repaired = swap.recover_swaps(fs, path)  # a compactor died mid-swap
    if truncations(state.generation) != truncations(lg._generation):
        # A truncation since we last looked: our views of the segments (sizes, end
        # offsets, indexes, max timestamps) may describe bytes that were replaced.
        lg._segments.close_all()
        lg._segments.reset(())
    known = {seg.base_offset: seg for seg in lg._segments}
    # Only the segments the shared state knows: a newer one is being rolled right now
    # (or was rolled by a writer that died before naming it).
    bases = [base for base in list_segment_bases(fs, path) if base <= state.active_base]
    segments = []
    for base in bases:
        seg = known.pop(base, None)
        if seg is not None and not fs.same_file(seg.log, seg.path()):
            seg.close()  # replaced by compaction (or deleted and created again)
            seg = None
        if seg is None:
            try:
                seg = Segment.open(fs, path, base, lg.config)
            except FileNotFoundError:
                continue  # deleted by another process since the listing
        segments.append(seg)
    for gone in known.values():
        gone.close()
    for seg in segments[:-1]:
        # A segment we knew as active may have grown before another process rolled it.
        size = seg.log.size()
        if size > seg.size:
            catch_up(seg, size)
        elif size < seg.size:
            seg.size = size
            seg.rebuild_indexes()
            seg.txnindex.invalidate()
        else:
            # The roller may have appended a final time index entry when it rolled.
            seg.index.reload_tail()
            seg.timeindex.reload_tail()
    lg._segments.reset(segments)
    for seg in segments:
        seg.defer_index_sync = False    # one we knew as active may have been rolled
    active = segments[-1]
    active.defer_index_sync = True
    if active.size != state.active_size:
        if active.size < state.active_size:
            catch_up(active, state.active_size)
        else:
            active.size = state.active_size
            active.rebuild_indexes()
            active.txnindex.invalidate()
    lg.epochs.reload()
    lg._generation = state.generation
    if repaired:
        lg._generation += 1
        write_shared_state(lg)
