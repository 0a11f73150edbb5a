"""Group commit: one fdatasync round covers every thread that appended before it began.

Theory of operation
-------------------
With ``fsync="always"`` (or ``flush.messages`` reached) an append returns only once
an fsync round that began after its write has finished (Log._sync_to). Threads
appending at the same time share rounds:

* At most one thread *leads* a round at a time. It notes the log end offset (the
  target), fdatasyncs the segments changed since the last round (outside the
  Log's thread lock, so others keep appending meanwhile), then publishes the new
  recovery point.
* Every other thread waits on a condition, not in a queue behind the leader:
  when a round ends all waiters wake at once; those whose records the round
  covered return, and one of the others leads the next round, which covers
  everything appended during the previous one. A queue would hand the turn on
  one thread at a time, with no fsync running while it does, and each round would
  cover two or three appends instead of all the waiting ones.
* A leader does not start its round while other threads are between the start
  of an append that will sync and the end of its write (:func:`writing`), nor
  before as many threads as took part in the last round have joined this one: it
  waits for them, at most :data:`GATHER` seconds, so that the round covers them
  too instead of leaving them a round of their own (the threads the last round
  released are on their way back with their next append). The leader waits on a
  condition of its own, woken by the last write to end and by each joiner; the
  waiters' condition is notified only when a round ends and somebody waits
  (``notify_all`` is a Python loop: once per append it cost a single thread's
  durable append ~5% of its CPU).
* ``force`` (Log.flush) always leads a round of its own, after the one running.

The leader holds ``Log._sync_lock`` for the round, so the lock order of
docs/architecture.md holds (the compactor's swap takes it to keep rounds out).
The condition's lock is innermost: nothing is taken while it is held.

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

from .sharing import truncations

__all__ = ["sync_to", "writing", "GATHER"]

GATHER = 0.0002     # s a leader waits at most for appends in progress to join its round

_make_lock = threading.Lock()


class _Rounds:
    __slots__ = ("cond", "gather", "leading", "gathering", "writers", "waiting",
                 "last_size")

    def __init__(self):
        lock = threading.Lock()
        self.cond = threading.Condition(lock)       # threads waiting for a round
        self.gather = threading.Condition(lock)     # the leader gathering its round
        self.leading = False
        self.gathering = False  # the leader waits on ``gather`` for writers and joiners
        self.writers = 0      # threads between the start of a syncing append and its write
        self.waiting = 0      # threads waiting for a round to cover them
        self.last_size = 1    # threads the last round covered (its leader included)


class writing:
    """Context around the write of an append that will then call :func:`sync_to`."""

    __slots__ = ("rounds",)

    def __init__(self, lg):
        self.rounds = _rounds(lg)

    def __enter__(self):
        rounds = self.rounds
        with rounds.cond:
            rounds.writers += 1

    def __exit__(self, *exc):
        rounds = self.rounds
        with rounds.cond:
            rounds.writers -= 1
            if rounds.gathering and not rounds.writers:
                rounds.gather.notify()


def _rounds(lg):
    rounds = lg.__dict__.get("_group_commit")
    if rounds is None:
        with _make_lock:
            rounds = lg.__dict__.get("_group_commit")
            if rounds is None:
                rounds = lg._group_commit = _Rounds()
    return rounds


def sync_to(lg, offset, force=False):
    """Return once an fsync round covering the log up to ``offset`` has finished (with
    ``force``, a round that began after this call). Raises LogFailedError when a round
    fails (the log is then failed), LogClosedError on a closed log."""
    rounds = _rounds(lg)
    cond = rounds.cond
    with cond:
        if rounds.leading:
            rounds.waiting += 1
            if rounds.gathering:
                rounds.gather.notify()      # one more joiner: the leader may start
            try:
                while rounds.leading and (lg._synced_offset < offset or force):
                    cond.wait()
            finally:
                rounds.waiting -= 1
            if lg._synced_offset >= offset and not force:
                return
        rounds.leading = True
        if rounds.writers or rounds.waiting + 1 < rounds.last_size:
            deadline = time.monotonic() + GATHER
            rounds.gathering = True
            try:
                while rounds.writers or rounds.waiting + 1 < rounds.last_size:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    rounds.gather.wait(left)
            finally:
                rounds.gathering = False
        rounds.last_size = rounds.waiting + 1
    try:
        with lg._sync_lock:
            _round(lg, force)
    finally:
        with cond:
            rounds.leading = False
            if rounds.waiting:
                cond.notify_all()


def _round(lg, publish):
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
        dir_dirty, lg._dir_dirty = lg._dir_dirty, False
    try:
        for seg, changes, whole in pending:
            seg.sync(changes, whole)
        if dir_dirty:
            lg.fs.fsync_dir(lg.path)
    except OSError as exc:
        raise lg._fail(exc, "fsync") from exc
    with lg._lock:
        if truncations(lg._generation) != cuts:
            # Records were cut during the round (truncate_to lowered both marks, then
            # flushes): ``target`` may now lie past the log end, over offsets that new,
            # unsynced appends will take.
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
