"""Helpers of the mirror's tests: brokers: kqlite single brokers (and tansu) as child processes,
run with the C helpers whichever pass starts the tests (tests/conftest.py)."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {k: v for k, v in os.environ.items() if k != "KQLITE_PURE_PYTHON"}
ENV["PYTHONPATH"] = ROOT + os.pathsep + ENV.get("PYTHONPATH", "")

sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
from cluster_processes import free_port, wait_accepting  # noqa: E402

__all__ = ["ENV", "ROOT", "Child", "Running", "free_port", "kqlite_broker", "topic_rows",
           "wait_for"]


class Child:
    def __init__(self, argv, port, what):
        self.proc = subprocess.Popen(argv, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_accepting(port, self.proc, what)
        self.bootstrap = f"127.0.0.1:{port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def kqlite_broker(data_dir):
    port = free_port()
    return Child([sys.executable, "-m", "kqlite.cli", "--log-level", "warning", "serve",
                  "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"], port,
                 "kqlite serve")


class Running:
    """A Mirror run on an event loop in a thread of the test."""

    def __init__(self, mirror):
        self.mirror = mirror
        self.loop = asyncio.new_event_loop()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.loop.run_until_complete(self.mirror.run())
        except BaseException as exc:      # reported by stop()
            self.error = exc

    def stop(self):
        self.loop.call_soon_threadsafe(self.mirror.stop)
        self.thread.join(30)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def wait_for(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def topic_rows(bootstrap, topic, row, isolation_level="read_uncommitted"):
    """{partition: [row(record)]} of the whole topic, from its start to the end offsets
    the read began with (kafka-python's consumer, no group)."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      isolation_level=isolation_level)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
        out = {tp.partition: [] for tp in tps}
        if tps:
            c.assign(tps)
            c.seek_to_beginning()
            ends = c.end_offsets(tps)
            while any(c.position(tp) < ends[tp] for tp in tps):
                for tp, recs in c.poll(300).items():
                    out[tp.partition].extend(row(r) for r in recs)
        return out
    finally:
        c.close()
