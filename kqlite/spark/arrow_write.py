"""Spark's Arrow batches to kqlite records without a Python object per row (tasks and
driver; no pyspark here).

Theory of operation: a task normalises the sink's columns with pyarrow compute
(key/value/header values to binary, timestamps to int64 ms with the write time for
nulls), picks each row's partition (the ``partition`` column, else Kafka's murmur2
of the key in C, else one sticky random partition per topic per Arrow batch for
keyless rows, as batch_to_records does) and sorts the rows by (topic, partition),
stably, so each partition's rows keep their order. Each (topic, partition) run of
rows is then encoded by ``_native.arrow_encode`` into v2 record batches of about
1 MiB, compressed as the topic's ``compression.type`` says, and appended whole
with ``Log.append_batches``. Topics with LogAppendTime go through ``Log.append``
(the batch append keeps the producer's timestamps), except for a transactional
producer's batches (transactional.py), whose producer fields only encoded batches
carry: ``Log.append_batches`` stamps those with the append time itself.
"""

import kqlite
from .. import _native
from ..errors import InvalidRecordError
from ..format import compression
from ..format.constants import (
    MAGIC_V2, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
    TRANSACTIONAL_MASK,
)
from ..format.header import BatchHeader
from ..storage import NO_VERIFICATION
from .options import SparkOptionError

__all__ = ["staged_columns", "append_runs", "runs", "encode_run", "column_of"]

_TARGET = 1 << 20


def column_of(batch, name):
    """The column ``name`` of an Arrow batch (Spark may pass it in another case), or None."""
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        for i, field in enumerate(batch.schema):
            if field.name.lower() == name:
                return batch.column(i)
        return None
    return batch.column(idx)


def _binary(pa, arr):
    if arr is None:
        return None
    if pa.types.is_string(arr.type):
        return arr.view(pa.binary())        # same layout: no copy, no compute call
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    return arr


def _timestamps(pa, pc, col, n, now_ms):
    if col is None:
        return pa.repeat(pa.scalar(now_ms, pa.int64()), n)
    if pa.types.is_timestamp(col.type):
        mul, div = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000),
                    "ns": (1, 1000000)}[col.type.unit]
        v = col.cast(pa.int64())
        if mul != 1:
            v = pc.multiply_checked(v, mul)
        if div != 1:
            q = pc.divide(v, div)            # truncates; the row path floors
            q = pc.subtract(q, pc.and_(pc.less(v, 0), pc.not_equal(
                pc.multiply(q, div), v)).cast(pa.int64()))
            v = q
    else:
        v = col.cast(pa.int64())
    return v.fill_null(now_ms)


def _headers(pa, col):
    if col is None:
        return None
    htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    if col.type != htype:
        col = col.cast(htype)
    return col


def cached_partition_count(db, topic, counts_cache, partition_count):
    """The partition count of ``topic``, asked once per write (``counts_cache``); an
    unknown topic is the sink's option error, as Spark's Kafka sink refuses it."""
    count = counts_cache.get(topic)
    if count is None:
        try:
            count = counts_cache[topic] = partition_count(db, topic)
        except kqlite.UnknownTopicError:
            raise SparkOptionError(f"topic {topic!r} does not exist in {db.path}; create "
                                   f"it first") from None
    return count


def staged_columns(batch, topic_option, db, now_ms, rng, counts_cache, compacted_cache,
                   partition_count):
    """One Spark Arrow batch as a RecordBatch of (topic, partition, key, value,
    timestamp, headers) sorted by (topic, partition), with Kafka-sink partitioning and
    the row path's checks and errors."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n = batch.num_rows
    values = _binary(pa, column_of(batch, "value"))
    keys = _binary(pa, column_of(batch, "key"))
    if keys is None:
        keys = pa.nulls(n, pa.binary())
    if topic_option is not None:
        topics = pa.repeat(pa.scalar(topic_option, pa.string()), n)
    else:
        topics = column_of(batch, "topic").cast(pa.string())
        if topics.null_count:
            raise InvalidRecordError("a row has a null topic and the sink has no topic option")
    part_col = column_of(batch, "partition")
    given = part_col.cast(pa.int32()) if part_col is not None else pa.nulls(n, pa.int32())
    stamps = _timestamps(pa, pc, column_of(batch, "timestamp"), n, now_ms)
    headers = _headers(pa, column_of(batch, "headers"))
    if headers is None:
        htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        headers = pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n + 1),
                                           pa.array([], htype.value_type), type=htype)
    else:
        headers = headers.fill_null(pa.scalar([], headers.type))
    names = topics.unique().to_pylist()
    parts = given
    for topic in names:
        count = cached_partition_count(db, topic, counts_cache, partition_count)
        mine = pc.equal(topics, topic) if len(names) > 1 else None
        if part_col is not None:
            chosen = given if mine is None else pc.if_else(mine, given, None)
            bad = pc.or_(pc.less(chosen, 0), pc.greater_equal(chosen, count))
            if pc.any(bad).as_py():
                p = pc.filter(chosen, bad)[0].as_py()
                raise InvalidRecordError(f"partition {p} of topic {topic!r} does not exist "
                                         f"({count} partition(s))")
        sticky = rng.randrange(count)
        if keys.null_count == n:
            auto = pa.repeat(pa.scalar(sticky, pa.int32()), n)
        else:
            hashed = pa.array(_native.arrow_partitions(_buffers(keys), n, count), pa.int32())
            auto = pc.if_else(pc.equal(hashed, -1), sticky, hashed)
        fill = auto if part_col is None else pc.if_else(pc.is_null(given), auto, given)
        parts = fill if mine is None else pc.if_else(mine, fill, parts)
        compacted = compacted_cache.get(topic)
        if compacted is None:
            compacted = compacted_cache[topic] = \
                "compact" in db.topic_config(topic)["cleanup.policy"]
        if compacted:
            nulls = pc.is_null(keys) if mine is None else pc.and_(mine, pc.is_null(keys))
            if pc.any(nulls).as_py():
                raise InvalidRecordError(f"topic {topic!r} is compacted (cleanup.policy="
                                         f"compact): every row needs a non-null key")
    staged = pa.RecordBatch.from_arrays(
        [topics, parts.cast(pa.int32()), keys, values, stamps, headers],
        names=["topic", "partition", "key", "value", "timestamp", "headers"])
    if len(names) == 1 and part_col is None and keys.null_count == n:
        return staged       # one topic, one sticky partition: already in order
    order = pc.sort_indices(staged, sort_keys=[("topic", "ascending"),
                                               ("partition", "ascending")])
    return staged.take(order)


def runs(staged):
    """``(topic, partition, start, stop)`` of the rows of a sorted staged batch."""
    import pyarrow.compute as pc
    if staged.num_rows == 0:
        return []
    topics = staged.column(0)
    parts = staged.column(1)
    out = []
    ends = pc.run_end_encode(pc.binary_join_element_wise(
        topics, parts.cast("string"), "\u0000")).run_ends.to_pylist()
    start = 0
    for stop in ends:
        out.append((topics[start].as_py(), parts[start].as_py(), start, stop))
        start = stop
    return out


def _plain(pa, arr):
    """``arr`` with Arrow offset 0 (a slice's buffers start before its first row)."""
    return pa.concat_arrays([arr]) if arr.offset else arr


def _buffers(arr):
    import pyarrow as pa
    arr = _plain(pa, arr)
    if arr.null_count == len(arr) and len(arr):
        return None
    bufs = arr.buffers()
    return (bufs[0] if arr.null_count else None, bufs[1], bufs[2])


def encode_run(staged, start, stop, codec="none", max_bytes=_TARGET, producer=None):
    """Rows [start, stop) of a staged batch (one topic-partition) as whole v2 batches:
    a list of bytes objects of about ``max_bytes`` each. ``producer``: ``(producer id,
    epoch, sequence of row ``start``)`` of a transactional producer, whose fields and
    running sequence the batches then carry, with the transactional attribute."""
    import pyarrow as pa
    import pyarrow.compute as pc
    part = staged.slice(start, stop - start)
    key = _buffers(part.column(2))
    value = _buffers(part.column(3))
    if value is None:       # all tombstones: an all-null column may have no buffers
        value = (bytes((part.num_rows + 7) // 8), bytes(4 * (part.num_rows + 1)), None)
    stamps = _plain(pa, part.column(4)).buffers()[1]
    hcol = _plain(pa, part.column(5))
    headers = None
    if hcol.offsets[-1].as_py() if len(hcol) else False:
        entries = hcol.values.flatten()
        hk = _plain(pa, entries[0])
        hv = _plain(pa, entries[1])
        hv_bufs = hv.buffers()
        headers = (hcol.buffers()[1], hk.buffers()[1], hk.buffers()[2],
                   hv_bufs[0] if hv.null_count else None, hv_bufs[1], hv_bufs[2])
    n = part.num_rows
    data_bytes = part.column(2).nbytes + part.column(3).nbytes + hcol.nbytes
    per = max(1, int(n * max_bytes / max(data_bytes + 16 * n, 1)))
    ts = part.column(4)
    out = []
    for lo in range(0, n, per):
        hi = min(n, lo + per)
        window = ts.slice(lo, hi - lo)
        base_ts = window[0].as_py()
        max_ts = pc.max(window).as_py()
        body = _native.arrow_encode(lo, hi, key, value, stamps, base_ts, headers)
        fields = None if producer is None else \
            (producer[0], producer[1], producer[2] + lo)
        out.append(_batch(body, hi - lo, base_ts, max_ts, codec, fields))
    return out


def _batch(body, count, base_ts, max_ts, codec, producer=None):
    codec_id = compression.codec_id(codec)
    if codec_id:
        body = compression.compress(codec_id, body)
    attributes, pid, epoch, sequence = codec_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
    if producer is not None:
        attributes |= TRANSACTIONAL_MASK
        pid, epoch, sequence = producer
    head = BatchHeader(0, 0, NO_PARTITION_LEADER_EPOCH, MAGIC_V2, 0, attributes, count - 1,
                       base_ts, max_ts, pid, epoch, sequence, count).encode_for(body)
    return bytes(head) + bytes(body)


def append_runs(db, staged, config_cache, producer=None):
    """Append every (topic, partition) run of a sorted staged batch; returns
    {(topic, partition): records appended}. With ``producer`` (a
    transactional.TaskTransaction) the runs are that producer's transactional batches,
    each partition enlisted with it before its first append."""
    counts = {}
    for topic, p, start, stop in runs(staged):
        cfg = config_cache.get(topic)
        if cfg is None:
            cfg = config_cache[topic] = db.topic_config(topic)
        with db.leased_log(topic, p) as lg:
            if producer is not None:
                limit = min(_TARGET, int(cfg["max.message.bytes"]) - 1024)
                fields = producer.enlist((topic, p), stop - start)
                # As a client's Produce: judged by the producer state's epoch and
                # sequence rules, so an attempt the driver fenced is refused.
                lg.append_as_leader(b"".join(encode_run(staged, start, stop, _codec(cfg),
                                                        max(limit // 2, 1024), fields)),
                                    leader_epoch=None, verification_guard=NO_VERIFICATION)
            elif cfg["message.timestamp.type"] == "LogAppendTime":
                lg.append(_records(staged, start, stop))
            else:
                limit = min(_TARGET, int(cfg["max.message.bytes"]) - 1024)
                lg.append_batches(b"".join(encode_run(staged, start, stop, _codec(cfg),
                                                      max(limit // 2, 1024))))
        counts[(topic, p)] = counts.get((topic, p), 0) + stop - start
    return counts


def _codec(cfg):
    codec = cfg["compression.type"]
    return "none" if codec in ("producer", "uncompressed") else codec


def _records(staged, start, stop):
    cols = staged.slice(start, stop - start).to_pydict()
    return [kqlite.Record(value=v, key=k, timestamp=t,
                          headers=[(h["key"], h["value"]) for h in hs or ()])
            for k, v, t, hs in zip(cols["key"], cols["value"], cols["timestamp"],
                                   cols["headers"])]
