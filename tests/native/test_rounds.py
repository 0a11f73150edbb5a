"""Group commit's rendezvous (Rounds: csrc/rounds.c and pure_rounds.py), each
implementation driven by real threads: who leads, who waits, what wakes whom."""

import threading
import time

import pytest

LONG = 10 * 10**9       # ns: a gathering that only a wake-up can end in time


def _start(target, *args):
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def _until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def test_a_lone_thread_leads_at_once(impl):
    r = impl.Rounds()
    for _ in range(3):
        assert r.enter(LONG) is True    # nobody to gather: no wait
        r.leave()


def test_a_thread_arriving_during_a_round_waits_for_its_end(impl):
    r = impl.Rounds()
    assert r.enter(0)
    got = []
    t = _start(lambda: got.append(r.enter(0)))
    time.sleep(0.05)
    assert got == [] and t.is_alive()       # still waiting: the round runs
    r.leave()
    t.join(10)
    assert got == [False]                   # told that the round ended, not to lead
    assert r.enter(0) is True               # nobody leads now
    r.leave()


def test_every_waiter_wakes_when_the_round_ends(impl):
    r = impl.Rounds()
    assert r.enter(0)
    got = []
    threads = [_start(lambda: got.append(r.enter(0))) for _ in range(6)]
    time.sleep(0.05)
    r.leave()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert got == [False] * 6


def test_a_writer_in_progress_holds_the_leader_until_it_is_done(impl):
    r = impl.Rounds()
    r.writing(1)
    started = []
    t = _start(lambda: started.append(r.enter(LONG)))
    time.sleep(0.05)
    assert started == []                     # gathering: the write has not ended
    r.writing(-1)                            # the write ends: wakes the leader
    t.join(5)
    assert started == [True]
    r.leave()


def test_gathering_gives_up_after_its_time(impl):
    r = impl.Rounds()
    r.writing(1)                             # a write that never ends
    began = time.monotonic()
    assert r.enter(20_000_000) is True       # 20 ms at most
    assert time.monotonic() - began < 5
    r.leave()
    r.writing(-1)


def test_the_leader_waits_for_as_many_joiners_as_the_last_round_had(impl):
    r = impl.Rounds()
    # A round of three: a write in progress holds its leader while two others join.
    r.writing(1)
    lead = []
    leader = _start(lambda: lead.append(r.enter(LONG)))
    time.sleep(0.02)
    waiters = [_start(r.enter, 0) for _ in range(2)]
    time.sleep(0.05)
    assert lead == []
    r.writing(-1)
    leader.join(5)
    assert lead == [True]
    r.leave()
    for t in waiters:
        t.join(10)
        assert not t.is_alive()
    # That round covered three threads, so the next leader gathers until two others
    # have joined (or LONG passes).
    lead = []
    leader = _start(lambda: lead.append(r.enter(LONG)))
    time.sleep(0.05)
    assert lead == [] and leader.is_alive()
    joined = []
    joiners = [_start(lambda: joined.append(r.enter(0))) for _ in range(2)]
    leader.join(5)
    assert lead == [True]
    assert joined == []                     # they wait for the round the leader runs
    r.leave()
    for t in joiners:
        t.join(10)
    assert joined == [False, False]


def test_many_threads_never_lead_two_rounds_at_once(impl):
    r = impl.Rounds()
    state = {"leading": 0, "most": 0, "rounds": 0}
    lock = threading.Lock()

    def work():
        for _ in range(200):
            r.writing(1)
            r.writing(-1)
            while not r.enter(50_000):
                pass
            with lock:
                state["leading"] += 1
                state["most"] = max(state["most"], state["leading"])
                state["rounds"] += 1
            time.sleep(0)
            with lock:
                state["leading"] -= 1
            r.leave()
    threads = [_start(work) for _ in range(8)]
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert state["most"] == 1
    assert state["rounds"] == 8 * 200

