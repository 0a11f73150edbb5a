"""The performance targets of issue #4 and the reference figures it quotes.

A target is a ratio of two figures from the same run (``numerator`` /
``denominator``, each ``(workload, case, system)``), or for an absolute target a
figure divided by ``scale``. It passes when the ratio is at least ``required``.
"""

# Figures measured on the dev machine on 2026-11-22, quoted by the issue; printed
# next to this run's figures for context (never used for PASS/MISS).
ISSUE_REFERENCES = {
    ("append", "batched_100B", "sqlite3 (WAL, one txn per batch)"): (0.63e6, "rec/s"),
    ("append", "batched_100B", "lmdb (txn.put, one txn per batch)"): (1.9e6, "rec/s"),
    ("append", "single_100B", "raw framed file (buffered)"): (1.8e6, "rec/s"),
    ("append", "single_100B", "persist-queue Queue (file)"): (3.4e3, "rec/s"),
    ("machine", "page_cache_write", "machine"): (2.7e9, "B/s"),
    ("machine", "fdatasync", "machine"): (3.8e3, "ops/s"),
    ("native", "crc32c_1MiB", "kqlite C"): (10e9, "B/s"),
    ("native", "crc32c_1MiB", "crcmod"): (0.4e9, "B/s"),
}

KQ = "kqlite"

TARGETS = [
    {"id": "append_100B_vs_lmdb",
     "description": "batched append 100 B >= 2x LMDB (batched txn)",
     "numerator": ("append", "batched_100B", KQ),
     "denominator": ("append", "batched_100B", "lmdb (txn.put, one txn per batch)"),
     "required": 2.0},
    {"id": "append_100B_vs_sqlite",
     "description": "batched append 100 B >= 5x sqlite3 (batched txn)",
     "numerator": ("append", "batched_100B", KQ),
     "denominator": ("append", "batched_100B", "sqlite3 (WAL, one txn per batch)"),
     "required": 5.0},
    {"id": "append_100B_absolute",
     "description": "batched append 100 B >= 4 M rec/s (absolute)",
     "numerator": ("append", "batched_100B", KQ),
     "denominator": None, "scale": 4e6,
     "required": 1.0},
    {"id": "append_1KiB_vs_page_cache",
     "description": "batched append 1 KiB >= 50% of page-cache write",
     "numerator": ("append", "batched_1KiB", KQ + " (payload bytes)"),
     "denominator": ("machine", "page_cache_write", "machine"),
     "required": 0.5},
    {"id": "seq_read_vs_sqlite",
     "description": "sequential read into records >= 2x sqlite3 select",
     "numerator": ("read", "sequential_100B", KQ),
     "denominator": ("read", "sequential_100B", "sqlite3 (select id, value)"),
     "required": 2.0},
    {"id": "batch_read_vs_page_cache",
     "description": "zero-copy read_batches >= 50% of page-cache read",
     "numerator": ("read", "batches_zero_copy", KQ + " read_batches"),
     "denominator": ("machine", "page_cache_read", "machine"),
     "required": 0.5},
    {"id": "group_commit_vs_fdatasync",
     "description": "durable group commit (8 threads) >= 5x fdatasync rate",
     "numerator": ("durable", "group_commit_8_threads", KQ),
     "denominator": ("machine", "fdatasync", "machine"),
     "required": 5.0},
    {"id": "crc32c_vs_crcmod",
     "description": "CRC-32C C helper >= 20x crcmod",
     "numerator": ("native", "crc32c_1MiB", "kqlite C"),
     "denominator": ("native", "crc32c_1MiB", "crcmod"),
     "required": 20.0},
    {"id": "spark_read_vs_parquet",
     "description": "Spark read through the kqlite source >= 50% of Spark's Parquet read",
     "numerator": ("spark", "read_sum_lengths", "kqlite source"),
     "denominator": ("spark", "read_sum_lengths", "Spark Parquet"),
     "required": 0.5},
    {"id": "spark_write_vs_parquet",
     "description": "Spark append through the kqlite sink >= 50% of Spark's Parquet write",
     "numerator": ("spark", "write_append", "kqlite sink"),
     "denominator": ("spark", "write_append", "Spark Parquet"),
     "required": 0.5},
    {"id": "spark_stream_vs_batch",
     "description": "a readStream micro-batch over N new records within 2x the batch read",
     "numerator": ("spark", "stream_micro_batch", "kqlite source (readStream)"),
     "denominator": ("spark", "stream_micro_batch", "kqlite source (batch read)"),
     "required": 0.5},
    {"id": "cluster_throughput_vs_single",
     "description": "3-broker RF3 acks=all produce >= 50% of one broker acks=1",
     "numerator": ("cluster", "produce_100B", "kqlite cluster (3 brokers, RF3, acks=all)"),
     "denominator": ("cluster", "produce_100B", "kqlite serve (1 broker, acks=1)"),
     "required": 0.5},
    # Absolute targets want a figure that is better when higher, and a latency is not:
    # "p99 < 20 ms" is the equivalent "at least 99 % of the 20,000 msgs/s offered are
    # delivered within 20 ms" (nearest-rank p99), which the workload measures as a rate.
    {"id": "cluster_p99_at_20k",
     "description": "3-broker RF3 acks=all p99 produce latency < 20 ms at 20k msgs/s",
     "numerator": ("cluster", "within_20ms_at_20k",
                   "kqlite cluster (3 brokers, RF3, acks=all)"),
     "denominator": None, "scale": 0.99 * 20_000,
     "required": 1.0},
]
