"""The public API as a typed program uses it: ``mypy --strict`` checks this file against
kqlite's annotations (tests/typing/test_types.py), and the test also runs :func:`main`,
whose checks of what each call returned hold only if the annotations tell the truth.

Every name ``kqlite`` exports and the calls users make on them: the embedded Log (append,
the reads, offsets, maintenance), LogConfig, Record, the errors, the Database (topics,
logs), Producer and its futures, Consumer (poll, iteration, batches, commit, seek,
position, lag), transactions, ``kqlite.aio`` (open, the producer's sends, ``async for``
over a consumer with its commit, a transaction, a log's append and reads, what
``write_outcome`` makes of a cancelled send), and ``kqlite.spark.register``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import Future
from typing import TYPE_CHECKING, Iterator, Optional

import kqlite
import kqlite.aio
from kqlite import (
    ConsumerRecord, Database, KqliteError, Log, LogConfig, OffsetOutOfRange, Producer, Record,
    RecordMetadata,
)
from kqlite.db import OffsetAndTimestamp, PartitionInfo, SentRecord, TopicDescription, Transaction
from kqlite.storage import Isolation
from kqlite.storage.isolation import OffsetSnapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T0 = 1_700_000_000_000


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def log_api(directory: str) -> None:
    config = LogConfig({"segment.bytes": 1 << 20}, fsync="never")
    check(config["segment.bytes"] == 1 << 20 and "segment.bytes" in config.overrides(), "config")
    with Log.open(os.path.join(directory, "clicks-0"), {"segment.bytes": 1 << 20},
                  fsync="always") as log:
        first: int = log.append([b"a", b"b", None])
        log.append(Record(b"c", key=b"k", headers=[("h", b"v"), ("n", None)], timestamp=T0))
        log.append(b"d", codec="gzip")
        log.append(bytearray(b"e"), timestamp=T0 + 1)
        log.append(Record(value=v) for v in (b"f", b"g"))
        rec: Record
        for rec in log.read(first):
            offset: Optional[int] = rec.offset
            check(offset is not None and offset >= first, "read offsets")
        values: list[Optional[bytes]] = [r.value for r in log.read(first, max_records=2)]
        check(values == [b"a", b"b"], "read with max_records")
        one: Optional[Record] = log.read_one(first + 3)
        check(one is not None and one.key == b"k" and one.headers == (("h", b"v"), ("n", None))
              and one.timestamp == T0, "read_one")
        it = log.read(first, isolation=Isolation.COMMITTED, max_offset=first + 1)
        check([r.offset for r in it] == [first], "max_offset")
        it.close()
        fetched = log.fetch_records(first, 2)
        check(len(fetched) >= 2 and fetched.next_offset > first, "fetch_records")
        raw: bytes = log.read_batches(first, 1 << 20)
        check(len(raw) > 0, "read_batches")
        with_aborted = log.read_batches(first, aborted_transactions=True,
                                        isolation=Isolation.COMMITTED)
        check(with_aborted.aborted_transactions == [], "read_batches aborted")
        region = log.fetch_region(first, 1 << 20)
        if region is not None:
            fd, position, length = region
            check(length > 0 and position >= 0, "fetch_region")
            os.close(fd)
        check(log.offset_for_time(T0) == first, "offset_for_time")
        found: Optional[tuple[int, int]] = log.find_by_time(T0)
        check(found is not None and found[0] == first, "find_by_time")
        check(log.max_timestamp()[1] > T0, "max_timestamp")
        snapshot: OffsetSnapshot = log.offset_snapshot()
        check(snapshot.read_limit(Isolation.HIGH_WATERMARK) == log.high_watermark, "snapshot")
        end: int = log.end_offset
        check(log.start_offset == first and log.last_stable_offset == end, "offsets")
        check(log.size > 0 and log.segments == [0], "size and segments")
        headers = list(log.batch_headers())
        check(headers[-1].last_offset == end - 1, "batch_headers")
        check(log.aborted_transactions() == [] and log.ongoing_transactions() == []
              and log.active_producers() == [], "transactions")
        log.flush()
        log.roll()
        check(log.delete_records(first + 1) == first + 1, "delete_records")
        deleted: list[int] = log.enforce_retention()
        check(deleted == [], "enforce_retention (no segment wholly below the log start)")
        new_end: int = log.truncate_to(end - 1)
        check(new_end <= end - 1, "truncate_to (whole batches)")
        report = log.compact(force=True)
        check(report.segments_cleaned == 0, "compact (a delete-policy log)")
        try:
            log.read(new_end + 10)
        except OffsetOutOfRange as exc:
            check(exc.start_offset == first + 1 and exc.end_offset == new_end, "out of range")
        else:
            raise AssertionError("no OffsetOutOfRange")


def database_api(directory: str) -> None:
    db: Database
    with kqlite.open(directory, {"retention.ms": 3_600_000}) as db:
        meta = db.create_topic("orders", partitions=2, config={"cleanup.policy": "delete"})
        check(meta["partitions"] == 2, "create_topic")
        db.create_topic("orders", exist_ok=True)
        db.create_partitions("orders", 3)
        db.alter_topic_config("orders", {"retention.ms": 60_000})
        check(db.topic_config("orders")["retention.ms"] == 60_000, "topic_config")
        check(db.list_topics() == ["orders"] and db.partitions_for("orders") == 3, "topics")
        producer: Producer
        with db.producer(linger_ms=0) as producer:
            future = producer.send("orders", b"o1", key=b"c7", headers=[("src", b"web")])
            meta_of: RecordMetadata = future.result(timeout=10)
            check(meta_of.topic == "orders" and meta_of.offset == 0, "send")
            as_future: Future[RecordMetadata] = producer.send("orders", b"o2", partition=0)
            check(as_future.result().partition == 0, "a concurrent.futures.Future")
            producer.flush()
        description: TopicDescription = db.describe_topic("orders")
        parts: list[PartitionInfo] = description.partitions
        check(sum(p.end_offset for p in parts) == 2 and not description.internal, "describe")
        log: Log = db.log("orders", 0)
        with db.leased_log("orders", 1) as leased:
            check(leased.end_offset >= 0, "leased_log")
        with db.consumer("orders", group="billing", consumer_timeout_ms=50,
                         enable_auto_commit=False, isolation_level="read_committed") as consumer:
            got: list[ConsumerRecord] = consumer.poll(timeout_ms=100)
            check(len(got) == 2 and got[0].value in (b"o1", b"o2"), "poll")
            consumer.commit()
            tp = ("orders", got[0].partition)
            check(consumer.committed(tp) == got[0].offset + 1, "commit")
            check(consumer.position(tp) == got[0].offset + 1, "position")
            consumer.seek(tp, 0)
            records: Iterator[ConsumerRecord] = iter(consumer)
            check(next(records).offset == 0, "iteration")
            consumer.seek_to_beginning()
            check(sum(len(b) for b in consumer.batches(max_records=1)) == 2, "batches")
            consumer.seek_to_end(tp)
            check(all(lag == 0 for lag in consumer.lag().values()), "lag")
            times: dict[tuple[str, int], Optional[OffsetAndTimestamp]] = \
                consumer.offsets_for_times({tp: 0})
            first_found = times[tp]
            check(first_found is not None and first_found.offset == 0, "offsets_for_times")
            check(tp in consumer.assignment(), "assignment")
        tx: Transaction
        with db.transaction("payments") as tx:
            sent: SentRecord = tx.send("orders", b"paid", partition=1)
            tx.commit_offsets("billing", {("orders", 0): 1})
        check(sent.done() and sent.result().partition == 1, "transaction")
        aborted = db.transaction()
        aborted.send("orders", b"never", partition=2)
        aborted.abort()
        check(aborted.ended, "abort")
        check(isinstance(db.enforce_retention(), dict) and isinstance(db.compact(), dict),
              "maintenance")
        db.delete_topic("orders")
        try:
            db.describe_topic("orders")
        except KqliteError as exc:
            check(isinstance(exc, kqlite.UnknownTopicError), "unknown topic")


async def aio_api(directory: str) -> None:
    db: kqlite.aio.Database
    async with kqlite.aio.open(directory) as db:
        await db.create_topic("events", config={"fsync": "always"})
        producer: kqlite.aio.Producer
        async with db.producer(linger_ms=0) as producer:
            sent: kqlite.aio.RecordMetadata = await producer.send("events", b"e0", key=b"k")
            check(sent.topic == "events" and sent.offset == 0, "aio send")
            metas = await asyncio.gather(*(producer.send("events", b"e%d" % i)
                                           for i in range(1, 4)))
            check([m.offset for m in metas] == [1, 2, 3], "aio sends keep call order")
            task = asyncio.ensure_future(producer.send("events", b"e4"))
            await asyncio.sleep(0)         # its first step ran: the record is handed over
            task.cancel()
            try:
                await task
            except asyncio.CancelledError as cancelled:
                outcome: Optional[asyncio.Future[object]] = kqlite.aio.write_outcome(cancelled)
                check(outcome is not None and isinstance(await outcome, RecordMetadata),
                      "write_outcome of a send cancelled after its hand-off")
            else:
                raise AssertionError("a cancelled task returned")
            await producer.flush()
        consumer: kqlite.aio.Consumer
        async with db.consumer("events", group="g", consumer_timeout_ms=100,
                               enable_auto_commit=False) as consumer:
            record: ConsumerRecord
            values = [record.value async for record in consumer]
            check(values == [b"e0", b"e1", b"e2", b"e3", b"e4"], "aio consumer")
            await consumer.commit()
            check(await consumer.committed(("events", 0)) == 5, "aio commit")
        tx: kqlite.aio.Transaction
        async with db.transaction("aio-payments") as tx:
            in_tx: SentRecord = await tx.send("events", b"paid")
            await tx.commit_offsets("g", {("events", 0): 5})
        check(in_tx.result().offset == 5, "aio transaction")
        log: kqlite.aio.Log = await db.log("events", 0)
        read: list[Optional[bytes]] = [r.value async for r in log.read(0, max_records=2)]
        check(read == [b"e0", b"e1"], "aio log read")
    own: kqlite.aio.Log
    async with kqlite.aio.Log.open(os.path.join(directory, "own-0"), fsync="always") as own:
        first: int = await own.append([b"a", b"b"])
        one: Optional[Record] = await own.read_one(first + 1)
        check(one is not None and one.value == b"b", "aio log append and read_one")
        check(await own.end_offset() == first + 2, "aio end_offset")


def register_spark(spark: SparkSession) -> None:
    """kqlite.spark's entry point (typed only: main does not start Spark)."""
    from kqlite.spark import KqliteDataSource, register
    source: type[KqliteDataSource] = register(spark)
    check(source.name() == "kqlite", "spark")


def main(directory: str) -> None:
    log_api(os.path.join(directory, "log"))
    database_api(os.path.join(directory, "db"))
    asyncio.run(aio_api(os.path.join(directory, "aio")))


if __name__ == "__main__":
    main(sys.argv[1])
