"""AT-01: kill -9 while appending, then reopen and check every acknowledgement.

A child process (appender.py, forked from a warm server) appends batches to a log
on the real file system and prints ``ACK first count sha256 id`` after each append
returns; the parent SIGKILLs it after a random 5-60 ms and reopens the log, which
runs crash recovery. The same log is reused for 10 iterations (50 under --soak), so
each run starts from what the previous recovery left. Checked after every kill:

(a) every acknowledged offset reads back with identical bytes (sha256 of the batch);
(b) offsets are contiguous from the log start (0) to the log end, no gaps or duplicates;
(c) the log end is at least one past the last acknowledged offset;
(d) everything else (past the last acknowledgement, or an append that finished but
    was not acknowledged before the kill) is whole batches the child really wrote
    (every record self-describing and equal to what the child generated), never
    partial batches or garbage;
(e) each recovery report accounts for the file's bytes: kept + cut == size before;
(f) recovery is idempotent: a clean reopen changes nothing, and at the last kill of
    each log a full recovery from offset 0 (state file removed) cuts nothing.

Variants: fsync="always" (one thread), fsync="always" with 4 threads (group commit),
and the default mode (no fsync: a process kill must not lose anything that was
written, because the page cache survives it). 100/50/50 iterations in CI; thousands
with --soak.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import kqlite
from appender import batch_values, digest, parse_value

APPENDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "appender.py")
SPLIT_APPEND = 1 << 20     # kqlite splits longer append() lists into ~1 MiB batches
CONFIG = {"segment_bytes": 65536, "index_interval_bytes": 1024}


class Server:
    """The appender server: forks one worker per command."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, APPENDER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=dict(os.environ))

    def run(self, cmd, kill_after):
        """Start a worker, SIGKILL it after ``kill_after`` seconds; returns its ACK lines
        and whether it died by our signal."""
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        first = self._line()
        assert first.startswith("PID "), first
        pid = int(first.split()[1])
        if kill_after is not None:      # else the worker kills itself
            time.sleep(kill_after)
            os.kill(pid, signal.SIGKILL)
        acks, errors = [], []
        while True:
            line = self._line()
            if line.startswith("EXIT "):
                status = int(line.split()[1])
                break
            if line.startswith("ACK "):
                _, first_offset, count, sha, batch_id = line.split()
                acks.append((int(first_offset), int(count), sha, batch_id))
            else:
                errors.append(line)
        assert not errors, errors
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        return acks, killed

    def _line(self):
        line = self.proc.stdout.readline()
        assert line, "appender server died"
        return line.decode().rstrip("\n")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def log_sizes(path):
    return {os.path.join(path, n): os.path.getsize(os.path.join(path, n))
            for n in os.listdir(path) if n.endswith(".log")}


def check_log(path, config, acked, full_recovery=False):
    """Reopen after a kill and check (a)-(f); ``acked``: {first: (count, sha, id)}."""
    # A kill before the worker's first open of a fresh log leaves no directory: on a
    # loaded machine that open can take longer than the kill's delay.
    sizes = log_sizes(path) if os.path.isdir(path) else {}
    with kqlite.Log.open(path, **config) as log:
        for report in log.recovery_reports:                               # (e)
            assert report.valid_bytes + report.truncated_bytes == sizes[report.path], report
        cut = sum(r.truncated_bytes for r in log.recovery_reports)
        start, end = log.start_offset, log.end_offset
        recs = list(log.read())
    assert start == 0
    offsets = [r.offset for r in recs]
    assert offsets == list(range(start, end)), "offsets are not contiguous"   # (b)
    last_acked = max((f + c for f, (c, _, _) in acked.items()), default=0)
    assert end >= last_acked, f"log end {end} < last acknowledged end {last_acked}"  # (c)
    values = [r.value for r in recs]
    for first, (count, sha, batch_id) in acked.items():                    # (a)
        got = values[first:first + count]
        assert digest(got) == sha, f"acknowledged batch {batch_id} at {first} differs"
    # (d) every record belongs to a batch the child generated, each batch once, whole.
    # Only an append of more than 1 MiB, which kqlite splits into several batches, may
    # be cut short by a crash (whole batches of it survive; see durability.md).
    seen = set()
    o = 0
    while o < len(values):
        parsed = parse_value(values[o])
        assert parsed is not None and parsed[1] == 0, f"offset {o}: not a batch start"
        batch_id, _, count = parsed
        assert batch_id not in seen, f"batch {batch_id} appears twice"
        seen.add(batch_id)
        expected = batch_values(batch_id)
        n = 0
        while n < count and o + n < len(values) and \
                (parse_value(values[o + n]) or ("",))[0] == batch_id:
            n += 1
        if n < count:
            assert sum(map(len, expected)) > SPLIT_APPEND, \
                f"offset {o}: batch {batch_id} is partial ({n} of {count} records)"
        assert values[o:o + n] == expected[:n], f"offset {o}: batch {batch_id} is garbled"
        count = n
        o += count
    # (f) idempotent: a clean reopen changes nothing; a full recovery cuts nothing.
    recovered = log_sizes(path)
    if full_recovery:
        os.remove(os.path.join(path, ".kqlite-state"))
    with kqlite.Log.open(path, **config) as log:
        assert log.recovery_reports == []
        assert (log.start_offset, log.end_offset) == (start, end)
    assert log_sizes(path) == recovered
    return cut, len(seen) - len(acked)


def kill_loop(server, base, iterations, threads, config, seed, per_log=10, self_kill=False,
              broken=None):
    """``iterations`` kills; a fresh log every ``per_log`` of them (the checks read
    the whole log after every kill)."""
    rnd = random.Random(seed)
    stats = {"kills": 0, "acked": 0, "cut": 0, "unacked": 0}
    for i in range(iterations):
        if i % per_log == 0:
            path = str(base / ("t-%d" % (i // per_log)))
            acked = {}
            extra = 0
        cmd = {"path": path, "seed": seed * 100_000 + i, "threads": threads,
               "config": config}
        if broken:
            cmd["broken"] = broken
        if self_kill:
            cmd["kill_at_write"] = rnd.randint(1, 60)
            cmd["large"] = True
            acks, killed = server.run(cmd, None)
        else:
            acks, killed = server.run(cmd, rnd.uniform(0.005, 0.060))
        assert killed, "the worker exited by itself"
        stats["kills"] += 1
        stats["acked"] += len(acks)
        for first, count, sha, batch_id in acks:
            assert first not in acked, f"offset {first} acknowledged twice"
            acked[first] = (count, sha, batch_id)
        cut, unacked = check_log(path, config, acked,
                                 full_recovery=(i % per_log == per_log - 1))
        stats["cut"] += cut > 0             # kills that left a torn batch for recovery
        stats["unacked"] += unacked > extra  # kills between a write and its acknowledgement
        extra = unacked
    return stats


@pytest.mark.parametrize("fsync,threads,iterations", [
    ("always", 1, 100), ("always", 4, 50), ("never", 1, 50)],
    ids=["fsync-always", "group-commit-4-threads", "no-fsync"])
def test_kill9_loses_no_acknowledged_append(server, disk, tmp_path, soak, fsync, threads,
                                            iterations):
    config = dict(CONFIG, fsync=fsync)
    n = iterations * 20 if soak else iterations
    # tmpfs in CI (a process kill does not care about the medium, and it keeps the
    # loop fast); the real file system with its fsync latency under --soak.
    base = tmp_path if soak else disk
    stats = kill_loop(server, base, n, threads, config, seed=threads,
                      per_log=50 if soak else 10)
    print(f"kill -9 {fsync} x{threads} threads: {stats}")
    assert stats["kills"] == n
    assert stats["acked"] > 5 * n, "the child hardly appended anything before being killed"


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_kill9_in_the_middle_of_a_write(server, disk, soak, fsync):
    """The worker SIGKILLs itself during its k-th write (k random in 1..120, counting
    every file: segments, indexes, state), after writing a random part of a large
    write: torn batches on a real file system, for recovery to cut."""
    config = dict(CONFIG, fsync=fsync, segment_bytes=16384)
    n = 2000 if soak else 60
    stats = kill_loop(server, disk, n, 1, config, seed=7, self_kill=True)
    print(f"self-kill at a write, {fsync}: {stats}")
    assert stats["kills"] == n
    assert stats["cut"] > n // 10, "recovery hardly ever had a torn batch to cut"


def test_negative_control_acknowledging_from_a_memory_buffer_is_caught(server, disk):
    """Proof the harness can fail: a build whose segment writes wait in process memory
    acknowledges appends a kill -9 then loses, and the checks must say so."""
    with pytest.raises(AssertionError, match="acknowledged|differs|contiguous"):
        kill_loop(server, disk, 20, 1, dict(CONFIG, fsync="never"), seed=11,
                  broken="buffered")


def test_kill9_while_only_holding_the_log_open(server, tmp_path):
    """A process that dies holding the log open (and its locks) never wedges it, and
    the next opener recovers (nothing to cut)."""
    path = str(tmp_path / "t-0")
    config = dict(CONFIG, fsync="always")
    with kqlite.Log.open(path, **config) as log:
        log.append([b"x"] * 3)
    server.proc.stdin.write((json.dumps({"path": path, "seed": 0, "threads": 1,
                                          "config": config, "open_only": True}) + "\n").encode())
    server.proc.stdin.flush()
    pid = int(server._line().split()[1])
    assert server._line() == "OPEN"
    os.kill(pid, signal.SIGKILL)
    assert server._line().startswith("EXIT ")
    with kqlite.Log.open(path, lock_timeout_ms=2000, **config) as log:
        assert log.recovery_reports == []
        assert [r.value for r in log.read()] == [b"x"] * 3
        assert log.append(b"y") == 3
