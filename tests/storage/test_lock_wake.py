"""A taker that finds the write lock busy sleeps on the shared page's want word and is
woken by the unlock (lock_handoff.py, shared_page.wait_word). What may not break:

- a holder that hands the lock over (its releasing thread honouring a want, here in
  another process) wakes the sleeping taker: with the taker's NAP made longer than its
  lock timeout, only a wake lets it in before LogLockedError;
- any other unlock (a failed write, a close) wakes it too while the want is posted;
- a holder killed while a taker sleeps wakes nobody (the kernel drops the flock): the
  taker finds the lock free after at most a NAP and the log stays dense;
- where futexes are missing the takers poll, with the same results;
- shared_page.wait_word returns at once when the word no longer holds the value.
"""

import multiprocessing
import os
import signal
import threading

import pytest

import kqlite
from kqlite.storage import lock_handoff, locking, shared_page
from kqlite.storage.state import WANT_AT

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX only")

CTX = multiprocessing.get_context("spawn")


@pytest.fixture(params=["futex", "polling"])
def wake_mode(request, monkeypatch):
    if request.param == "futex":
        if not shared_page.CAN_WAIT:
            pytest.skip("no futex on this platform")
    else:
        monkeypatch.setattr(lock_handoff, "CAN_WAIT", False)
        monkeypatch.setattr(locking, "CAN_WAIT", False)
    return request.param


class _Sleeps(list):
    """How each sleep ended, and whether one has begun."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()


def _only_a_wake_lets_in(monkeypatch):
    """A sleeping taker would not look again before its lock timeout, and a kept lock is
    never let go for idleness: only a wake (or, polling, a retry) gets the taker in.
    Answers how each of the taker's sleeps ended: True for a wake, False for a timeout."""
    monkeypatch.setattr(lock_handoff, "NAP", 3600.0)
    monkeypatch.setattr(lock_handoff, "IDLE", 3600.0)
    monkeypatch.setattr(locking, "NAP", 3600.0)
    sleeps = _Sleeps()
    real = locking.wait_for_holder

    def wait_for_holder(mapped, timeout):
        sleeps.entered.set()
        woken = real(mapped, timeout)
        sleeps.append(woken)
        return woken

    monkeypatch.setattr(locking, "wait_for_holder", wait_for_holder)
    return sleeps


def _keeping_holder(path, ready, stop, hold_thread_lock):
    with kqlite.Log.open(path) as log:
        log.append(b"holder")          # keeps the write lock afterwards
        if hold_thread_lock:
            log._lock.acquire()        # its releasing thread cannot hand it over
        ready.set()
        stop.wait(120)
        if hold_thread_lock:
            log._lock.release()


def _want_posted(log):
    return log._shared.mapped[WANT_AT] != 0


def _wait_until(predicate, what):
    ticker = threading.Event()
    for _ in range(60_000):
        if predicate():
            return
        ticker.wait(0.001)
    raise AssertionError(f"never {what}")


def test_the_hand_over_of_another_process_wakes_the_sleeping_taker(tmp_path, monkeypatch,
                                                                   wake_mode):
    sleeps = _only_a_wake_lets_in(monkeypatch)
    path = str(tmp_path / "t-0")
    kqlite.Log.open(path).close()
    ready, stop = CTX.Event(), CTX.Event()
    holder = CTX.Process(target=_keeping_holder, args=(path, ready, stop, False))
    holder.start()
    try:
        assert ready.wait(60)
        with kqlite.Log.open(path, lock_timeout_ms=60_000) as log:
            assert log.append(b"taker") == 1     # the holder's thread woke us
            assert log.append(b"taker again") == 2
            assert [r.value for r in log.read()] == [b"holder", b"taker", b"taker again"]
            assert all(sleeps) and (wake_mode == "polling" or sleeps)   # woken, no timeout
    finally:
        stop.set()
        holder.join(60)
    assert holder.exitcode == 0


def test_an_unlock_that_is_no_hand_over_wakes_the_sleeping_taker(tmp_path, monkeypatch,
                                                                 wake_mode):
    sleeps = _only_a_wake_lets_in(monkeypatch)
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as a, kqlite.Log.open(path, lock_timeout_ms=60_000) as b:
        assert a.append(b"a0") == 0
        got, errors = [], []
        a._lock.acquire()                        # a's releasing thread must not hand over
        try:
            def take():
                try:
                    got.append(b.append(b"b0"))
                except BaseException as exc:     # the test fails on it below
                    errors.append(exc)

            taker = threading.Thread(target=take)
            taker.start()
            _wait_until(lambda: _want_posted(a), "posted its want")
            if wake_mode == "futex":
                # The want is posted before the taker sleeps: an unlock in between would
                # let it in without a sleep, and the wake would go untested.
                _wait_until(sleeps.entered.is_set, "gone to sleep")
            # The unlock of a failed write (keep_or_release(failed=True)), want still set.
            lock_handoff.keep_or_release(a, True)
        finally:
            a._lock.release()
        taker.join(120)
        assert not taker.is_alive()
        assert errors == [] and got == [1]
        assert all(sleeps) and (wake_mode == "polling" or sleeps)       # woken, no timeout
        assert a.append(b"a1") == 2              # a takes it back fresh, caught up
        assert [r.value for r in b.read()] == [b"a0", b"b0", b"a1"]


def test_a_holder_killed_while_a_taker_sleeps_does_not_wedge_the_log(tmp_path, wake_mode):
    path = str(tmp_path / "t-0")
    # Opened first: opening takes the write lock, which the holder will not hand over.
    with kqlite.Log.open(path, lock_timeout_ms=60_000) as log:
        ready, stop = CTX.Event(), CTX.Event()
        holder = CTX.Process(target=_keeping_holder, args=(path, ready, stop, True))
        holder.start()
        assert ready.wait(60)
        got, errors = [], []

        def take():
            try:
                got.append(log.append(b"taker"))
            except BaseException as exc:         # the test fails on it below
                errors.append(exc)

        taker = threading.Thread(target=take)
        taker.start()
        _wait_until(lambda: _want_posted(log), "posted its want")
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(60)
        assert holder.exitcode == -signal.SIGKILL
        taker.join(120)
        assert not taker.is_alive()
        assert errors == [] and got == [1]
        assert [r.value for r in log.read()] == [b"holder", b"taker"]


def test_wait_word_returns_at_once_when_the_word_differs_and_says_it_timed_out(tmp_path):
    if not shared_page.CAN_WAIT:
        pytest.skip("no futex on this platform")
    with open(tmp_path / "page", "w+b") as f:
        f.truncate(shared_page.PAGE_SIZE)
        page = shared_page.map_page(f.fileno())
        try:
            page.view[WANT_AT] = 1
            # An hour's timeout: returning at all shows the value was compared.
            assert shared_page.wait_word(page.view, WANT_AT, 0, 3600.0)
            shared_page.wake_word(page.view, WANT_AT)     # nobody sleeps: a no-op
            assert page.view[WANT_AT] == 1
            # Nobody wakes a sleep on the value the word holds: it ends by its timeout.
            assert not shared_page.wait_word(page.view, WANT_AT, 1, 0.001)
        finally:
            page.close()
        with pytest.raises(ValueError):
            shared_page.wait_word(page.view, WANT_AT, 1, 3600.0)
