"""A data dir's shared files are opened once per process, however many logs are open.

Each open log costs its own descriptors only (its two lock files and its segments'
three files); the data dir's lock and users files are shared by all the process's
logs and closed with the last. The clean-shutdown marker is still written by the
last log of the last process, and never after a log of this process failed."""

import os
import subprocess
import sys
import threading

import pytest

import kqlite
from kqlite.storage import data_dir as data_dir_module
from kqlite.storage.checkpoint import read_offsets
from kqlite.storage.data_dir import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from kqlite.storage.fs import DEFAULT_FS

needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def open_descriptors(under):
    """This process's descriptors open on files below ``under``: other threads of the
    test process (a client's sockets, the session's ZooKeeper plugin) open and close
    their own meanwhile, which a count of every descriptor would take for the logs'."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:          # closed since the listing
            continue
        count += target.startswith(os.path.realpath(under) + os.sep)
    return count


@needs_proc
@pytest.mark.parametrize("count", [1, 40])
def test_an_open_log_costs_at_most_five_descriptors(tmp_path, count):
    data = tmp_path / "data"
    kqlite.Log.open(data / "warm-0").close()       # the data dir exists; nothing stays open
    before = open_descriptors(data)
    logs = [kqlite.Log.open(data / f"t-{i}") for i in range(count)]
    try:
        for log in logs:
            log.append(b"x")
        assert all(len(log.segments) == 1 for log in logs)
        shared = 2                                  # the data dir's lock and users files
        held = open_descriptors(data) - before
        assert count <= held <= 5 * count + shared       # each log holds its segment at least
    finally:
        for log in logs:
            log.close()
    assert open_descriptors(data) == before


def test_the_logs_of_a_data_dir_share_one_data_dir(tmp_path):
    data = tmp_path / "data"
    with kqlite.Log.open(data / "a-0") as a, kqlite.Log.open(data / "b-0") as b:
        assert a._data_dir is b._data_dir
    with kqlite.Log.open(data / "a-0") as again:
        assert again._data_dir is not a._data_dir   # the last close released it


def test_the_last_log_to_close_marks_a_clean_shutdown(tmp_path):
    data = tmp_path / "data"
    marker = data / CLEAN_SHUTDOWN_FILE
    a = kqlite.Log.open(data / "a-0")
    b = kqlite.Log.open(data / "b-0")
    assert not marker.exists()
    a.close()
    assert not marker.exists()
    b.close()
    assert marker.exists()


def test_a_failed_log_keeps_the_data_dir_unclean(tmp_path):
    data = tmp_path / "data"
    a = kqlite.Log.open(data / "a-0")
    b = kqlite.Log.open(data / "b-0")
    b._failed = OSError("an fsync failed")          # as Log._fail leaves it
    b.close()
    a.close()
    assert not (data / CLEAN_SHUTDOWN_FILE).exists()
    kqlite.Log.open(data / "a-0").close()             # a fresh start, nothing failed
    assert (data / CLEAN_SHUTDOWN_FILE).exists()


def test_another_process_keeps_the_data_dir_open(tmp_path):
    data = tmp_path / "data"
    kqlite.Log.open(data / "a-0").close()
    code = ("import sys, kqlite\n"
            "log = kqlite.Log.open(sys.argv[1])\n"
            "print('open', flush=True)\n"
            "sys.stdin.readline()\n"
            "log.close()\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(data / "b-0")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "open\n"
        kqlite.Log.open(data / "a-0").close()
        assert not (data / CLEAN_SHUTDOWN_FILE).exists()    # the child still has one open
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=120) == 0
    finally:
        if child.poll() is None:
            child.kill()
    assert (data / CLEAN_SHUTDOWN_FILE).exists()


def test_threads_updating_checkpoints_lose_nothing(tmp_path):
    """The process's threads share one descriptor of the checkpoint lock file, whose
    flock cannot keep them apart; the data dir's thread lock does."""
    data = tmp_path / "data"
    logs = [kqlite.Log.open(data / f"t-{i}") for i in range(8)]
    try:
        for i, log in enumerate(logs):
            log.append([b"x"] * (i + 1))
            log.flush()                             # recovery points 1..8: distinct entries

        def checkpoint(log):
            for _ in range(20):
                log._write_checkpoints()
        threads = [threading.Thread(target=checkpoint, args=(log,)) for log in logs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        offsets = read_offsets(DEFAULT_FS, str(data / RECOVERY_POINT_FILE))
        assert offsets == {("t", i): log.recovery_point for i, log in enumerate(logs)}
    finally:
        for log in logs:
            log.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_with_no_data_dirs(tmp_path):
    with kqlite.Log.open(tmp_path / "data" / "t-0"):
        assert data_dir_module._registry
        pid = os.fork()
        if pid == 0:
            os._exit(0 if not data_dir_module._registry else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
