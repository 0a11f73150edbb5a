"""Keeping the write lock between one process's writes, and handing it over on demand.

Theory of operation
-------------------
Taking the write lock fresh costs two flock calls and a catch-up: reading the
shared state, an fstat and a stat looking for what a dead writer left
(sharing.Locked). An application appending one record per call would pay that
for every record, more than the append itself. So a Log whose shared state is
mapped in memory (state.py; every real OS file) *keeps* the exclusive flock when
a write ends, for as long as nobody else asks for it:

* While one process holds the flock, no other process changes the log, so a
  holder that kept it has a current view: its next write skips the catch-up and
  the dead-writer checks. It still publishes the shared state record at the end
  of every write (a store into the mapped page), so other processes' readers,
  which never take the flock, see each append at once.
* Whoever wants the flock and does not get it at once (a writer or a reader in
  another process, or another Log of the same directory in this process) sets
  the *want* word of the mapped page at every retry (locking.FileLock.lock), and
  then sleeps on that word (a futex, shared_page.wait_word) for at most
  :data:`NAP`. A holder looks at it when a write ends: once set, and the holder
  has had the lock for :data:`QUANTUM`, it clears the word, unlocks and wakes the
  sleepers (:func:`wake_takers`); any other unlock wakes them too while the word
  is set. So a waiter learns the lock is free within a wake-up's latency (tens of
  microseconds), where polling at 0.5 ms cost ~150 us on average per hand-over,
  7% of the time 4 processes appending one record per call spent. The NAP only
  bounds the wait when no wake comes: the holder died (the kernel drops its
  flock and wakes nobody). Where futexes are missing, waiters poll as before.
  A holder that does not write is released by one daemon thread per process
  (:func:`_run`), which looks at the Logs keeping a lock and unlocks those
  wanted, or idle for :data:`IDLE`.
  It looks every :data:`TICK` while the lock is contended, and backs off to
  :data:`QUIET_TICK` while nobody asks: each look takes the GIL from the thread
  that is appending, and at 1,000 looks a second that cost the appender ~7% of
  its CPU (one process writing alone never needs the look). A hand-over, by a
  look or by a write, brings the tick back to TICK; so only the first taker of
  a quiet holder's lock may wait up to QUIET_TICK longer.
* flock is not fair: a holder that just unlocked would take the lock straight
  back at its next write, before the waiter's next retry. So every fresh taker
  counts itself in the *turn* word (and wakes who sleeps on it), and a holder
  that unlocked for a waiter sleeps at its next write (at most :data:`GRACE`)
  until the turn has moved on.
* A process killed while holding the lock, kept or not, loses it with its life
  (the kernel drops flocks): nothing wedges. The next taker takes it fresh, so it
  catches up and cuts what the dead writer left past the shared state, as before.
  A want word left set by a dead waiter costs one needless unlock; honouring it
  clears it.
* A child made by fork does not inherit the kept locks' bookkeeping (it forgets
  them without unlocking: the descriptors are shared with the parent, which still
  holds the lock). A Log is not to be used across a fork.

Safety does not rest on any of the timings: they only decide how long a waiter
waits. The flock alone decides who writes.
"""

import os
import struct
import sys
import threading
import time
import weakref

from .shared_page import CAN_WAIT, wait_word, wake_word
from .state import TURN_AT, WANT_AT

__all__ = ["keep_or_release", "before_fresh_lock", "count_turn", "post_want", "wait_for_holder",
           "wake_takers", "now", "CAN_WAIT", "QUANTUM", "IDLE", "GRACE", "TICK", "QUIET_TICK",
           "NAP"]

QUANTUM = 0.002     # s a wanted holder keeps writing before it hands the lock over
GRACE = 0.002       # s a holder that handed over waits for a waiter to take the lock
IDLE = 0.1          # s without writes after which a kept lock is let go anyway
TICK = 0.001        # s between the releasing thread's looks while the lock is contended
QUIET_TICK = 0.008  # s between its looks at most, while no taker has asked for a lock
NAP = 0.005         # s a waiter sleeps at most on the want word before it tries again

_WANT = struct.Struct("=I")
_TURN = struct.Struct("=Q")
_ONE = _WANT.pack(1)
_ZERO = _WANT.pack(0)
# The turn's low 32 bits: the futex word a holder in its grace sleeps on.
_TURN_WORD_AT = TURN_AT if sys.byteorder == "little" else TURN_AT + 4

_kept = weakref.WeakSet()        # Logs keeping the write lock between writes
_cond = threading.Condition()
_thread = None
_tick = TICK                     # the releasing thread's current pause between looks
_contended = False               # a lock was handed over since the thread's last look


def post_want(mapped):
    """A taker that found the lock busy says so (FileLock.lock, at every retry)."""
    mapped[WANT_AT:WANT_AT + 4] = _ONE


def wait_for_holder(mapped, timeout):
    """A taker that posted its want and then found the lock still busy sleeps until an
    unlock wakes it (or ``timeout``); it tries the lock again either way. False when the
    sleep lasted the whole ``timeout``."""
    return wait_word(mapped, WANT_AT, 1, timeout)


def wake_takers(mapped):
    """The lock was just unlocked for takers who posted their want: wake them."""
    if CAN_WAIT:
        wake_word(mapped, WANT_AT)


def before_fresh_lock(shared):
    """Before taking the lock fresh: after handing it over, let the waiter have it first."""
    turn = shared.handed_over_at
    if turn is None:
        return
    shared.handed_over_at = None
    mapped = shared.mapped
    deadline = time.monotonic() + GRACE
    while _TURN.unpack_from(mapped, TURN_AT)[0] == turn:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if CAN_WAIT:
            wait_word(mapped, _TURN_WORD_AT, turn & 0xFFFFFFFF, left)
        else:
            time.sleep(0.00005)


now = time.monotonic


def count_turn(mapped):
    """The exclusive flock was just taken (FileLock.try_lock): move the turn on, and wake
    a holder that handed the lock over and waits for the turn to move."""
    _TURN.pack_into(mapped, TURN_AT, _TURN.unpack_from(mapped, TURN_AT)[0] + 1)
    if CAN_WAIT:
        wake_word(mapped, _TURN_WORD_AT)


def keep_or_release(lg, failed):
    """A write ends (caller holds lg._lock and the flock): keep the flock for the next
    write, or unlock it when the write ``failed``, when it cannot be kept (no mapped
    state) or when somebody wants it and this process had it for QUANTUM."""
    shared = lg._shared
    mapped = shared.mapped
    now = time.monotonic()
    if mapped is None or failed or lg._closed:
        _unlock(shared)
        return
    if mapped[WANT_AT] and now - shared.taken_at >= QUANTUM:
        _hand_over(shared)
        return
    shared.last_write = now
    if not shared.kept:
        shared.kept = True
        _register(lg)


def _hand_over(shared):
    global _contended
    _contended = True
    mapped = shared.mapped
    shared.handed_over_at = _TURN.unpack_from(mapped, TURN_AT)[0]
    mapped[WANT_AT:WANT_AT + 4] = _ZERO
    _unlock(shared)
    wake_takers(mapped)     # after the unlock: a woken taker finds the lock free


def _unlock(shared):
    shared.kept = False
    shared.write_lock.unlock()


def _register(lg):
    global _thread
    with _cond:
        _kept.add(lg)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="kqlite-lock-handoff", daemon=True)
            _thread.start()
        _cond.notify()


def _run():
    global _tick, _contended
    while True:
        with _cond:
            while not _kept:
                _cond.wait()
            current = list(_kept)
        time.sleep(_tick)
        now = time.monotonic()
        for lg in current:
            _maybe_release(lg, now)
        current = lg = None     # nor held here while the thread waits for the next keep
        if _contended:
            _contended = False
            _tick = TICK
        else:
            _tick = min(_tick * 2, QUIET_TICK)


def _maybe_release(lg, now):
    shared = lg._shared
    if not lg._lock.acquire(blocking=False):
        return      # busy: the write in progress looks at the want word when it ends
    try:
        # A handle stops keeping the lock without telling us (a failed write, a hand-over
        # at the end of a write, a close): forget it here, under its lock, so that a
        # closed Log is not held and looked at forever, and a keep that races with the
        # look re-registers after it (keep_or_release holds the same lock).
        if not shared.kept:
            _forget(lg)
        elif lg._closed or shared.mapped is None:
            shared.kept = False
            _forget(lg)
        elif shared.mapped[WANT_AT]:
            _hand_over(shared)
            _forget(lg)
        elif now - shared.last_write >= IDLE:
            _unlock(shared)
            _forget(lg)
    finally:
        lg._lock.release()


def _forget(lg):
    with _cond:
        _kept.discard(lg)


def _forget_all_in_child():
    global _thread, _cond
    _cond = threading.Condition()     # another thread of the parent may have held it
    for lg in list(_kept):
        lg._shared.kept = False
        lg._shared.write_lock.held = None
    _kept.clear()
    _thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all_in_child)
