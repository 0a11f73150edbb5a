"""The streaming query of the exactly-once Spark test: topic ``in`` (2 partitions, 20 rows
each) copied into topic ``out`` with writeMode=transactional, through a UDF that makes
the first attempt of input partition 0's task fail part-way through its rows (its row
``in-0-19`` gets partition 99, which ``out`` lacks, so the sink raises after preparing
the rows before it) and, while the file ``hold`` exists, makes input partition 1's task
wait (the test kills the driver then).

Run as a script (``python txn_stream.py DATA CHECKPOINT GATES``) it starts the query in
a Spark session of its own, for the test to kill."""

import os
import sys
import time

ROWS = 20
FAIL_ROW = b"in-0-19"
HOLD_ROW = b"in-1-19"
ARROW_ROWS = 5          # rows per Arrow batch the sink gets: the failing one is its 4th


def make_input(path):
    import kqlite
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("in", 2)
        db.create_topic("out", 2)
        for p in range(2):
            db.log("in", p).append([kqlite.Record(key=b"in-%d-%d" % (p, i),
                                                  value=b"in-%d-%d" % (p, i))
                                    for i in range(ROWS)])


def start_query(spark, path, ck, gates, bootstrap=None):
    """The query, writing into the data dir ``path``, or with ``bootstrap`` through that
    broker (which serves ``path``)."""
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import IntegerType
    hold = os.path.join(gates, "hold")

    def partition_of(value):
        from pyspark import TaskContext
        value = bytes(value)
        if value == FAIL_ROW and TaskContext.get().attemptNumber() == 0:
            return 99
        while value == HOLD_ROW and os.path.exists(hold):
            time.sleep(0.2)
        return None

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_ROWS))
    target = udf(partition_of, IntegerType())
    writer = (spark.readStream.format("kqlite").option("subscribe", "in")
              .option("startingOffsets", "earliest").load(path)
              .select("key", "value", target(col("value")).alias("partition"))
              .writeStream.format("kqlite").option("topic", "out")
              .option("writeMode", "transactional").option("checkpointLocation", ck)
              .trigger(availableNow=True))
    if bootstrap is not None:
        return writer.option("kafka.bootstrap.servers", bootstrap).start()
    return writer.start(path)


if __name__ == "__main__":
    from pyspark.sql import SparkSession
    data, checkpoint, gate_dir = sys.argv[1:4]
    session = (SparkSession.builder.master("local[2,2]").appName("kqlite-txn-killed")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    start_query(session, data, checkpoint, gate_dir).awaitTermination()
