"""Mirroring between two local brokers (``kqlite mirror``, MM2 mode): the mirror's copy
rate next to the source's own produce rate, and the replication latency.

Two ``kqlite serve`` children (C helpers) on loopback. ``produce_100B``: confluent-kafka
produces N records of 100 bytes to the source's 4-partition topic (acks=all,
linger.ms=5), timed to the last acknowledgement: the source's own produce rate. Then a
mirror (``kqlite.mirror.Mirror`` on an event loop in this process) copies that backlog
into the target, timed from its start (internal topics made, positions read) to the last
record acknowledged by the target: ``mirror_100B``, whose ratio to the produce rate is the
target (issue 29: >= 0.5x). ``replication_latency_p99``: with the mirror caught up, records
produced at a fixed rate are read from the target by a consumer, and the nearest-rank p99
of (received - produced timestamp) is reported, in seconds (no target: a loaded 2-core
machine gives its own figures).

The same backlog is then copied again by a second mirror with ``exactly_once`` (source
alias ``eos``: its own topics on the same target), each round one target transaction, and
its latency read by a read_committed consumer: the rows ``kqlite mirror (MM2 mode,
--exactly-once)``, whose "ref x" is how many times the at-least-once mirror is faster.
"""

import asyncio
import os
import threading
import time

from workloads.broker import _Broker

NAME = "mirror"
DESCRIPTION = "kqlite mirror between two local brokers vs the source's produce rate"

PRODUCER_CONF = {"linger.ms": 5, "batch.size": 1 << 20, "acks": "all",
                 "queue.buffering.max.messages": 1 << 20, "compression.type": "none"}
MIRROR = "kqlite mirror (MM2 mode)"
MIRROR_EOS = "kqlite mirror (MM2 mode, --exactly-once)"
SOURCE = "kqlite serve (produce, acks=all)"


def run(ctx):
    ck = ctx.peer("confluent_kafka", "produce_100B", "confluent-kafka")
    if ck is None:
        return
    from confluent_kafka.admin import AdminClient, NewTopic
    count = ctx.pick(2_000, 200_000, 500_000)
    value = os.urandom(100)
    with ctx.workdir("mirror") as d:
        source = _Broker(os.path.join(d, "source"))
        target = _Broker(os.path.join(d, "target"))
        try:
            admin = AdminClient({"bootstrap.servers": source.bootstrap})
            for f in admin.create_topics([NewTopic("bench", 4, 1),
                                          NewTopic("lat", 1, 1)]).values():
                f.result(30)
            p = ck.Producer(dict(PRODUCER_CONF, **{"bootstrap.servers": source.bootstrap}))
            _deliver(p, "bench", value, 10)                     # connections made, untimed
            start = time.perf_counter()
            _deliver(p, "bench", value, count)
            produce = time.perf_counter() - start
            ctx.add_rate("produce_100B", SOURCE, count, produce,
                         note="confluent-kafka, 4 partitions, linger.ms=5")
            copy, p99, samples = _mirror(ck, p, source.bootstrap, target.bootstrap, count + 10,
                                         value, ctx.pick(200, 3_000))
            ctx.add_rate("mirror_100B", MIRROR, count + 10, copy,
                         note="a backlog of 100-byte records, source to target, acks=all")
            ctx.add("replication_latency_p99", MIRROR, p99, "s", n=samples,
                    note="produced on the source to received from the target, "
                         "1,000 records/s, nearest-rank p99")
            # Its backlog: the same records, and those the latency run put on "lat".
            eos_copy, eos_p99, eos_samples = _mirror(
                ck, p, source.bootstrap, target.bootstrap, count + 10 + ctx.pick(200, 3_000),
                value, ctx.pick(200, 3_000), exactly_once=True)
            ctx.add_rate("mirror_100B", MIRROR_EOS, count + 10 + ctx.pick(200, 3_000), eos_copy,
                         note="the same backlog, each round one target transaction")
            ctx.add("replication_latency_p99", MIRROR_EOS, eos_p99, "s", n=eos_samples,
                    note="read_committed consumer on the target, 1,000 records/s")
            ratio = ((count + 10 + ctx.pick(200, 3_000)) / eos_copy) / ((count + 10) / copy)
            ctx.log(f"  exactly-once copies at {ratio:.2f}x the at-least-once rate")
        finally:
            source.stop()
            target.stop()


def _mirror(ck, producer, source, target, backlog, value, latency_records,
            exactly_once=False):
    from kqlite.mirror import Mirror, MirrorSettings
    alias = "eos" if exactly_once else "src"
    mirror = Mirror(MirrorSettings(source=source, target=target, topics="bench|lat",
                                   source_alias=alias, target_alias="dst",
                                   emit_checkpoints=False, fetch_max_wait_ms=50,
                                   exactly_once=exactly_once))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(mirror.run(),),
                              daemon=True)
    began = time.perf_counter()
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while mirror.progress.records < backlog:
            if not thread.is_alive():
                raise RuntimeError("the mirror stopped before copying the backlog")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the mirror copied {mirror.progress.records} of "
                                   f"{backlog} records in 120 s")
            time.sleep(0.005)
        copy = time.perf_counter() - began
        p99, samples = _latency(ck, producer, target, value, latency_records, alias)
    finally:
        loop.call_soon_threadsafe(mirror.stop)
        thread.join(30)
    return copy, p99, samples


def _latency(ck, producer, target, value, n, alias):
    consumer = ck.Consumer({"bootstrap.servers": target, "group.id": "bench-latency",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "isolation.level": "read_committed"})
    # Assigned at the end (the records the backlog's copy brought are no samples), not
    # subscribed, and polled once before the first record is sent: a group join's
    # seconds are no replication latency.
    tp = ck.TopicPartition(f"{alias}.lat", 0)
    _, end = consumer.get_watermark_offsets(tp, timeout=10)
    consumer.assign([ck.TopicPartition(f"{alias}.lat", 0, end)])
    consumer.poll(0.5)
    delays = []
    sender = threading.Thread(target=_paced, args=(producer, value, n), daemon=True)
    sender.start()
    deadline = time.monotonic() + 60 + n / 1000
    while len(delays) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        delays.append(time.time() - msg.timestamp()[1] / 1000)
    sender.join()
    consumer.close()
    if not delays:
        raise RuntimeError(f"no record reached the target's {alias}.lat")
    delays.sort()
    return delays[max(0, -(-len(delays) * 99 // 100) - 1)], len(delays)


def _paced(producer, value, n, rate=1000):
    start = time.monotonic()
    for i in range(n):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        producer.produce("lat", value, timestamp=int(time.time() * 1000))
        producer.poll(0)
    producer.flush(30)


def _deliver(p, topic, value, n):
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(60)
    if left:
        raise RuntimeError(f"{left} message(s) not delivered to {topic}")
