"""The Spark Structured Streaming job: page views per page per minute.

    clicks (kqlite topic, JSON page views, record timestamp = event time)
      -> readStream.format("kqlite")
      -> event-time window of 1 minute per page, watermark 10 minutes
      -> writeStream.format("kqlite") into page-views-per-minute, a compacted topic
         keyed "page|window start", value {"page", "window_start", "window_end", "views"}

In update mode (the default) every micro-batch appends the new count of each window
it changed, through foreachBatch and a batch write with sinkId/batchId; in complete
mode the kqlite streaming sink appends every window's count each micro-batch. The
output topic is compacted (cleanup.policy=compact), so
kqlite keeps only the latest count per key: read from the start, it is the table
of counts. The kqlite sink publishes each micro-batch once per batch id, and the
query's checkpoint holds the source offsets and the aggregation state, so a
restarted query neither loses nor double-counts a click.
"""

import json
import time
from collections import Counter
from datetime import datetime, timezone

from generate import TOPIC as CLICKS

OUTPUT = "page-views-per-minute"
OUTPUT_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 16 * 1024,             # small segments, so there is something to compact
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 3_600_000,
}
EVENT_SCHEMA = "user STRING, page STRING, ts LONG, referrer STRING"


def ensure_output_topic(db):
    db.create_topic(OUTPUT, 1, OUTPUT_CONFIG, exist_ok=True)


def start_query(spark, data_dir, checkpoint, *, output_mode="update", available_now=True,
                max_per_trigger=None, watermark="10 minutes"):
    """Start the streaming query; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    # Window starts are rendered in UTC in the output keys.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    reader = (spark.readStream.format("kqlite")
              .option("subscribe", CLICKS)
              .option("startingOffsets", "earliest"))
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    clicks = reader.load(data_dir)

    views = (clicks
             .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
                     F.col("timestamp").alias("event_time"))
             .withWatermark("event_time", watermark)
             .groupBy(F.window("event_time", "1 minute").alias("w"), F.col("e.page").alias("page"))
             .count())

    out = views.select(
        F.concat_ws("|", "page", F.date_format("w.start", "yyyy-MM-dd'T'HH:mmX")).alias("key"),
        F.to_json(F.struct(
            "page",
            F.date_format("w.start", "yyyy-MM-dd'T'HH:mmX").alias("window_start"),
            F.date_format("w.end", "yyyy-MM-dd'T'HH:mmX").alias("window_end"),
            F.col("count").alias("views"))).alias("value"))

    if output_mode == "complete":
        # The kqlite streaming sink: every micro-batch re-emits every window's count.
        writer = (out.writeStream.format("kqlite")
                  .option("path", data_dir)
                  .option("topic", OUTPUT)
                  .option("checkpointLocation", checkpoint)
                  .outputMode("complete"))
    else:
        # Update mode emits only the windows a micro-batch changed, and the watermark lets
        # Spark drop old windows from its state. Spark's Python data source sinks do not
        # take update mode, so each micro-batch is written as a batch write; the options
        # sinkId + batchId make that write exactly-once across query restarts.
        def write_batch(batch, batch_id):
            (batch.write.format("kqlite")
             .option("topic", OUTPUT)
             .option("sinkId", f"clickstream:{checkpoint}")
             .option("batchId", str(batch_id))
             .mode("append")
             .save(data_dir))
        writer = (out.writeStream.foreachBatch(write_batch)
                  .option("checkpointLocation", checkpoint)
                  .outputMode("update"))
    writer = writer.trigger(availableNow=True) if available_now else \
        writer.trigger(processingTime="2 seconds")
    return writer.start()


def window_key(page, ts_ms):
    start = datetime.fromtimestamp((ts_ms - ts_ms % 60_000) / 1000, tz=timezone.utc)
    return f"{page}|{start.strftime('%Y-%m-%dT%H:%M')}Z"


def expected_counts(db):
    """The truth, counted straight from the clicks topic with the embedded API."""
    counts = Counter()
    for p in range(db.partitions_for(CLICKS)):
        with db.leased_log(CLICKS, p) as lg:
            for rec in lg.read():
                counts[window_key(json.loads(rec.value)["page"], rec.timestamp)] += 1
    return counts


def newest_event(db):
    """The largest event time in the clicks topic (0 when it is empty)."""
    newest = 0
    for p in range(db.partitions_for(CLICKS)):
        with db.leased_log(CLICKS, p) as lg:
            for rec in lg.read():
                newest = max(newest, rec.timestamp)
    return newest


def current_counts(db):
    """The output topic read as a table: the latest value of every key."""
    table = {}
    with db.leased_log(OUTPUT, 0) as lg:
        for rec in lg.read():
            table[rec.key.decode()] = json.loads(rec.value)["views"]
    return table


def compact_output(db):
    """Roll and compact the output topic; returns (records before, records after)."""
    with db.leased_log(OUTPUT, 0) as lg:
        before = sum(1 for _ in lg.read())
        if lg.end_offset > lg.segments[-1]:
            lg.roll()
        lg.compact(force=True)
        return before, sum(1 for _ in lg.read())


def wait(query, timeout=300):
    deadline = time.monotonic() + timeout
    while query.isActive and time.monotonic() < deadline:
        query.awaitTermination(1)
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    if query.isActive:
        query.stop()
        raise TimeoutError(f"streaming query still running after {timeout} s")
