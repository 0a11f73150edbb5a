"""Clickstream demo in one command: page views -> Spark -> per-minute counts in kqlite.

    python examples/clickstream/run.py --data-dir /tmp/clicks

1. writes page-view events into the kqlite topic ``clicks`` (embedded producer);
2. runs the Spark Structured Streaming job (pipeline.py) with Trigger.AvailableNow:
   it counts views per page per minute and writes the counts into the compacted
   topic ``page-views-per-minute``;
3. writes a second round of events (some of them late) and runs the job again
   from its checkpoint, as a restarted production job would;
4. compacts the output topic, reads it back with the embedded API and checks the
   counts against the clicks counted straight from the input topic.

Needs ``pip install 'kqlite[spark]'`` and Java 17 on the PATH. Run it again on the
same data dir: it adds another two rounds and the counts still match.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kqlite  # noqa: E402
from kqlite.db import META_DIR  # noqa: E402
from generate import ensure_topic, generate  # noqa: E402
from pipeline import (  # noqa: E402
    OUTPUT, compact_output, current_counts, ensure_output_topic, expected_counts,
    newest_event, start_query, wait,
)


def spark_session():
    """A small local SparkSession (2 cores, no UI) whose Python workers use this
    interpreter, so they can import kqlite."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("kqlite-clickstream")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from kqlite.spark import register
    register(spark)    # format("kqlite") also works without this when kqlite is pip-installed
    return spark


def run(spark, data_dir, *, events=2000, rounds=2, checkpoint=None, max_per_trigger=None,
        output_mode="update", start_ms=None, seed=7, out=print):
    """The whole demo on an existing SparkSession; returns (expected, got) count tables."""
    checkpoint = checkpoint or os.path.join(data_dir, META_DIR, "spark", "checkpoints",
                                            f"clickstream-{output_mode}")
    with kqlite.open(data_dir, retention_check_interval_ms=0) as db:
        ensure_topic(db)
        ensure_output_topic(db)
        t = start_ms if start_ms is not None else \
            (int(time.time() * 1000) // 60_000 - 30) * 60_000
        # A second run on the same data dir continues after the newest event so far, so
        # its events are not behind the watermark the checkpoint carries.
        t = max(t, newest_event(db) + 1)
        for r in range(rounds):
            newest = generate(db, events, t, seed=None if seed is None else seed + r)
            ends = []
            for p in range(db.partitions_for("clicks")):
                with db.leased_log("clicks", p) as lg:
                    ends.append(lg.end_offset)
            out(f"round {r + 1}: appended {events} page views (clicks now ends at offsets "
                f"{ends})")
            t0 = time.monotonic()
            query = start_query(spark, data_dir, checkpoint, output_mode=output_mode,
                                max_per_trigger=max_per_trigger)
            wait(query)
            batches = len([p for p in query.recentProgress if p["numInputRows"]])
            out(f"round {r + 1}: streaming job caught up in {time.monotonic() - t0:.1f} s "
                f"({batches} micro-batch(es) with input)")
            t = newest + 1
        before, after = compact_output(db)
        out(f"compacted {OUTPUT}: {before} records -> {after} (latest count per page|minute)")
        expected = expected_counts(db)
        got = current_counts(db)
    return expected, got


def main(argv=None):
    ap = argparse.ArgumentParser(description="kqlite + Spark clickstream demo")
    ap.add_argument("--data-dir", required=True, help="kqlite data dir (created if missing)")
    ap.add_argument("--events", type=int, default=2000, help="page views per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--output-mode", choices=("update", "complete"), default="update",
                    help="update: foreachBatch + batch writes (default); complete: the "
                         "kqlite streaming sink")
    ap.add_argument("--checkpoint", default=None,
                    help="Spark checkpoint dir (default: under DATA_DIR/.kqlite/spark)")
    ap.add_argument("--max-per-trigger", type=int, default=None,
                    help="maxOffsetsPerTrigger (honoured on Spark 4.2+)")
    args = ap.parse_args(argv)
    spark = spark_session()
    try:
        expected, got = run(spark, args.data_dir, events=args.events, rounds=args.rounds,
                            checkpoint=args.checkpoint, max_per_trigger=args.max_per_trigger,
                            output_mode=args.output_mode)
    finally:
        spark.stop()
    top = sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    print(f"\n{'page|minute (UTC)':<40} views")
    for key, views in top:
        print(f"{key:<40} {views:>5}")
    if got == dict(expected):
        print(f"\nOK: {len(got)} page-minute counts, {sum(got.values())} views, all equal to "
              f"the clicks counted straight from the input topic")
        return 0
    wrong = {k: (expected.get(k), got.get(k)) for k in set(expected) | set(got)
             if expected.get(k) != got.get(k)}
    print(f"\nMISMATCH in {len(wrong)} of {len(expected)} windows, e.g. "
          f"{dict(list(wrong.items())[:5])} (expected, got)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
