"""Transactions through the broker: confluent-kafka (librdkafka) producing 100-byte
messages to ``kqlite serve`` in transactions of 100 records, each committed (InitProducerId
once, then per transaction AddPartitionsToTxn, the produce, EndTxn and its markers), next
to the same client producing the same records as a plain idempotent producer (acks=all, as
transactions require), in the same run on the same broker."""

import itertools
import os

from common import best_time
from workloads.broker import _Broker

NAME = "transactions"
DESCRIPTION = "kqlite serve: 100-record transactions vs idempotent produce (confluent-kafka)"

TXN_SIZE = 100
PRODUCER_CONF = {"linger.ms": 5, "batch.size": 1 << 20,
                 "queue.buffering.max.messages": 1 << 20, "compression.type": "none",
                 "enable.idempotence": True, "acks": "all"}


def run(ctx):
    count = ctx.pick(2_000, 50_000, 200_000)
    ck = ctx.peer("confluent_kafka", "produce_txn_100", "confluent-kafka")
    if ck is None:
        return
    value = os.urandom(100)
    with ctx.workdir("serve") as d:
        broker = _Broker(os.path.join(d, "data"))
        try:
            conf = dict(PRODUCER_CONF, **{"bootstrap.servers": broker.bootstrap})
            topics = itertools.count()
            seconds = best_time(
                ctx.repeats, lambda state: _deliver(*state, value, count),
                setup=lambda: _idempotent(ck, conf, value, f"bench-idem-{next(topics)}"),
                limit=ctx.limit)
            ctx.add_rate("produce_txn_100", "kqlite serve (idempotent)", count, seconds,
                         note="acks=all, enable.idempotence, linger.ms=5")
            seconds = best_time(
                ctx.repeats, lambda state: _transactions(*state, value, count),
                setup=lambda: _transactional(ck, conf, value, f"bench-txn-{next(topics)}"),
                limit=ctx.limit)
            ctx.add_rate("produce_txn_100", "kqlite serve (transactions)", count, seconds,
                         note=f"{TXN_SIZE} records per committed transaction")
        finally:
            broker.stop()


def _idempotent(ck, conf, value, topic):
    """A producer whose topic exists and whose connections are made (untimed)."""
    p = ck.Producer(conf)
    _deliver(p, topic, value, 1)
    return p, topic


def _transactional(ck, conf, value, topic):
    """A transactional producer, initialized, after one transaction (untimed)."""
    p = ck.Producer(dict(conf, **{"transactional.id": topic}))
    p.init_transactions(30)
    _transactions(p, topic, value, 1)
    return p, topic


def _transactions(p, topic, value, count):
    for _ in range(max(1, count // TXN_SIZE)):
        p.begin_transaction()
        _deliver(p, topic, value, min(TXN_SIZE, count), flush=False)
        p.commit_transaction(30)        # flushes, then EndTxn


def _deliver(p, topic, value, n, flush=True):
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, callback=report)
                break
            except BufferError:
                p.poll(0.01)
    if flush:
        left = p.flush(60)
        if left:
            raise RuntimeError(f"{left} message(s) not delivered to {topic}")
    else:
        p.poll(0)
    if errors:
        raise RuntimeError(f"delivery failed: {errors[0]}")
