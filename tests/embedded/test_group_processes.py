"""A producer process and a consumer group of 3 processes sharing one data dir."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import kqlite

WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")
N = 3000


def start(*args):
    return subprocess.Popen([sys.executable, WORKER, *map(str, args)])


def read_outputs(paths):
    seen = []
    for path in paths:
        if os.path.exists(path):
            with open(path) as f:
                seen.extend(line.split()[2] for line in f if line.count(" ") == 2)
    return seen


def setup(tmp_path):
    data = tmp_path / "data"
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        db.create_topic("events", partitions=6)
    return data


def test_each_record_consumed_exactly_once_per_group(tmp_path):
    data = setup(tmp_path)
    done = tmp_path / "produced"
    outs = [tmp_path / f"c{i}.txt" for i in range(3)]
    consumers = [start("consume", data, "events", "g", out, done, N) for out in outs[:2]]
    producer = start("produce", data, "events", N, done)
    time.sleep(0.3)
    consumers.append(start("consume", data, "events", "g", outs[2], done, N))  # joins late
    assert producer.wait(60) == 0
    for c in consumers:
        assert c.wait(90) == 0
    seen = read_outputs(outs)
    counts = Counter(seen)
    assert len(counts) == N, f"missing {N - len(counts)} records"
    assert max(counts.values()) == 1, [v for v, c in counts.items() if c > 1][:5]
    assert sum(1 for out in outs if os.path.getsize(out) > 0) >= 2  # the work was shared


def test_at_least_once_across_kill_9(tmp_path):
    data = setup(tmp_path)
    done = tmp_path / "produced"
    outs = [tmp_path / f"c{i}.txt" for i in range(3)]
    consumers = [start("consume", data, "events", "g", out, done, N) for out in outs]
    producer = start("produce", data, "events", N, done)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not outs[0].exists() or outs[0].stat().st_size < 2000):
        time.sleep(0.02)
    consumers[0].send_signal(signal.SIGKILL)
    consumers[0].wait()
    assert producer.wait(60) == 0
    for c in consumers[1:]:
        assert c.wait(90) == 0
    counts = Counter(read_outputs(outs))
    assert len(counts) == N  # nothing lost: the survivors re-read what the dead one had not committed
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        assert sum(db.offsets.committed("g").values()) == N
