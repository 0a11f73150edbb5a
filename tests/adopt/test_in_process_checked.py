"""The in-process broker under faults, judged by the fault harness's Jepsen-style checker
(tests/faults/harness/checker.py): the application leads a partition (its embedded data
dir adopted) and appends with acks=all, one value per call, while a nemesis kills,
restarts, pauses and resumes the two other brokers; at the end every acknowledged value
must be read back in-process exactly once, at its acknowledged offset. The application
itself restarts too: it stops writing, its broker stops without a controlled shutdown
(its leadership moves to a follower, as after a crash) and opens the same data dir again.
The default run takes a few rounds; --soak many more."""

import os
import signal
import sys
import threading
import time

import pytest

import kqlite
from kqlite.cluster.in_process import InProcessAppendError, open_broker
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol import ErrorCode

from brokers import FastBroker, until

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "faults"))
from harness.checker import check  # noqa: E402
from harness.history import FAIL, INFO, INVOKE, OK, History  # noqa: E402

KEY = "events/0"


def _producer(app, history, stop, running, idle):
    """Appends while ``running`` is set (the application between restarts); ``idle`` is
    set while it waits for it."""
    i = 0
    while not stop.is_set():
        if not running.is_set():
            idle.set()
            running.wait(1)
            continue
        idle.clear()
        broker = app[0]
        value = f"v{i}"
        history.add(1, INVOKE, "send", (KEY, value))
        try:
            offset = broker.append("events", 0, [value.encode()], acks=-1, timeout_ms=3000)
        except InProcessAppendError as exc:
            # NOT_ENOUGH_REPLICAS writes nothing; a timeout or a leadership moved under a
            # waiting append may have written it.
            kind = FAIL if exc.error_code == ErrorCode.NOT_ENOUGH_REPLICAS else INFO
            history.add(1, kind, "send", (KEY, value, str(exc)))
            time.sleep(0.05)
        else:
            history.add(1, OK, "send", (KEY, value, offset))
        i += 1


def test_acks_all_in_process_under_kills_and_pauses(tmp_path, zk_hosts, zk_client, soak):
    others = {b: FastBroker(b, tmp_path / f"broker-{b}", zk_hosts) for b in (2, 3)}
    app = tmp_path / "app"
    with kqlite.open(app) as db:
        db.create_topic("events", partitions=1, config={"min.insync.replicas": 2})
    zk = zk_client()
    history, stop, running, idle = History(), threading.Event(), threading.Event(), \
        threading.Event()
    broker = None
    app_broker = []
    try:
        for b in others.values():
            b.start()
        for b in others.values():
            b.wait_listening()
        until(lambda: len(zk.get_children("/brokers/ids")) == 2, "brokers 2 and 3 registered")
        broker = open_broker(str(app), zookeeper=zk_hosts, broker_id=1,
                             default_replication_factor=3, replica_lag_time_max_ms=1000)

        def isr():
            state = ZkStore(zk).partition_state("events", 0)
            return sorted(state.isr) if state is not None else []
        app_broker.append(broker)
        until(lambda: isr() == [1, 2, 3], "the ISR complete")
        running.set()
        writer = threading.Thread(target=_producer,
                                  args=(app_broker, history, stop, running, idle))
        writer.start()
        try:
            for round_ in range(12 if soak else 3):
                victim = others[2 + round_ % 2]
                if round_ % 3 == 2:
                    # The application restarts: its writer stops first, then its broker
                    # goes without moving its leaderships, and comes back on its dir.
                    running.clear()
                    assert idle.wait(60)
                    broker.close(controlled=False)
                    broker = open_broker(str(app), zookeeper=zk_hosts, broker_id=1,
                                         default_replication_factor=3,
                                         replica_lag_time_max_ms=1000)
                    app_broker[0] = broker
                    running.set()
                elif round_ % 4 < 2:
                    victim.kill()
                    # Its ZooKeeper session must expire before it may register again.
                    gone = str(victim.broker_id)
                    until(lambda: gone not in zk.get_children("/brokers/ids"),
                          f"broker {gone}'s registration gone")
                    victim.start().wait_listening()
                else:
                    os.kill(victim.proc.pid, signal.SIGSTOP)
                    time.sleep(1.5)
                    os.kill(victim.proc.pid, signal.SIGCONT)
                until(lambda: isr() == [1, 2, 3], "the ISR complete again")
        finally:
            stop.set()
            writer.join(60)
        until(lambda: broker.high_watermark("events", 0) == broker.log_end("events", 0),
              "every record committed")
        history.add(2, INVOKE, "assign", [KEY])
        history.add(2, OK, "assign", [KEY])
        history.add(2, INVOKE, "poll", None)
        history.add(2, OK, "poll", {KEY: [(r.offset, r.value.decode())
                                          for r in broker.read("events", 0, 0)]})
    except BaseException:
        for b in others.values():
            print(f"--- broker {b.broker_id} ---\n{b.log()}")
        raise
    finally:
        stop.set()
        for b in others.values():
            if b.alive:
                os.kill(b.proc.pid, signal.SIGCONT)
        if broker is not None:
            broker.close(controlled=False)
        for b in others.values():
            b.kill()
    report = check(history.ops())
    assert report.acknowledged > 0, report.summary()
    assert not report.errors(), report.summary()
