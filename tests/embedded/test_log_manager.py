"""The Database's open logs: leases, pins, the LRU of idle logs, the descriptor limit."""

import os
import subprocess
import sys
import threading

import pytest

import kqlite
from kqlite.errors import LogClosedError
from kqlite.db.log_manager import LogManager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0,
                     max_open_logs=3) as database:
        database.create_topic("t", partitions=8)
        yield database


def touch(db, *partitions):
    for p in partitions:
        with db.leased_log("t", p) as lg:
            lg.end_offset


def test_idle_logs_are_closed_least_recently_used_first(db):
    touch(db, 0, 1, 2)
    assert db.logs.open_keys() == [("t", 0), ("t", 1), ("t", 2)]
    touch(db, 0)                     # 0 is now the most recently used
    touch(db, 3)
    assert db.logs.open_keys() == [("t", 2), ("t", 0), ("t", 3)]
    assert len(db.logs) == 3


def test_a_leased_log_is_never_evicted(db):
    with db.leased_log("t", 5) as held:
        held.append(b"held")
        touch(db, *range(8))         # far more than max_open_logs, 5 included
        assert ("t", 5) in db.logs.open_keys()
        held.append(b"still open")   # the same object, never closed under us
        with db.leased_log("t", 5) as again:
            assert again is held
    touch(db, 0, 1, 2, 3)
    assert ("t", 5) not in db.logs.open_keys()
    with db.leased_log("t", 5) as reopened:
        assert reopened is not held
        assert [r.value for r in reopened.read()] == [b"held", b"still open"]


def test_an_evicted_log_reopens_with_its_data(db):
    for p in range(8):
        with db.leased_log("t", p) as lg:
            lg.append([b"p%d-%d" % (p, i) for i in range(3)])
    assert len(db.logs) == 3
    for p in range(8):
        with db.leased_log("t", p) as lg:
            assert [r.value for r in lg.read()] == [b"p%d-%d" % (p, i) for i in range(3)]
            lg.append(b"more")
    assert [p.end_offset for p in db.describe_topic("t").partitions] == [4] * 8


def test_limit_is_exceeded_rather_than_waited_for_when_all_are_leased(db):
    with db.leased_log("t", 0), db.leased_log("t", 1), db.leased_log("t", 2), \
            db.leased_log("t", 3) as fourth:
        fourth.append(b"x")
        assert len(db.logs) == 4
    assert len(db.logs) == 3         # back under the limit once a lease ends


def test_pinned_logs_stay_open_until_the_database_closes(db):
    pinned = db.log("t", 7)
    touch(db, *range(7))
    assert ("t", 7) in db.logs.open_keys()
    pinned.append(b"kept")
    assert db.log("t", 7) is pinned
    db.close()
    with pytest.raises(LogClosedError):
        pinned.append(b"after close")


def test_deleting_a_topic_closes_its_logs_even_when_leased(db):
    with db.leased_log("t", 0) as lg:
        lg.append(b"x")
        db.delete_topic("t")
        assert db.logs.open_keys() == []
        with pytest.raises(LogClosedError):
            lg.append(b"y")
    with pytest.raises(kqlite.UnknownTopicError):
        touch(db, 0)


def test_leases_from_many_threads(tmp_path):
    with kqlite.open(tmp_path / "d", retention_check_interval_ms=0, max_open_logs=2) as db:
        db.create_topic("t", partitions=6)
        errors = []

        def work(n):
            try:
                for i in range(60):
                    with db.leased_log("t", (n + i) % 6) as lg:
                        lg.append(b"%d-%d" % (n, i))
            except Exception as exc:   # reported below: a thread cannot fail the test
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        values = set()
        for p in range(6):
            with db.leased_log("t", p) as lg:
                values.update(r.value for r in lg.read())
        assert values == {b"%d-%d" % (n, i) for n in range(4) for i in range(60)}
        assert len(db.logs) <= 2


def test_a_failed_open_leaves_nothing_behind(db):
    with pytest.raises(kqlite.UnknownTopicError):
        with db.leased_log("t", 99):
            pass
    assert db.logs.open_keys() == []
    with pytest.raises(ValueError, match="max_open_logs"):
        LogManager(lambda key: None, 0)


def test_default_limit_follows_the_descriptor_limit():
    code = ("import resource\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit("
            "resource.RLIMIT_NOFILE)[1]))\n"
            "from kqlite.db.log_manager import default_max_open_logs\n"
            "print(default_max_open_logs())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert int(out) == 1024 // 8
