"""Group commit: one fdatasync round covers every thread that appended before it began.

Theory of operation
-------------------
With ``fsync="always"`` (or ``flush.messages`` reached) an append returns only once
an fsync round that began after its write has finished (Log._sync_to). Threads
appending at the same time share rounds:

* At most one thread *leads* a round at a time. It notes the log end offset (the
  target), fdatasyncs the segments changed since the last round (outside the
  Log's thread lock, so others keep appending meanwhile), then publishes the new
  recovery point. A segment that retention, a truncation or a close drops during
  the fsyncs keeps its descriptors until the round is done (Segment.begin_sync).
* Every other thread waits for the running round to end, not in a queue behind
  the leader: when a round ends all waiters wake at once; those whose records the
  round covered return, and one of the others leads the next round, which covers
  everything appended during the previous one. A queue of turns would hand the
  lead on one thread at a time, with no fsync running while it does, and each
  round would cover two or three appends instead of all the waiting ones.
* A leader does not start its round while other threads are between the start
  of an append that will sync and the end of its write (:class:`writing`), nor
  before as many threads as took part in the last round have joined this one: it
  waits for them, at most :data:`GATHER` seconds, so that the round covers them
  too instead of leaving them a round of their own (the threads the last round
  released are on their way back with their next append).
* The rendezvous (who leads, waiting for a round's end, the leader's gathering) is
  ``_native.Rounds``: csrc/rounds.c, with the GIL released while a thread waits,
  or its pure-Python twin. With Python's Condition each round's end woke the
  waiters one Python-level lock at a time, each needing the GIL to go back to
  sleep; 8 threads reached 1.9x one thread's fdatasync rate, 2.4-2.8x with C.
* The one-record append with ``fsync="always"`` (:func:`write_and_sync`) goes
  further, as LevelDB's writer queue does: the thread puts its encoded record in
  the log's queue and the round's leader writes every queued record before it
  syncs. Waiting threads then spend no GIL time on the log's write path and its
  bookkeeping, which on 2 cores is what separates the rounds.
* ``force`` (Log.flush) always leads a round of its own, after the one running.

The leader holds ``Log._sync_lock`` for the round, so the lock order of
docs/architecture.md holds (the compactor's swap takes it to keep rounds out).
The rendezvous' lock is innermost: nothing is taken while it is held.

What a round syncs is only what a crash would need: the data of segments
written since the last round or holding offsets past the recovery point (which
recovery leaves where it was, as Kafka's LogLoader does), and the directory after
a roll; the active
segment's indexes wait until it rolls or the log closes (segment.py), and the
shared state is not fsynced at all: recovery after a crash rebuilds what both
say from the segments. A round inside an append does not even publish the new
recovery point: the next write's state carries it (until then recovery merely
starts a little earlier); a flush() publishes it.
"""

import threading
import time
from typing import NamedTuple

from .. import _native
from .sharing import truncations

__all__ = ["sync_to", "writing", "Forced", "GATHER"]

GATHER = 0.0002     # s a leader waits at most for appends in progress to join its round
_GATHER_NS = int(GATHER * 1e9)

_make_lock = threading.Lock()


class writing:
    """Context around the write of an append that will then call :func:`sync_to`."""

    __slots__ = ("rounds",)

    def __init__(self, lg):
        self.rounds = _state(lg)[0]

    def __enter__(self):
        self.rounds.writing(1)

    def __exit__(self, *exc):
        self.rounds.writing(-1)


def _state(lg):
    """The log's group-commit state, made at its first durable append: (the rendezvous,
    the queue of write_and_sync's records, the queue's lock)."""
    state = lg.__dict__.get("_group_commit")
    if state is None:
        with _make_lock:
            state = lg.__dict__.get("_group_commit")
            if state is None:
                state = lg._group_commit = (_native.Rounds(), [], threading.Lock())
    return state


def sync_to(lg, offset, force=False):
    """Return once an fsync round covering the log up to ``offset`` has finished (with
    ``force``, a round that began after this call). Raises LogFailedError when a round
    fails (the log is then failed), LogClosedError on a closed log."""
    rounds = _state(lg)[0]
    enter = rounds.enter
    while force or lg._synced_offset < offset:
        if enter(_GATHER_NS):
            break
    else:
        return
    try:
        with lg._sync_lock:
            _round(lg, force)
    finally:
        rounds.leave()


class _Pending:
    """One thread's record in the queue of :func:`write_and_sync`."""

    __slots__ = ("args", "offset", "error", "done", "synced")

    def __init__(self, args):
        self.args = args
        self.offset = None      # set once written
        self.error = None       # what its write raised
        self.done = False       # its owner may go on: the leader is finished with it
        self.synced = False     # a round that began after its write succeeded


def write_and_sync(lg, write, *args):
    """``write(lg, *args)`` (which returns an offset) made durable: the fsync="always"
    one-record append. The record joins the log's queue; the thread leading a round
    writes every queued record, each with its own ``write`` call, then syncs once,
    so the waiting threads spend no GIL time on writes and bookkeeping of their own.
    Returns the offset, or raises what the write raised. A record the leader did
    not finish with (its round failed, or it was interrupted) is finished here, by
    the general path: its own write, then :func:`sync_to`, which raises the log's
    failure in this thread."""
    rounds, items, lock = _state(lg)
    pending = _Pending(args)
    with lock:
        items.append(pending)
    enter = rounds.enter
    while not pending.done:
        if enter(_GATHER_NS):
            _lead_queue(lg, rounds, items, lock, write)
    if pending.error is not None:
        raise pending.error
    if pending.offset is None:
        pending.offset = write(lg, *args)
    if not pending.synced:
        sync_to(lg, pending.offset + 1)
    return pending.offset


def _lead_queue(lg, rounds, items, lock, write):
    """A round led for the queue: write what it holds, sync, release its owners."""
    with lock:
        taken = items[:]
        del items[:]
    try:
        written = False
        for pending in taken:
            try:
                pending.offset = write(lg, *pending.args)
            except Exception as exc:    # this record's own failure, raised by its owner
                pending.error = exc
            else:
                written = True
        if written:
            with lg._sync_lock:
                _round(lg, False)
            synced = lg._synced_offset     # not moved if records were cut during the round
            for pending in taken:
                pending.synced = pending.error is None and pending.offset < synced
    except Exception:
        pass            # the round failed: each owner's sync_to raises the log's failure
    finally:
        for pending in taken:
            pending.done = True
        rounds.leave()


class _Plan(NamedTuple):
    """What a round fsyncs, noted under the Log's lock when it begins."""
    target: int         # the log end offset then: what the round makes durable
    cuts: object        # the truncation count then
    pending: list       # (segment, its change count, fsync it whole)
    dir_dirty: bool     # the directory too (after a roll)


def _round(lg, publish):
    plan = _begin(lg)
    try:
        _sync_files(lg, plan)
    except OSError as exc:
        raise lg._fail(exc, "fsync") from exc
    finally:
        _release(lg, plan)
    _advance(lg, plan, publish)


def _begin(lg):
    with lg._lock:
        lg._check_usable()
        target = lg.next_offset
        cuts = truncations(lg._generation)
        floor = lg.recovery_point
        # A segment holding offsets past the recovery point is fsynced whole even when
        # this handle did not write it: the round moves the recovery point past bytes
        # that another process or a killed writer (kept by recovery) left unsynced.
        pending = [(seg, seg.changes, seg.next_offset > floor) for seg in lg._segments
                   if seg.unsynced or seg.next_offset > floor]
        for seg, _, _ in pending:
            # Its files are synced outside the lock, where retention, a truncation or a
            # close may drop the segment: they stay open until the round is done.
            seg.begin_sync()
        dir_dirty, lg._dir_dirty = lg._dir_dirty, False
    return _Plan(target, cuts, pending, dir_dirty)


def _sync_files(lg, plan):
    """The fsyncs of a round, and nothing else: no lock of the log is taken."""
    for seg, changes, whole in plan.pending:
        seg.sync(changes, whole)
    if plan.dir_dirty:
        lg.fs.fsync_dir(lg.path)


def _release(lg, plan):
    if plan.pending:
        with lg._lock:
            for seg, _, _ in plan.pending:
                seg.end_sync()


def _advance(lg, plan, publish):
    target = plan.target
    with lg._lock:
        if lg._closed or truncations(lg._generation) != plan.cuts:
            # Records were cut during the round (truncate_to lowered both marks, then
            # flushes): ``target`` may now lie past the log end, over offsets that new,
            # unsynced appends will take. Or the log was closed meanwhile, and with it
            # the files its state and checkpoints are written to.
            return
        lg._synced_offset = max(lg._synced_offset, target)
        lg._unflushed = max(0, lg.next_offset - target)
        lg._last_flush = time.monotonic()
        if target > lg.recovery_point:
            lg.recovery_point = target
            if publish:
                with lg._locked_write():
                    lg._write_state()
        interval = lg.config["recovery.point.checkpoint.interval.ms"] / 1000.0
        if time.monotonic() - lg._last_checkpoint >= interval:
            lg._write_checkpoints()


class Forced:
    """A forced round (what Log.flush waits for) split in three, so that one thread can
    lead the rounds of several logs and have their fsyncs run at once in other threads
    (db/sync_round.py): the bookkeeping before and after the fsyncs needs the GIL, the
    fsyncs do not. :meth:`begin` leads the log's next round (its sync lock is held
    until :meth:`end`); :meth:`sync_files` does its fsyncs alone, in any thread;
    :meth:`end` (in the thread that began) moves the recovery point, or fails the log
    when an fsync failed, as a round of sync_to does. Like a round inside an append, it
    does not publish the new recovery point: the caller's next write carries it (a
    commit's markers and Complete record follow at once). A thread leading several
    rounds begins them in one global order (db/sync_round.py sorts by partition), so
    two such threads never wait for each other's rounds."""

    __slots__ = ("lg", "rounds", "plan")

    def __init__(self, lg):
        self.lg = lg
        self.rounds = _state(lg)[0]
        self.plan = None

    def begin(self):
        enter = self.rounds.enter
        while not enter(_GATHER_NS):
            pass
        try:
            self.lg._sync_lock.acquire()
            try:
                self.plan = _begin(self.lg)
            except BaseException:
                self.lg._sync_lock.release()
                raise
        except BaseException:
            self.rounds.leave()
            raise

    def sync_files(self):
        _sync_files(self.lg, self.plan)

    def cancel(self):
        """End a begun round whose fsyncs never ran: nothing is published."""
        try:
            try:
                _release(self.lg, self.plan)
            finally:
                self.lg._sync_lock.release()
        finally:
            self.rounds.leave()

    def end(self, error=None):
        """End the round; ``error``: what :meth:`sync_files` raised (re-raised here, an
        OSError failing the log)."""
        lg = self.lg
        try:
            try:
                _release(lg, self.plan)
                if isinstance(error, OSError):
                    raise lg._fail(error, "fsync") from error
                if error is not None:
                    raise error
                try:
                    _advance(lg, self.plan, False)
                except OSError as exc:      # its state or checkpoint write, as in flush
                    raise lg._fail(exc, "flush") from exc
            finally:
                lg._sync_lock.release()
        finally:
            self.rounds.leave()
