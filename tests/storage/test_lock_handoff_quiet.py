"""The releasing thread of lock_handoff.py backs off while nobody asks for a kept lock
(it looks every QUIET_TICK instead of every TICK), and group commit notifies its
conditions only when somebody waits on them. Neither may cost a guarantee:

- a holder that kept the lock and went quiet long enough for the thread to back off
  still hands the lock over when another handle asks, before IDLE (here made longer
  than the taker's lock timeout, so only the want can free it);
- after such a hand-over the handles take turns again, offsets dense;
- group commit with threads that join rounds at different moments (some appends
  sync, the leader gathers) returns every append with its records fsynced;
- a closed handle leaves the thread's books: an application that opens and closes
  logs must not leave every closed Log held, and looked at every tick, for good.
"""

import gc
import threading
import time
import weakref

import kqlite
from kqlite.storage import lock_handoff


def test_a_quiet_holder_hands_the_lock_over_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_handoff, "IDLE", 3600.0)     # only a want frees the lock
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as a, kqlite.Log.open(path, lock_timeout_ms=60_000) as b:
        assert a.append(b"a0") == 0
        # Quiet for many ticks: the releasing thread backs off to QUIET_TICK.
        time.sleep(20 * lock_handoff.QUIET_TICK)
        assert b.append(b"b0") == 1           # a's thread honoured b's want
        time.sleep(20 * lock_handoff.QUIET_TICK)
        assert a.append(b"a1") == 2           # and b's thread honours a's
        assert [r.value for r in a.read()] == [b"a0", b"b0", b"a1"]
        assert [r.value for r in b.read()] == [b"a0", b"b0", b"a1"]


def test_closed_logs_leave_the_releasing_thread(tmp_path):
    closed = []
    for i in range(20):
        log = kqlite.Log.open(tmp_path / f"t-{i}")
        log.append(b"x")            # the write keeps the lock: the thread registers it
        log.close()
        closed.append(weakref.ref(log))
    del log
    deadline = time.monotonic() + 10 * lock_handoff.QUIET_TICK + 5
    while any(ref() is not None for ref in closed) and time.monotonic() < deadline:
        time.sleep(lock_handoff.TICK)
        gc.collect()
    assert [ref() for ref in closed if ref() is not None] == []


def test_group_commit_rounds_cover_mixed_single_and_batched_appends(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", fsync="always") as log:
        got, errors = [], []

        def body(i):
            try:
                appends(i)
            except BaseException as exc:    # a thread's failure fails the test
                errors.append(exc)

        def appends(i):
            for k in range(30):
                if k % 3 == i % 3:
                    first = log.append([b"%d-%d-x" % (i, k), b"%d-%d-y" % (i, k)])
                    mine = (first, first + 1)
                else:
                    mine = (log.append(b"%d-%d" % (i, k)),)
                got.extend(mine)
                # Every append returned after a round covering it.
                assert log.recovery_point > mine[-1]

        threads = [threading.Thread(target=body, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        end = log.end_offset
        assert sorted(got) == list(range(end))
        assert log.recovery_point == end
        log.flush()     # a forced round with nothing new to cover still returns
        assert [r.offset for r in log.read()] == list(range(end))
