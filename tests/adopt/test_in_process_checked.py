"""The in-process broker under faults, judged by the fault harness's Jepsen-style checker
(tests/faults/harness/checker.py). The application is a process of its own
(app_process.py): it embeds broker 1 on its data dir (an embedded dir, adopted) and sends
values with acks=all through the in-process Producer, idempotent, while a nemesis kills,
restarts, pauses and resumes the two other brokers (one at a time, or both at once so that
the waiting appends fail and are retried), and SIGKILLs the application itself and starts
it again on the same dir. Each incarnation reports its invocations and acknowledgements
over its stdout; the last one reads the partition back in-process. Every acknowledged
value must be read exactly once, at its acknowledged offset: no loss, no duplicate.

Duplicates with idempotence: the producer retries a send whose outcome is unknown with
the same producer id and sequence, and the application sends a batch refused with
NOT_LEADER_OR_FOLLOWER to the leader over the wire, the same batch again, so a value read
twice is a failure of the leaders' deduplication (the checker's ``duplicate``). A
restarted application is a new producer and never resends its predecessor's values.
The default run takes a few rounds; --soak many more."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import kqlite
from kqlite.cluster.zookeeper.store import ZkStore

from brokers import ClusterBroker, child_environment, start_registered, until

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "faults"))
from harness.checker import check  # noqa: E402
from harness.history import INFO, INVOKE, OK, History  # noqa: E402

KEY = "events/0"
_APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "app_process.py")


class Application:
    """One incarnation of app_process.py; its reports go into ``history`` as worker
    ``process`` (a new worker per incarnation, as Jepsen counts a crashed client)."""

    def __init__(self, data_dir, zk_hosts, history, process):
        self.history = history
        self.process = process
        self.ready = threading.Event()
        self.final_read = None
        self.proc = subprocess.Popen(
            [sys.executable, _APP, str(data_dir), zk_hosts, f"a{process}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_environment())
        self._stderr = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr),
                         daemon=True).start()

    def _read_stdout(self):
        add, p = self.history.add, self.process
        for line in self.proc.stdout:
            event = json.loads(line)
            if "ready" in event:
                self.ready.set()
            elif "invoke" in event:
                add(p, INVOKE, "send", (KEY, event["invoke"]))
            elif "ok" in event:
                add(p, OK, "send", (KEY, event["ok"], event["offset"]))
            elif "info" in event:
                add(p, INFO, "send", (KEY, event["info"], event["error"]))
            elif "read" in event:
                self.final_read = [tuple(r) for r in event["read"]]

    def wait_ready(self, timeout=90):
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the application did not start:\n{self.log()}")
        return self

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop_and_read(self, timeout=90):
        """Ends the sends; the partition as the application read it in-process."""
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout)
        until(lambda: self.final_read is not None, "the application's final read", 10)
        return self.final_read

    def log(self):
        return "".join(self._stderr[-200:])


def _registration_gone(zk, broker_id):
    # A SIGKILLed broker's ZooKeeper session must expire before it may register again.
    until(lambda: str(broker_id) not in zk.get_children("/brokers/ids"),
          f"broker {broker_id}'s registration gone")


def test_acks_all_in_process_while_the_application_and_brokers_are_killed(
        tmp_path, zk_hosts, zk_client, soak):
    others = {b: ClusterBroker(b, tmp_path / f"broker-{b}", zk_hosts) for b in (2, 3)}
    app_dir = tmp_path / "app"
    with kqlite.open(app_dir) as db:
        db.create_topic("events", partitions=1, config={"min.insync.replicas": 2})
    zk = zk_client()
    history = History()
    apps = []

    def isr():
        state = ZkStore(zk).partition_state("events", 0)
        return sorted(state.isr) if state is not None else []

    def leader():
        state = ZkStore(zk).partition_state("events", 0)
        return state.leader if state is not None else -1

    try:
        start_registered(list(others.values()), zk)
        apps.append(Application(app_dir, zk_hosts, history, 1).wait_ready())
        until(lambda: isr() == [1, 2, 3], "the ISR complete")
        for round_ in range(16 if soak else 4):
            victim = others[2 + round_ % 2]
            if round_ % 4 == 1:
                # The application is SIGKILLed mid-send; a follower takes its leadership.
                apps[-1].kill()
                _registration_gone(zk, 1)
                until(lambda: leader() in (2, 3), "a follower leading")
                apps.append(Application(app_dir, zk_hosts, history, len(apps) + 1)
                            .wait_ready())
                # Its leadership back (the controller's preferred-leader election), so
                # that the new incarnation sends again.
                until(lambda: isr() == [1, 2, 3], "broker 1 back in the ISR")
                _elect_preferred(others[2].address)
                until(lambda: leader() == 1, "broker 1 leading again")
            elif round_ % 4 == 0:
                victim.kill()
                _registration_gone(zk, victim.broker_id)
                victim.start().wait_listening()
            else:
                # One follower paused, or both for longer than the producer's
                # timeout_ms: the waiting append times out, and its retries (same
                # sequence) are refused until the ISR is back, then deduplicated.
                paused = [victim] if round_ % 4 == 2 else list(others.values())
                for b in paused:
                    os.kill(b.proc.pid, signal.SIGSTOP)
                time.sleep(1.5 if len(paused) == 1 else 4)
                for b in paused:
                    os.kill(b.proc.pid, signal.SIGCONT)
            until(lambda: isr() == [1, 2, 3], "the ISR complete again")
            time.sleep(0.5)
        read = apps[-1].stop_and_read()
        history.add(0, INVOKE, "assign", [KEY])
        history.add(0, OK, "assign", [KEY])
        history.add(0, INVOKE, "poll", None)
        history.add(0, OK, "poll", {KEY: read})
    except BaseException:
        for b in others.values():
            print(f"--- broker {b.broker_id} ---\n{b.log()}")
        for a in apps:
            print(f"--- application {a.process} ---\n{a.log()}")
        raise
    finally:
        for b in others.values():
            if b.alive:
                os.kill(b.proc.pid, signal.SIGCONT)
        for a in apps:
            a.kill()
        for b in others.values():
            b.kill()
    report = check(history.ops())
    acknowledged_by = {op.process for op in history.ops() if op.type == OK and op.f == "send"}
    assert len(apps) >= 2 and acknowledged_by >= {1, len(apps)}, report.summary()
    assert not report.errors(), report.summary()


def _elect_preferred(bootstrap):
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.elect_leaders(ElectionType.PREFERRED,
                        [TopicPartition("events", 0)]).result(60)
