"""Reading a partition's offset range as Arrow record batches without a Python object
per record (executor side; no pyspark here).

Theory of operation: raw whole batches come from ``Log.read_batches``; each v2
batch (decompressed when it is compressed) is appended by ``_native.arrow_decode``
straight into growing bytearrays laid out as Arrow buffers, which ``finish`` wraps
with ``pyarrow.Array.from_buffers`` (no copy). The walk over the batches mirrors
``Log.read``: the CRC of every batch is checked, the batches' offsets must rise,
records below the cursor are skipped and the first record at or past the end
stops the read. Anything else -- a legacy (magic 0/1) entry, a batch the decoder
refuses, a damaged chunk -- is read through ``Log.read`` for that batch, whose
rows are appended to the same buffers (or whose error is raised), so the rows are
always exactly the ones the per-record path gives.

No batch gives rows that ``Log.read`` would not return: a control batch
(transaction marker) never does, and under ``Isolation.COMMITTED`` neither does a
batch of an aborted transaction. Which batch is skipped is storage's rule
(``storage.reads.AbortedFilter``, Kafka's read_committed consumer), fed with the
aborted transactions the ``.txnindex`` files list for the range and shown every
batch in offset order; a skipped batch's offsets are passed over like any other's.
"""

import struct

from .. import _native
from ..format import compression
from ..format.constants import BATCH_OVERHEAD, CODEC_NONE, MAGIC_V2, TIMESTAMP_CREATE_TIME
from ..format.header import parse_header
from ..storage import Isolation
from ..storage.reads import AbortedFilter
from .schema import arrow_schema, headers_type

__all__ = ["ColumnBuilder", "read_arrow"]

_FETCH_BYTES = 4 << 20
_MAX_DATA = 1 << 30         # a RecordBatch's binary columns stay well inside int32 offsets
_ROW_BUFFERS = ((0, 8), (1, 8), (2, 0), (3, 4), (5, 0), (6, 4), (8, 4))
_SIZE = _COUNT = struct.Struct(">i")


class ColumnBuilder:
    """Arrow buffers of the rows read so far, handed out as one RecordBatch by finish()."""

    def __init__(self, include_headers, rows_hint=1024, bytes_hint=1 << 16):
        self.include_headers = include_headers
        self._rows_hint, self._bytes_hint = rows_hint, bytes_hint
        self._reset()

    def _reset(self):
        rows, data = self._rows_hint, self._bytes_hint
        cols = [bytearray() for _ in range(_native.ARROW_COLUMNS)]
        for k, width in _ROW_BUFFERS:
            cols[k] = bytearray(rows * width + 8 if width else rows // 8 + 1)
        cols[4] = bytearray(data)
        cols[7] = bytearray(data)
        if self.include_headers:
            cols[9], cols[12] = bytearray(4 * rows + 8), bytearray(4 * rows + 8)
            cols[10], cols[13] = bytearray(data // 4), bytearray(data // 4)
            cols[11] = bytearray(rows // 8 + 1)
        self.cols = cols
        self.fill = [0] * _native.ARROW_FILL

    @property
    def rows(self):
        return self.fill[0]

    @property
    def full(self):
        f = self.fill
        return f[1] + f[2] + f[4] + f[5] >= _MAX_DATA

    def grow(self, rows, data):
        """Room for ``rows`` more rows and ``data`` more bytes in every byte buffer."""
        f, cols = self.fill, self.cols
        want_rows = f[0] + rows + 1
        for k, width in _ROW_BUFFERS:
            _at_least(cols, k, want_rows * width + 8 if width else want_rows // 8 + 1)
        _at_least(cols, 4, f[1] + data)
        _at_least(cols, 7, f[2] + data)
        if self.include_headers:
            want_headers = f[3] + data // 2 + 2
            _at_least(cols, 9, 4 * want_headers + 4)
            _at_least(cols, 12, 4 * want_headers + 4)
            _at_least(cols, 11, want_headers // 8 + 1)
            _at_least(cols, 10, f[4] + data)
            _at_least(cols, 13, f[5] + data)

    def add_batch(self, body, count, base_offset, base_timestamp, fixed_timestamp, lo, hi):
        """Decode one batch's records into the buffers: ``(status, stopped)`` as
        _native.arrow_decode, after growing the buffers as often as it needs."""
        while True:
            status, stopped = _native.arrow_decode(
                body, count, base_offset, base_timestamp, fixed_timestamp, lo, hi,
                self.include_headers, self.cols, self.fill)
            if status != _native.ARROW_NO_SPACE:
                return status, stopped
            self.grow(count, len(body))

    def add_run(self, data, at, lo, hi, prev, txn_aside, max_rows):
        """Decode the whole batches of ``data[at:]`` in one pass (_native.arrow_decode_run):
        ``(why, at, lo, prev)`` as it returns them, after growing the buffers as often as
        it needs."""
        while True:
            status, why, at, lo, prev = _native.arrow_decode_run(
                data, at, lo, hi, prev, txn_aside, max_rows, _MAX_DATA, self.include_headers,
                self.cols, self.fill)
            if status != _native.ARROW_NO_SPACE:
                return why, at, lo, prev
            size, count = _SIZE.unpack_from(data, at + 8)[0] + 12, _COUNT.unpack_from(
                data, at + 57)[0]
            self.grow(max(count, 1024), max(size, 1 << 16))

    def add_rows(self, rows, lo, hi):
        """Append decoded rows (Records); ``(status, stopped)`` as add_batch."""
        rows = list(rows)
        while True:
            status, stopped = _native.arrow_append_rows(rows, self.include_headers,
                                                        self.cols, self.fill, lo, hi)
            if status != _native.ARROW_NO_SPACE:
                return status, stopped
            self.grow(len(rows), sum(len(r[2] or b"") + len(r[3] or b"") +
                                     sum(len(k) * 4 + len(v or b"") for k, v in r[4])
                                     for r in rows))

    def finish(self, topic, partition, ts_type):
        """The rows so far as a pyarrow RecordBatch in the Kafka-source schema; the
        builder starts over with fresh buffers (the old ones now belong to Arrow)."""
        import pyarrow as pa
        n = self.fill[0]
        f, cols = self.fill, self.cols
        buf = [pa.py_buffer(c) for c in cols]

        def binary(kind, valid, count, size, nulls):
            return pa.Array.from_buffers(kind, count, [buf[valid] if nulls else None,
                                                       _slice(buf[valid + 1], 4 * (count + 1)),
                                                       _slice(buf[valid + 2], size)], nulls)

        arrays = [
            binary(pa.binary(), 2, n, f[1], f[6]),
            binary(pa.binary(), 5, n, f[2], f[7]),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, _slice(buf[0], 8 * n)]),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n,
                                  [None, _slice(buf[1], 8 * n)]),
            pa.repeat(pa.scalar(ts_type, pa.int32()), n),
        ]
        if self.include_headers:
            h = f[3]
            entries = pa.StructArray.from_arrays(
                [pa.Array.from_buffers(pa.string(), h, [None, _slice(buf[9], 4 * (h + 1)),
                                                        _slice(buf[10], f[4])]),
                 binary(pa.binary(), 11, h, f[5], f[8])],
                fields=list(headers_type().value_type))
            arrays.append(pa.Array.from_buffers(headers_type(), n,
                                                [None, _slice(buf[8], 4 * (n + 1))],
                                                children=[entries]))
        batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.include_headers))
        self._rows_hint = max(self._rows_hint, n)
        self._bytes_hint = max(self._bytes_hint, f[1] + f[2])
        self._reset()
        return batch


def _slice(buffer, size):
    return buffer.slice(0, size)


def _at_least(cols, k, size):
    if len(cols[k]) < size:
        cols[k].extend(bytes(max(size, 2 * len(cols[k])) - len(cols[k])))


def read_arrow(lg, start, end, include_headers, topic, partition, ts_type, batch_rows,
               isolation=Isolation.HIGH_WATERMARK):
    """Yield RecordBatches of the records of ``lg`` with offsets in [start, end) that a
    read under ``isolation`` returns, about ``batch_rows`` rows each (whole Kafka
    batches: a RecordBatch may hold more)."""
    builder = ColumnBuilder(include_headers, rows_hint=min(batch_rows, 1 << 16))
    aborted = lg.aborted_transactions(start, end) if isolation.skips_aborted else ()
    reader = _Reader(lg, isolation, AbortedFilter(aborted))
    for stopped in _fill(reader, start, end, builder, batch_rows):
        if builder.rows:
            yield builder.finish(topic, partition, ts_type)
        if stopped:
            return


class _Reader:
    """The log a range is read from, the isolation it is read under and the filter of
    the batches that give no rows (markers; COMMITTED: aborted transactions)."""

    __slots__ = ("lg", "isolation", "skip")

    def __init__(self, lg, isolation, skip):
        self.lg, self.isolation, self.skip = lg, isolation, skip

    def read(self, lo, stop):
        return self.lg.read(lo, max_offset=stop, isolation=self.isolation)


def _fill(reader, pos, end, builder, batch_rows):
    """Decode into ``builder``, yielding (stopped) whenever it holds enough rows.

    The runs of plain batches go through builder.add_run in one native pass each;
    the batch it sets aside takes _one_batch, and the run goes on after it."""
    prev = None
    txn_aside = bool(reader.skip.pending)
    while pos < end:
        data = reader.lg.read_batches(pos, _FETCH_BYTES, isolation=reader.isolation)
        if not data:
            yield _per_record(reader, builder, pos, end)
            return
        at = 0
        while True:
            why, at, pos, prev = builder.add_run(data, at, pos, end, prev, txn_aside,
                                                 batch_rows)
            if why == _native.RUN_END:
                break
            if why == _native.RUN_STOPPED:
                yield True
                return
            if why == _native.RUN_ASIDE:
                at, pos, prev, stopped = _one_batch(reader, builder, data, at, pos, end, prev)
                if stopped:
                    yield True
                    return
                if not (builder.rows >= batch_rows or builder.full):
                    continue
            yield False
    yield True


def _one_batch(reader, builder, data, at, pos, end, prev):
    """The batch at ``data[at:]`` the way Log.read gives it: ``(at, pos, prev, stopped)``
    past it. A legacy entry, a batch out of order or one the decoder refuses is read
    through Log.read; a batch the filter skips gives no rows; a damaged one makes the
    per-record path raise its error."""
    batches, _, status = _native.scan_batches(data, at, verify_crc=True, max_batches=1)
    if status != _native.SCAN_OK or not batches:
        return len(data), end, prev, _per_record(reader, builder, pos, end)
    position, base, last, _max_ts, size, magic = batches[0]
    if last < pos:
        return position + size, pos, last, False
    if base >= end:
        return position + size, pos, prev, True
    header = parse_header(data, position) if magic == MAGIC_V2 else None
    if header is None or not (prev is None or prev < base) or base > last:
        stopped = _per_record(reader, builder, pos, min(end, last + 1), end)
    elif reader.skip.skips(data, position, header):
        stopped = last + 1 >= end
    else:
        stopped = _decode(reader, builder, memoryview(data), position, size, header, pos, end)
    return position + size, max(pos, last + 1), last, stopped


def _decode(reader, builder, view, position, size, header, lo, hi):
    body = view[position + BATCH_OVERHEAD:position + size]
    try:
        if header.compression != CODEC_NONE:
            body = compression.decompress(header.compression, body)
    except Exception:
        return _per_record(reader, builder, lo, min(hi, header.last_offset + 1), hi)
    fixed = None if header.timestamp_type == TIMESTAMP_CREATE_TIME else header.max_timestamp
    status, stopped = builder.add_batch(body, header.records_count, header.base_offset,
                                        header.base_timestamp, fixed, lo, hi)
    if status == 0:
        return stopped
    # Refused bytes (the per-record path raises their error) or an overflow.
    return _per_record(reader, builder, lo, min(hi, header.last_offset + 1), hi)


def _per_record(reader, builder, lo, stop, hi=None):
    """Rows of [lo, stop) through Log.read (legacy entries, refused or damaged batches);
    returns whether the read ended before ``hi``."""
    rows = list(reader.read(lo, stop)) if lo < stop else []
    status, _ = builder.add_rows(rows, lo, stop)
    if status:
        raise OverflowError("a record's timestamp does not fit Spark's microsecond "
                            "timestamps, or a field is longer than 2 GiB")
    hi = stop if hi is None else hi
    return stop >= hi
