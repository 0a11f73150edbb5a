"""Transactions through the broker: confluent-kafka (librdkafka) producing 100-byte
messages to ``kqlite serve`` in transactions of 100 records, each committed (InitProducerId
once, then per transaction AddPartitionsToTxn, the produce, EndTxn and its markers), next
to the same client producing the same records as a plain idempotent producer (acks=all, as
transactions require), in the same run on the same broker. A transactional producer commits one transaction at
a time, so its rate is bounded by the commit's round trips (AddPartitionsToTxn, the
produce, EndTxn); ``produce_txn_1000`` (transactions of 1,000 records, no target) shows
how that cost spreads over larger transactions.

Embedded (``embedded_txn_100``): ``db.transaction()`` of 100 records of 100 bytes over two
topics plus a consumer group's offset commit, committed durably (one parallel fsync round
over the three partitions and the id's ``__transaction_state`` partition:
kqlite/db/transaction.py), next to sqlite3 doing the same writes in one transaction per
commit (two tables, an upsert of the group's offsets; WAL, ``synchronous=FULL``: one WAL
fsync per commit). Each side uses its batch call: ``tx.send_many`` per topic, as sqlite3
``executemany`` per table. ``embedded_txn_100_per_record`` is the same transactions with
one ``tx.send`` per record (no target: what a record-at-a-time caller pays). The figure
is committed transactions per second (ops/s)."""

import itertools
import os
import sqlite3

import kqlite

from common import best_time
from workloads.broker import _Broker

NAME = "transactions"
DESCRIPTION = "kqlite serve: 100-record transactions vs idempotent produce (confluent-kafka)"

TXN_SIZE = 100
LARGE_TXN_SIZE = 1000
PRODUCER_CONF = {"linger.ms": 5, "batch.size": 1 << 20,
                 "queue.buffering.max.messages": 1 << 20, "compression.type": "none",
                 "enable.idempotence": True, "acks": "all"}


EMBEDDED_KQ = "kqlite db.transaction()"
EMBEDDED_KQ_PER_RECORD = "kqlite db.transaction(), tx.send per record"
EMBEDDED_SQLITE = "sqlite3 (WAL, synchronous=FULL, one txn)"


def run(ctx):
    run_embedded(ctx)
    run_broker(ctx)


def run_embedded(ctx):
    count = ctx.pick(30, 400, 2_000)
    value = os.urandom(100)
    with ctx.workdir("embedded") as d:
        db = kqlite.open(os.path.join(d, "data"), retention_check_interval_ms=0)
        try:
            db.create_topic("left", 1)
            db.create_topic("right", 1)
            _embedded_transactions(db, value, 1)      # the offsets topic, the id (untimed)
            seconds = best_time(ctx.repeats,
                                lambda _state: _embedded_transactions(db, value, count),
                                limit=ctx.limit)
            per_record = best_time(
                ctx.repeats, lambda _state: _embedded_per_record(db, value, count),
                limit=ctx.limit)
        finally:
            db.close()
        ctx.add_rate("embedded_txn_100", EMBEDDED_KQ, count, seconds, unit="ops/s",
                     note=f"{TXN_SIZE} records over 2 topics (tx.send_many) + an offset "
                          f"commit, durable")
        ctx.add_rate("embedded_txn_100_per_record", EMBEDDED_KQ_PER_RECORD, count,
                     per_record, unit="ops/s",
                     note=f"{TXN_SIZE} tx.send calls over 2 topics + an offset commit, "
                          f"durable")
    with ctx.workdir("sqlite") as d:
        conn = _sqlite(os.path.join(d, "bench.db"))
        try:
            _sqlite_transactions(conn, value, 1)
            seconds = best_time(ctx.repeats,
                                lambda _state: _sqlite_transactions(conn, value, count),
                                limit=ctx.limit)
        finally:
            conn.close()
        ctx.add_rate("embedded_txn_100", EMBEDDED_SQLITE, count, seconds, unit="ops/s",
                     note=f"{TXN_SIZE} rows over 2 tables + an offsets upsert")


def _embedded_transactions(db, value, count):
    values = [value] * (TXN_SIZE // 2)
    for i in range(count):
        with db.transaction("bench") as tx:
            tx.send_many("left", values, partition=0)
            tx.send_many("right", values, partition=0)
            tx.commit_offsets("bench-group", {("left", 0): i + 1, ("right", 0): i + 1})


def _embedded_per_record(db, value, count):
    for i in range(count):
        with db.transaction("bench") as tx:
            for j in range(TXN_SIZE // 2):
                tx.send("left", value=value, partition=0)
                tx.send("right", value=value, partition=0)
            tx.commit_offsets("bench-group", {("left", 0): i + 1, ("right", 0): i + 1})


def _sqlite(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for table in ("left_topic", "right_topic"):
        conn.execute(f"CREATE TABLE {table} (offset INTEGER PRIMARY KEY, value BLOB)")
    conn.execute("CREATE TABLE offsets (grp TEXT, topic TEXT, part INTEGER, off INTEGER, "
                 "PRIMARY KEY (grp, topic, part))")
    return conn


def _sqlite_transactions(conn, value, count):
    rows = [(value,)] * (TXN_SIZE // 2)
    for i in range(count):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO left_topic (value) VALUES (?)", rows)
        conn.executemany("INSERT INTO right_topic (value) VALUES (?)", rows)
        conn.executemany("INSERT INTO offsets VALUES (?, ?, 0, ?) ON CONFLICT (grp, topic, "
                         "part) DO UPDATE SET off = excluded.off",
                         [("bench-group", "left", i + 1), ("bench-group", "right", i + 1)])
        conn.execute("COMMIT")


def run_broker(ctx):
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
            seconds = best_time(
                ctx.repeats,
                lambda state: _transactions(*state, value, count, size=LARGE_TXN_SIZE),
                setup=lambda: _transactional(ck, conf, value, f"bench-txn-{next(topics)}"),
                limit=ctx.limit)
            ctx.add_rate("produce_txn_1000", "kqlite serve (transactions)", count, seconds,
                         note=f"{LARGE_TXN_SIZE} records per committed transaction (no "
                              f"target: how the commit's cost spreads)")
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


def _transactions(p, topic, value, count, size=TXN_SIZE):
    for _ in range(max(1, count // size)):
        p.begin_transaction()
        _deliver(p, topic, value, min(size, count), flush=False)
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
