"""The ``kqlite`` PySpark data source: batch and streaming reads and writes.

::

    spark.read.format("kqlite").option("subscribe", "clicks").load("/data")
    spark.readStream.format("kqlite").option("subscribe", "clicks").load("/data")
    df.write.format("kqlite").option("topic", "out").mode("append").save("/data")
    df.writeStream.format("kqlite").option("topic", "out").option("checkpointLocation", c)
        .start("/data")

Rows have Spark's Kafka-source schema and the options are the Kafka source's
(see docs/spark.md). Works on Spark 4.1 and later; read limits
(``maxOffsetsPerTrigger``) and a bounded ``Trigger.AvailableNow`` need Spark 4.2+,
where ``latestOffset`` receives the start offset and the read limit.
"""

import logging
from typing import TYPE_CHECKING, Optional

from pyspark.sql.datasource import (
    DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter,
    DataSourceStreamReader, InputPartition, WriterCommitMessage,
)

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow,
    )
    _STREAM_MIXINS = (SupportsTriggerAvailableNow,)
except ImportError:  # Spark 4.0 / 4.1
    ReadAllAvailable = ReadMaxRows = None
    _STREAM_MIXINS = ()


from .options import (
    SinkOptions, SourceOptions, SparkOptionError, from_offset_json, offset_json, rate_limit,
    split_ranges,
)
from .schema import ddl, requested_columns

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["KqliteDataSource", "KqliteBatchReader", "KqliteStreamReader", "KqliteWriter",
           "KqliteStreamWriter", "OffsetRange", "WriteResult", "ADMISSION_CONTROL"]

log = logging.getLogger("kqlite.spark")

ADMISSION_CONTROL = ReadAllAvailable is not None   # Spark 4.2+


class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic-partition: one Spark task."""

    def __init__(self, topic, partition, start, end, timestamp_type=0):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.timestamp_type = timestamp_type

    def __repr__(self):
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"

    def __eq__(self, other):
        return isinstance(other, OffsetRange) and \
            (self.topic, self.partition, self.start, self.end) == \
            (other.topic, other.partition, other.start, other.end)

    __hash__ = None


class KqliteDataSource(DataSource):
    """``format("kqlite")``: topics of a kqlite data dir (the load/save path)."""

    @classmethod
    def name(cls) -> str:
        return "kqlite"

    def _include_headers(self) -> bool:
        from .options import _bool
        return _bool(self.options, "includeHeaders", False)

    def schema(self) -> str:
        """Spark's Kafka-source schema (DDL), with ``headers`` when includeHeaders."""
        return ddl(self._include_headers())

    def reader(self, schema: "Optional[StructType]") -> "KqliteBatchReader":
        return KqliteBatchReader(self.options, _columns(schema, self._include_headers()))

    def streamReader(self, schema: "Optional[StructType]") -> "KqliteStreamReader":
        return KqliteStreamReader(self.options, _columns(schema, self._include_headers()))

    def writer(self, schema: "StructType", overwrite: bool) -> "KqliteWriter":
        if overwrite:
            raise SparkOptionError("kqlite topics are append-only: use .mode('append')")
        return KqliteWriter(self.options, schema)

    def streamWriter(self, schema: "StructType", overwrite: bool) -> "KqliteStreamWriter":
        # overwrite is set for outputMode("complete"); like Kafka's sink, every emitted row
        # is appended (a compacted topic then keeps the latest value per key).
        return KqliteStreamWriter(self.options, schema)


def _columns(schema, include_headers):
    """The columns the reader hands Spark: None (all of them) for the source's own
    schema, else those a user-given .schema(...) names (schema.requested_columns).
    Spark's Kafka source refuses any schema but its own; a subset here is how a query
    reads only the columns it uses, since Spark 4.3 prunes none for a Python source."""
    if schema is None:
        return None
    strict = [f.name for f in schema.fields if not f.nullable]
    if strict:
        # Spark compares each batch's Arrow schema with this one, nullability included,
        # and key, value and headers do hold nulls.
        raise SparkOptionError(f"every column of the kqlite source is nullable; the schema "
                               f"declares {', '.join(strict)} NOT NULL")
    try:
        return requested_columns([(f.name, f.dataType.simpleString()) for f in schema.fields],
                                 include_headers)
    except ValueError as e:
        raise SparkOptionError(f"{e} (the kqlite source has a fixed schema, Spark's "
                               f"Kafka-source schema, or a subset of its columns)") from None


# -- Reading ------------------------------------------------------------------------------------

class _ReaderBase:
    """Shared by the batch and streaming readers. The open Database is kept only on the
    driver and is never pickled to the executors."""

    _db = None
    columns = None      # the columns a user-given schema asks for (None: all of them)

    def _database(self):
        from .reading import open_source
        if self._db is None:
            self._db = open_source(self.opts.path, self.opts.bootstrap, self.opts.isolation)
        return self._db

    def _close_db(self):
        if self._db is not None:
            self._db.close()
            self._db = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_db", None)
        return state

    def _ranges(self, db, ranges):
        from .reading import timestamp_type
        types = {}
        out = []
        for topic, p, start, end in split_ranges(ranges, self.opts.min_partitions):
            if topic not in types:
                types[topic] = timestamp_type(db, topic)
            out.append(OffsetRange(topic, p, start, end, types[topic]))
        return out

    def read(self, partition):
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there are none
            return iter(())
        from .reading import read_range
        return read_range(self.opts.path, partition.topic, partition.partition,
                          partition.start, partition.end, partition.timestamp_type,
                          self.opts.include_headers, self.opts.fail_on_data_loss,
                          self.opts.records_per_batch, bootstrap=self.opts.bootstrap,
                          isolation=self.opts.isolation, columns=self.columns)


class KqliteBatchReader(_ReaderBase, DataSourceReader):
    """One OffsetRange per topic-partition between startingOffsets and endingOffsets."""

    def __init__(self, options, columns=None):
        self.opts = SourceOptions(options, streaming=False)
        self.columns = columns

    def partitions(self):
        from .reading import (
            check_lost, earliest_offsets, latest_offsets, resolve_positions,
            selected_partitions,
        )
        db = self._database()
        try:
            tps = selected_partitions(db, self.opts)
            iso = self.opts.read_isolation
            start = resolve_positions(db, self.opts.starting, tps, "starting",
                                      self.opts.timestamp_strategy, iso)
            end = resolve_positions(db, self.opts.ending, tps, "ending", isolation=iso)
            first = earliest_offsets(db, tps)
            last = latest_offsets(db, tps, iso)
            ranges = []
            for tp in tps:
                s, e = start[tp], end[tp]
                if e > last[tp]:
                    raise SparkOptionError(
                        f"ending offset {e} of {tp[0]}-{tp[1]} is past the end of the log "
                        f"({last[tp]})")
                if s > e:
                    raise SparkOptionError(
                        f"starting offset {s} of {tp[0]}-{tp[1]} is after its ending offset "
                        f"{e}")
                if s < first[tp]:
                    check_lost(f"offsets [{s}, {min(first[tp], e)}) of {tp[0]}-{tp[1]} are "
                               f"gone: the log starts at {first[tp]}",
                               self.opts.fail_on_data_loss)
                    s = min(first[tp], e)
                ranges.append((tp[0], tp[1], s, e))
            return self._ranges(db, ranges)
        finally:
            self._close_db()


class KqliteStreamReader(_ReaderBase, DataSourceStreamReader, *_STREAM_MIXINS):
    """Micro-batches over per-partition offsets, checkpointed by Spark in Kafka's JSON
    shape ``{"topic": {"0": next_offset}}``."""

    def __init__(self, options, columns=None):
        self.opts = SourceOptions(options, streaming=True)
        self.columns = columns
        self._target = None          # Trigger.AvailableNow: the end fixed at the start
        if self.opts.min_offsets_per_trigger is not None:
            raise SparkOptionError("minOffsetsPerTrigger is not supported by the kqlite "
                                   "source")
        if self.opts.max_offsets_per_trigger is not None and not ADMISSION_CONTROL:
            log.warning("maxOffsetsPerTrigger needs Spark 4.2 or later (Spark %s gives a "
                        "streaming source no read limit); every micro-batch reads all "
                        "available records", _spark_version())

    # Driver side (one long-lived process per query).

    def initialOffset(self):
        from .reading import resolve_positions, selected_partitions
        db = self._database()
        tps = selected_partitions(db, self.opts)
        return offset_json(resolve_positions(db, self.opts.starting, tps, "starting",
                                             self.opts.timestamp_strategy,
                                             self.opts.read_isolation))

    def _latest(self):
        from .reading import latest_offsets, selected_partitions
        db = self._database()
        return latest_offsets(db, selected_partitions(db, self.opts), self.opts.read_isolation)

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self):
        self._target = self._latest()

    def reportLatestOffset(self):
        return offset_json(self._latest())

    def latestOffset(self, start=None, limit=None):
        """Spark 4.1 calls ``latestOffset()``; 4.2+ ``latestOffset(start, limit)``."""
        end = dict(self._target) if self._target is not None else self._latest()
        if start is not None:
            # Never move a partition backwards (a stale AvailableNow target after a restart).
            begin = from_offset_json(start)
            for tp, off in begin.items():
                if tp in end and end[tp] < off and self._target is not None:
                    end[tp] = off
        if start is None or limit is None or not ADMISSION_CONTROL or \
                not isinstance(limit, ReadMaxRows):
            return offset_json(end)
        begin = from_offset_json(start)
        new = [tp for tp in end if tp not in begin]
        earliest = {}
        if new:
            from .reading import earliest_offsets
            earliest = earliest_offsets(self._database(), new)
        return offset_json(rate_limit(limit.max_rows, begin, end, earliest))

    def partitions(self, start, end):
        from .reading import check_lost, earliest_offsets
        begin, stop = from_offset_json(start), from_offset_json(end)
        db = self._database()
        for tp in sorted(set(begin) - set(stop)):
            if self.opts.matches(tp[0]):
                check_lost(f"topic partition {tp[0]}-{tp[1]} is gone (it was at offset "
                           f"{begin[tp]})", self.opts.fail_on_data_loss)
        new = [tp for tp in stop if tp not in begin]
        earliest = earliest_offsets(db, new) if new else {}
        ranges = []
        for tp, e in sorted(stop.items()):
            s = begin.get(tp, earliest.get(tp, 0))
            if e < s:
                check_lost(f"offset of {tp[0]}-{tp[1]} went back from {s} to {e} (the log "
                           f"was truncated or the topic re-created)", self.opts.fail_on_data_loss)
                continue
            ranges.append((tp[0], tp[1], s, e))
        return self._ranges(db, ranges)

    def commit(self, end):
        pass   # Spark's checkpoint is the record of progress; nothing to release

    def stop(self):
        self._close_db()


def _spark_version():
    try:
        import pyspark
        return pyspark.__version__
    except Exception:
        return "?"


# -- Writing ------------------------------------------------------------------------------------

class WriteResult(WriterCommitMessage):
    """What a write task did: its staging file (staged mode), records per partition, in a
    streaming query the query id (which names the sink's bookkeeping) and in
    transactional mode its prepared transaction (a transactional.Prepared)."""

    def __init__(self, file, counts, query_id=None, prepared=None):
        self.file = file
        self.counts = counts
        self.query_id = query_id
        self.prepared = prepared

    def __repr__(self):
        return f"WriteResult({self.file!r}, {sum(self.counts.values())} records)"


class _WriterBase:
    def __init__(self, options, schema):
        from .writing import check_sink_schema, check_topic_exists
        self.opts = SinkOptions(options)
        if schema is not None:
            check_sink_schema([(f.name, f.dataType.simpleString()) for f in schema.fields],
                              self.opts.topic)
        if self.opts.topic is not None:
            check_topic_exists(self.opts.path, self.opts.topic, self.opts.bootstrap)

    def write(self, iterator):
        query_id = _task_query_id()
        if self.opts.write_mode == "transactional":
            return self._prepare(iterator, query_id)
        from .writing import stage_rows
        name, counts = stage_rows(self.opts.path, iterator, self.opts.topic,
                                  self.opts.write_mode)
        return WriteResult(name, counts, query_id)

    def _prepare(self, iterator, query_id):
        """Transactional mode, phase one: the rows as this attempt's open transaction."""
        from .transactional import prepare_rows, transactional_id
        from .writing import sink_dir
        sink = self._sink_name(query_id)
        if sink is None:
            raise SparkOptionError(_NO_SINK_NAME)
        batch_id = self._task_batch_id()
        task, attempt = _task_attempt()
        txn_id = transactional_id(sink, batch_id, task, attempt)
        if self.opts.bootstrap:
            from .broker_sink import prepare_through_broker
            counts, prepared = prepare_through_broker(self.opts.bootstrap, iterator,
                                                      self.opts.topic, txn_id, batch_id)
        else:
            counts, prepared = prepare_rows(self.opts.path, iterator, self.opts.topic,
                                            sink_dir(self.opts.path, sink), txn_id, batch_id)
        return WriteResult(None, counts, query_id, prepared)

    @staticmethod
    def _prepared(messages):
        return [m.prepared for m in messages
                if isinstance(m, WriteResult) and m.prepared is not None]

    @staticmethod
    def _files(messages):
        return [m.file for m in messages if isinstance(m, WriteResult) and m.file]

    @staticmethod
    def _partitions(messages):
        tps = set()
        for m in messages:
            if isinstance(m, WriteResult):
                tps.update(m.counts)
        return tps


_NO_SINK_NAME = ("writeMode=transactional needs a sink name: the query id (a streaming "
                 "query), the option sinkId or a checkpointLocation")


def _task_query_id():
    """The streaming query id (stable across restarts), from the task's local properties."""
    return _task_property("sql.streaming.queryId")


def _task_property(name):
    try:
        from pyspark import TaskContext
        tc = TaskContext.get()
        return tc.getLocalProperty(name) if tc is not None else None
    except Exception:
        return None


def _task_attempt():
    """(partition id, attempt number) of the running task; (0, 0) outside Spark."""
    from pyspark import TaskContext
    tc = TaskContext.get()
    return (tc.partitionId(), tc.attemptNumber()) if tc is not None else (0, 0)


class KqliteWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("kqlite")``: staged rows are appended when the job commits; an
    aborted job appends nothing (writeMode=direct: tasks append, at-least-once;
    writeMode=transactional: tasks prepare transactions the job's commit commits). With
    the options ``sinkId`` and ``batchId`` (foreachBatch) a batch id is published once."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        if self.opts.bootstrap:
            raise SparkOptionError("a batch write (df.write) needs a kqlite data dir path; "
                                   "through a broker (kafka.bootstrap.servers) only "
                                   "streaming queries write, with writeMode=transactional")
        import uuid
        self._job = uuid.uuid4().hex     # names a one-off transactional sink

    def _sink_name(self, query_id=None):
        return self.opts.sink_id or f"job:{self._job}"

    def _task_batch_id(self):
        return self.opts.batch_id if self.opts.batch_id is not None else 0

    def _decide(self, messages, commit):
        from .transactional import abort_batch, commit_batch, remove_sink
        from .writing import SinkState, sink_dir
        sink = self._sink_name()
        where = sink_dir(self.opts.path, sink)
        protected = self.opts.sink_id is not None and self.opts.batch_id is not None
        if commit:
            state = SinkState(self.opts.path, sink) if protected else None
            commit_batch(self.opts.path, where, state, self._task_batch_id(),
                         self._prepared(messages))
        else:
            abort_batch(self.opts.path, where, self._task_batch_id(),
                        self._prepared(messages))
        if not protected:
            remove_sink(where)

    def commit(self, messages):
        if self.opts.write_mode == "transactional":
            self._decide(messages, True)
        elif self.opts.write_mode == "staged":
            from .writing import publish
            publish(self.opts.path, self._files(messages), self.opts.batch_id,
                    self.opts.sink_id if self.opts.batch_id is not None else None,
                    partitions=self._partitions(messages))

    def abort(self, messages):
        if self.opts.write_mode == "transactional":
            self._decide(messages, False)
            return
        from .writing import discard
        discard(self.opts.path, self._files(messages))


class KqliteStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``writeStream.format("kqlite")``: each micro-batch is published once per batch id
    (staged mode; see kqlite.spark.writing), so a replayed batch appends nothing twice."""

    def _sink_id(self, messages):
        for m in messages:
            if isinstance(m, WriteResult) and m.query_id:
                return self._sink_name(m.query_id)
        return self._sink_name(None)

    def _sink_name(self, query_id):
        """The sink's bookkeeping name, the same in the tasks and on the driver: the
        sinkId option, else the query id, else the checkpoint location."""
        if self.opts.sink_id:
            return self.opts.sink_id
        if query_id:
            return f"query:{query_id}"
        if self.opts.checkpoint:
            return f"checkpoint:{self.opts.checkpoint}"
        return None

    @staticmethod
    def _task_batch_id():
        batch = _task_property("streaming.sql.batchId")
        return int(batch) if batch is not None else None

    def commit(self, messages, batchId):
        if self.opts.write_mode == "transactional":
            from .transactional import commit_batch, transactional_prefix
            from .writing import SinkState, sink_dir
            sink = self._transactional_sink(messages)
            if self.opts.bootstrap:
                from .broker_sink import checkpoint_sink_dir, commit_through_broker
                where = checkpoint_sink_dir(self.opts.checkpoint)
                commit_through_broker(self.opts.bootstrap, where, transactional_prefix(sink),
                                      SinkState(None, sink, directory=where), batchId,
                                      self._prepared(messages))
                return
            commit_batch(self.opts.path, sink_dir(self.opts.path, sink),
                         SinkState(self.opts.path, sink), batchId, self._prepared(messages))
            return
        if self.opts.write_mode != "staged":
            return
        from .writing import publish
        sink = self._sink_id(messages)
        if sink is None:
            log.warning("kqlite sink: no query id or sinkId; micro-batch %s is published "
                        "without replay protection", batchId)
        publish(self.opts.path, self._files(messages), batchId if sink else None, sink,
                partitions=self._partitions(messages))

    def abort(self, messages, batchId):
        if self.opts.write_mode == "transactional":
            from .transactional import abort_batch
            from .writing import sink_dir
            sink = self._sink_id(messages)
            if sink is None:    # the next commit of the query aborts what was prepared
                log.warning("kqlite sink: micro-batch %s failed and no task named the "
                            "query; its transactions are aborted by the next commit", batchId)
                return
            if self.opts.bootstrap:
                from .broker_sink import abort_through_broker, checkpoint_sink_dir
                from .transactional import transactional_prefix
                abort_through_broker(self.opts.bootstrap,
                                     checkpoint_sink_dir(self.opts.checkpoint),
                                     transactional_prefix(sink), batchId)
                return
            abort_batch(self.opts.path, sink_dir(self.opts.path, sink), batchId,
                        self._prepared(messages))
            return
        from .writing import discard
        discard(self.opts.path, self._files(messages))

    def _transactional_sink(self, messages):
        sink = self._sink_id(messages)
        if sink is None:
            raise SparkOptionError(_NO_SINK_NAME)
        return sink
