"""Durable appends from eight threads (fsync="always": the queue whose round leader
writes every waiting thread's record, storage/group_commit.py), with the power cut
at the k-th fsync, for every k of a run and each FaultyFS crash mode: every append
that returned survives, at the offset it returned, with its bytes; no thread hangs;
the threads whose round the cut interrupted get PowerLoss, not an offset."""

import random
import threading

import pytest

import kqlite
from faultyfs import MODES, PowerLoss
from test_power_loss import drop_disk, new_disk

THREADS = 8
PER_THREAD = 12


def _run(fs, path, cut=None):
    """The threads' appends, the power cut at the ``cut``-th fsync after the open;
    returns {offset: value} of those that returned, the number of threads PowerLoss
    stopped, and the fsyncs the appends made."""
    acked, stopped = {}, []
    lock = threading.Lock()
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    opened = fs.counts["fsync"]
    if cut is not None:
        fs.crash_at = ("fsync", opened + cut)
    start = threading.Barrier(THREADS)

    def work(t):
        start.wait()
        for i in range(PER_THREAD):
            value = b"%d-%d" % (t, i)
            try:
                offset = log.append(value)
            except PowerLoss:
                with lock:
                    stopped.append(t)
                return
            with lock:
                assert offset not in acked
                acked[offset] = value
    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a durable append never returned"
    appended = fs.counts["fsync"] - opened
    if not stopped:
        try:
            log.close()
        except PowerLoss:       # this run made fewer fsyncs than the counted one
            pass
    return acked, len(stopped), appended


def test_every_acknowledged_append_survives_a_cut_at_any_fsync(disk):
    fs, path = new_disk(disk, "count", "bare")
    acked, stopped, total = _run(fs, path)
    assert stopped == 0 and sorted(acked) == list(range(THREADS * PER_THREAD))
    drop_disk(fs)
    assert total >= 3
    cuts = 0
    for k in range(1, total + 1):
        mode = MODES[k % len(MODES)]
        fs, path = new_disk(disk, "k%d" % k, "bare")
        acked, stopped, _ = _run(fs, path, cut=k)
        cuts += stopped > 0
        fs.crash_at = None
        fs.crash(random.Random(k), mode)
        with kqlite.Log.open(path, fs=fs) as log:
            stored = {r.offset: r.value for r in log.read()}
        lost = {o: v for o, v in acked.items() if stored.get(o) != v}
        assert not lost, f"cut at fsync #{k} ({mode}): acknowledged appends lost: {lost}"
        assert sorted(stored) == list(range(len(stored)))       # dense
        drop_disk(fs)
    # The run's fsync count varies with how rounds form; most cuts land inside it.
    assert cuts >= 1
