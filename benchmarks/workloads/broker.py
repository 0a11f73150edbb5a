"""The broker on loopback: confluent-kafka (librdkafka) producing and consuming 100-byte
messages through ``kqlite serve``, next to the same client against librdkafka's own
in-memory mock cluster (``test.mock.num.brokers``), and the loopback limit for what a
fetch can reach: ``sendfile(2)`` of a page-cached file to a reader in another process."""

import multiprocessing
import os
import re
import socket
import subprocess
import sys
import threading
import time

from common import best_time, drain_socket, stop_process
from producing import produce_flat_out

NAME = "broker"
DESCRIPTION = "kqlite serve vs librdkafka mock cluster (confluent-kafka), loopback sendfile"

PRODUCER_CONF = {"linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1 << 20,
                 "compression.type": "none", "acks": 1}


def run(ctx):
    count = ctx.pick(20_000, 300_000, 2_000_000)
    _sendfile_limit(ctx)
    ck = ctx.peer("confluent_kafka", "produce_100B", "confluent-kafka")
    if ck is None:
        return
    value = os.urandom(100)
    with ctx.workdir("serve") as d:
        broker = _Broker(os.path.join(d, "data"))
        try:
            bootstrap = broker.bootstrap
            _produce(ctx, ck, {"bootstrap.servers": bootstrap}, "kqlite serve", count, value)
            _consume(ctx, ck, {"bootstrap.servers": bootstrap}, "kqlite serve", count)
        finally:
            broker.stop()
    found = {}
    mock = ck.Producer(dict(PRODUCER_CONF, **{
        "bootstrap.servers": "unused", "test.mock.num.brokers": 1,
        "logger": _MockAddress(found)}))
    mock.poll(0.5)
    address = found.get("bootstrap")
    if address is None:
        ctx.skip("produce_100B", "librdkafka mock cluster", "mock cluster address not logged")
        return
    try:
        _produce(ctx, ck, {"bootstrap.servers": address}, "librdkafka mock cluster", count, value)
        _consume(ctx, ck, {"bootstrap.servers": address}, "librdkafka mock cluster", count)
    finally:
        mock.flush(5)


class _MockAddress:
    """A logging.Logger stand-in: librdkafka logs the mock cluster's bootstrap address."""

    def __init__(self, found):
        self.found = found

    def log(self, level, fmt, *args):
        m = re.search(r"replaced with (\S+)", fmt % args if args else fmt)
        if m:
            self.found["bootstrap"] = m.group(1).rstrip(",")


def _produce(ctx, ck, conf, system, count, value):
    topic = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    seconds = produce_flat_out(ck.Producer(dict(PRODUCER_CONF, **conf)), topic, value, count,
                               system=system)
    ctx.add_rate("produce_100B", system, count, seconds,
                 note="acks=1, linger.ms=5, no compression")
    _produce.topic = topic


def _consume(ctx, ck, conf, system, count):
    topic = _produce.topic
    c = ck.Consumer(dict(conf, **{"group.id": f"bench-{time.monotonic_ns()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.max.bytes": 50 << 20,
                                  "max.partition.fetch.bytes": 8 << 20}))
    c.subscribe([topic])
    got = 0
    started = None
    deadline = time.monotonic() + ctx.pick(5, 60, 120)  # the mock cluster can be slow
    while got < count + 1 and time.monotonic() < deadline:
        for msg in c.consume(10_000, 1.0):
            if msg.error() is None:
                if started is None:
                    started = time.perf_counter()  # group join and first fetch excluded
                got += 1
    seconds = time.perf_counter() - (started or time.perf_counter())
    c.close()
    if got <= 1:
        raise RuntimeError(f"{system}: consumed nothing")
    note = "from offset 0" + ("" if got == count + 1 else f", time-boxed: {got} of {count + 1}")
    ctx.add_rate("consume_100B", system, got - 1, seconds, note=note)


# -- Loopback sendfile limit ------------------------------------------------------------------

def _sendfile_limit(ctx):
    total = ctx.pick(64 << 20, 512 << 20, 2 << 30)
    size = min(total, 256 << 20)
    with ctx.workdir("sendfile") as d:
        path = os.path.join(d, "segment")
        with open(path, "wb") as f:
            f.write(os.urandom(1 << 20) * (size >> 20))
        fd = os.open(path, os.O_RDONLY)
        try:
            def once(_):
                srv = socket.create_server(("127.0.0.1", 0))
                ready = multiprocessing.Event()
                child = multiprocessing.Process(
                    target=drain_socket, args=(srv.getsockname()[1], total, ready))
                child.start()
                conn, _ = srv.accept()
                ready.wait()
                sent = 0
                while sent < total:
                    pos = sent % size
                    sent += os.sendfile(conn.fileno(), fd, pos, min(size - pos, total - sent))
                conn.close()
                srv.close()
                child.join()
            t = best_time(ctx.repeats, once, limit=ctx.limit)
        finally:
            os.close(fd)
    ctx.add("loopback_sendfile", "sendfile(2) to another process", total / t, "B/s",
            n=total, seconds=t, note="page-cached file, reader recv_into 1 MiB", ref=True)


class _Broker:
    def __init__(self, data_dir):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kqlite.cli", "--log-level", "warning", "serve",
             "--data-dir", data_dir, "--listen", "127.0.0.1:0"],
            stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.bootstrap = f"127.0.0.1:{m.group(1)}"
                # Keep reading so a chatty broker never blocks on a full pipe.
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return
        self.proc.kill()
        raise RuntimeError("kqlite serve did not start:\n" + "".join(lines))

    def stop(self):
        stop_process(self.proc)
