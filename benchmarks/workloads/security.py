"""TLS and SASL against plaintext on the same broker, in the same run: confluent-kafka
(librdkafka) producing and consuming 100-byte messages through one ``kqlite serve --config``
broker's PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256) listeners. Over TLS the broker cannot
use sendfile: fetched batches are read in a storage thread and copied through the TLS layer
in 256 KiB chunks, which is what the consume figures measure. Certificates are made at run
time with ``cryptography`` (tests/server/certificates.py); without it the workload is
skipped."""

import os
import re
import subprocess
import sys
import threading
import time

from common import stop_process
from producing import produce_flat_out

from .broker import PRODUCER_CONF

NAME = "security"
DESCRIPTION = "kqlite serve over PLAINTEXT, SSL and SASL_SSL (confluent-kafka), same broker"

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAINTEXT, SSL, SASL_SSL = ("kqlite serve (PLAINTEXT)", "kqlite serve (SSL)",
                            "kqlite serve (SASL_SSL, SCRAM-SHA-256)")


def run(ctx):
    count = ctx.pick(20_000, 300_000, 2_000_000)
    ck = ctx.peer("confluent_kafka", "produce_100B", "confluent-kafka")
    if ck is None:
        return
    try:
        sys.path.insert(0, os.path.join(_ROOT, "tests", "server"))
        from certificates import Authority
    except ImportError:
        for case in ("produce_100B", "consume_100B"):
            ctx.skip(case, SSL, "the cryptography package is not installed")
        return
    finally:
        sys.path.pop(0)
    value = os.urandom(100)
    with ctx.workdir("security") as d:
        certs = Authority(os.path.join(d, "certs"))
        server = certs.issue("broker", {"CN": "localhost"}, server=True)
        broker = _SecuredBroker(d, server["pem"])
        try:
            common = {"ssl.ca.location": str(certs.ca_file)}
            confs = {
                PLAINTEXT: {"bootstrap.servers": broker.bootstrap("PLAINTEXT")},
                SSL: {"bootstrap.servers": broker.bootstrap("SSL"), "security.protocol": "SSL",
                      **common},
                SASL_SSL: {"bootstrap.servers": broker.bootstrap("SASL_SSL"),
                           "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                           "sasl.username": "bench", "sasl.password": "bench-secret",
                           **common},
            }
            # Rounds alternate the listeners, and each keeps its best round: on a shared
            # machine a burst of other work then hurts no listener more than another.
            best = {}
            for _ in range(ctx.pick(1, 3, 3)):
                for system, conf in confs.items():
                    topic = f"bench-{os.getpid()}-{time.monotonic_ns()}"
                    produced = produce_flat_out(ck.Producer(dict(PRODUCER_CONF, **conf)), topic,
                                                value, count, system=system)
                    consumed = _consume_seconds(ck, conf, topic, count, ctx.pick(30, 60, 120))
                    times = best.setdefault(system, [produced, consumed])
                    times[0], times[1] = min(times[0], produced), min(times[1], consumed)
            for system, (produced, consumed) in best.items():
                ctx.add_rate("produce_100B", system, count, produced,
                             note="acks=1, linger.ms=5, no compression; best round")
                ctx.add_rate("consume_100B", system, count, consumed,
                             note="from offset 0; best round")
        finally:
            broker.stop()


def _consume_seconds(ck, conf, topic, count, limit):
    """Seconds to read ``count`` records of ``topic`` from its first, the group's join and
    first fetch excluded."""
    c = ck.Consumer(dict(conf, **{"group.id": f"bench-{time.monotonic_ns()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.max.bytes": 50 << 20,
                                  "max.partition.fetch.bytes": 8 << 20}))
    c.subscribe([topic])
    got, started = 0, None
    deadline = time.monotonic() + limit
    while got < count and time.monotonic() < deadline:
        for msg in c.consume(10_000, 1.0):
            if msg.error() is None:
                if started is None:
                    started = time.perf_counter()
                got += 1
    seconds = time.perf_counter() - (started or time.perf_counter())
    c.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count} records over {conf['bootstrap.servers']}")
    return seconds


class _SecuredBroker:
    def __init__(self, workdir, keystore):
        data = os.path.join(workdir, "data")
        os.makedirs(data)
        cli = [sys.executable, "-m", "kqlite.cli"]
        subprocess.run(cli + ["users", data, "add", "bench", "--password", "bench-secret",
                              "--mechanism", "SCRAM-SHA-256"], check=True, capture_output=True)
        config = os.path.join(workdir, "server.properties")
        with open(config, "w") as f:
            f.write(f"log.dirs={data}\n"
                    "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0\n"
                    f"ssl.keystore.location={keystore}\n"
                    "sasl.enabled.mechanisms=SCRAM-SHA-256\n")
        self.proc = subprocess.Popen(cli + ["--log-level", "warning", "serve", "--config", config],
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("kqlite broker listeners:"):
                self.ports = dict(re.findall(r"(\w+)://127\.0\.0\.1:(\d+)", line))
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return
        self.proc.kill()
        raise RuntimeError("kqlite serve did not start:\n" + "".join(lines))

    def bootstrap(self, listener):
        return f"127.0.0.1:{self.ports[listener]}"

    def stop(self):
        stop_process(self.proc)


