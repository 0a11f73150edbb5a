"""arrow_decode / arrow_encode / arrow_partitions (csrc/arrow.c and the pure twins):
the C build against the twin on the same inputs, decode_records and encode_records
as the oracles, Kafka's murmur2 partitioner as the partitioning oracle."""

import pytest
from hypothesis import given, settings, strategies as st

pa = pytest.importorskip("pyarrow")

from kqlite import _native  # noqa: E402
from kqlite.db.partitioner import partition_for_key  # noqa: E402

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])

blobs = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))
record = st.tuples(blobs, blobs, st.lists(header, max_size=3),
                   st.integers(-10**6, 10**6))
records = st.lists(record, min_size=1, max_size=30)


def _encode(recs):
    keys = [r[0] for r in recs]
    values = [r[1] for r in recs]
    deltas = [r[3] for r in recs]
    return _native.pure.encode_records(values, keys, deltas, [r[2] for r in recs])


def _fresh(with_headers, rows=2, data=4):
    cols = [bytearray(n) for n in (8 * rows, 8 * rows, rows, 4 * rows + 4, data, rows,
                                   4 * rows + 4, data, 4 * rows + 4, 4 * rows + 4, data,
                                   rows, 4 * rows + 4, data)]
    return cols, [0] * _native.ARROW_FILL


def _decode_all(impl, body, count, base, base_ts, fixed, lo, hi, with_headers):
    cols, fill = _fresh(with_headers)
    while True:
        status, stopped = impl.arrow_decode(body, count, base, base_ts, fixed, lo, hi,
                                            with_headers, cols, fill)
        if status != _native.ARROW_NO_SPACE:
            break
        cols = [c + bytes(len(c) * 2 + 64) for c in cols]      # grow: the call repeats
    return status, stopped, cols, fill


def _rows(cols, fill, with_headers):
    """The decoded columns back as Python rows, through pyarrow."""
    n, buf = fill[0], [pa.py_buffer(c) for c in cols]
    key = pa.Array.from_buffers(pa.binary(), n, [buf[2], buf[3], buf[4]])
    value = pa.Array.from_buffers(pa.binary(), n, [buf[5], buf[6], buf[7]])
    offsets = pa.Array.from_buffers(pa.int64(), n, [None, buf[0]])
    stamps = pa.Array.from_buffers(pa.int64(), n, [None, buf[1]])
    out = list(zip(offsets.to_pylist(), stamps.to_pylist(), key.to_pylist(),
                   value.to_pylist()))
    if with_headers:
        h = fill[3]
        hk = pa.Array.from_buffers(pa.string(), h, [None, buf[9], buf[10]])
        hv = pa.Array.from_buffers(pa.binary(), h, [buf[11], buf[12], buf[13]])
        lists = pa.Array.from_buffers(pa.int32(), n + 1, [None, buf[8]]).to_pylist()
        pairs = list(zip(hk.to_pylist(), hv.to_pylist()))
        out = [row + (tuple(pairs[lists[i]:lists[i + 1]]),) for i, row in enumerate(out)]
    assert fill[6] == sum(r[2] is None for r in out)
    assert fill[7] == sum(r[3] is None for r in out)
    return out


@NATIVE
@given(recs=records, base=st.integers(0, 10**12), base_ts=st.integers(0, 2 * 10**12),
       window=st.tuples(st.integers(-2, 32), st.integers(-2, 32)),
       with_headers=st.booleans(), log_append=st.booleans())
def test_decode_gives_the_rows_decode_records_gives(recs, base, base_ts, window,
                                                    with_headers, log_append):
    body = _encode(recs)
    lo, hi = base + window[0], base + window[1]
    fixed = base_ts + 5 if log_append else None
    want = []
    for off, ts, k, v, hs in _native.pure.decode_records(body, len(recs), base, base_ts):
        if off < lo:
            continue
        if off >= hi:
            break
        row = (off, (fixed if log_append else ts) * 1000, k, v)
        want.append(row + (tuple(hs),) if with_headers else row)
    results = []
    for impl in IMPLS:
        status, stopped, cols, fill = _decode_all(impl, body, len(recs), base, base_ts, fixed,
                                                  lo, hi, with_headers)
        assert status == 0
        assert stopped == (len(want) < sum(lo <= base + i for i in range(len(recs))))
        got = _rows(cols, fill, with_headers)
        assert got == want
        results.append((got, fill))
    assert all(r == results[0] for r in results)


@NATIVE
@given(recs=records, cut=st.integers(1, 200), flip=st.integers(0, 255))
def test_refused_bytes_give_the_same_status_in_both(recs, cut, flip):
    body = bytearray(_encode(recs))
    i = cut % len(body)
    body[i] ^= flip
    statuses = set()
    for impl in IMPLS:
        status, _, _, fill = _decode_all(impl, bytes(body), len(recs), 0, 0, None, 0, 1 << 40,
                                         True)
        statuses.add((status, tuple(fill) if status == 0 else None))
        if status:
            assert fill == [0] * _native.ARROW_FILL        # nothing half-appended
    assert len(statuses) == 1


def test_decode_appends_after_earlier_rows():
    a = _encode([(b"k", b"v1", [("h", b"x")], 0)])
    b = _encode([(None, None, [], 3), (b"k2", b"v2", [("a", None)], 4)])
    for impl in IMPLS:
        cols, fill = _fresh(True, rows=8, data=64)
        assert impl.arrow_decode(a, 1, 0, 100, None, 0, 99, True, cols, fill) == (0, False)
        assert impl.arrow_decode(b, 2, 1, 200, None, 0, 99, True, cols, fill) == (0, False)
        assert _rows(cols, fill, True) == [
            (0, 100000, b"k", b"v1", (("h", b"x"),)),
            (1, 203000, None, None, ()),
            (2, 204000, b"k2", b"v2", (("a", None),))]


def test_timestamp_overflowing_microseconds_is_refused():
    body = _encode([(None, b"v", [], 0)])
    for impl in IMPLS:
        cols, fill = _fresh(False, rows=4, data=16)
        status, _ = impl.arrow_decode(body, 1, 0, 2**62, None, 0, 9, False, cols, fill)
        assert status == _native.WALK_OVERFLOW


def _binary_buffers(arr):
    arr = pa.concat_arrays([arr]) if arr.offset else arr
    if len(arr) and arr.null_count == len(arr):
        return None
    b = arr.buffers()
    return (b[0] if arr.null_count else None, b[1], b[2])


@NATIVE
@given(recs=records, window=st.tuples(st.integers(0, 30), st.integers(0, 30)),
       base_ts=st.integers(-10**6, 10**6))
def test_encode_is_encode_records(recs, window, base_ts):
    lo, hi = min(window), max(window)
    hi = min(hi, len(recs))
    lo = min(lo, hi)
    keys = pa.array([r[0] for r in recs], pa.binary())
    values = pa.array([r[1] if r[1] is not None else b"" for r in recs], pa.binary())
    stamps = pa.array([r[3] for r in recs], pa.int64())
    htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    headers = pa.array([[{"key": k, "value": v} for k, v in r[2]] for r in recs], htype)
    entries = headers.values.flatten()
    hk, hv = entries[0], entries[1]
    hargs = (headers.buffers()[1], hk.buffers()[1], hk.buffers()[2],
             hv.buffers()[0] if hv.null_count else None, hv.buffers()[1], hv.buffers()[2])
    want = _native.pure.encode_records(
        [r[1] if r[1] is not None else b"" for r in recs[lo:hi]], [r[0] for r in recs[lo:hi]],
        [r[3] - base_ts for r in recs[lo:hi]], [r[2] for r in recs[lo:hi]])
    for impl in IMPLS:
        got = impl.arrow_encode(lo, hi, _binary_buffers(keys), _binary_buffers(values),
                                stamps.buffers()[1], base_ts, hargs)
        assert got == want


@NATIVE
@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=20)), max_size=40),
       partitions=st.integers(1, 64))
def test_partitions_are_kafkas(keys, partitions):
    want = [-1 if k is None else partition_for_key(k, partitions) for k in keys]
    arr = pa.array(keys, pa.binary())
    for impl in IMPLS:
        assert list(impl.arrow_partitions(_binary_buffers(arr), len(keys), partitions)) == want


# -- arrow_decode_run: a fetched chunk's batches in one pass ---------------------------------

# A batch of the chunk: its records, and how it was written.
KINDS = ["plain", "gzip", "idempotent", "transactional", "control", "log_append"]
chunk_batch = st.tuples(st.lists(record, min_size=1, max_size=4), st.sampled_from(KINDS),
                        st.booleans())     # True: the batch repeats the previous base offset


def _chunk(batches):
    from kqlite.format.batch import build_batch
    from kqlite import Record
    out, offset = [], 0
    for recs, kind, repeat in batches:
        if repeat and out:
            offset -= 1
        rows = [Record(key=k, value=v, headers=[(hk, hv) for hk, hv in hs],
                       timestamp=10**6 + ts) for k, v, hs, ts in recs]
        if kind == "control":
            rows = rows[:1]
        txn = kind in ("transactional", "control")
        out.append(build_batch(
            rows, base_offset=offset, codec=1 if kind == "gzip" else 0,
            producer_id=7 if kind in ("idempotent", "transactional", "control") else -1,
            producer_epoch=0 if kind in ("idempotent", "transactional", "control") else -1,
            base_sequence=0 if kind in ("idempotent", "transactional", "control") else -1,
            transactional=txn, control=kind == "control",
            timestamp_type=1 if kind == "log_append" else 0))
        offset += len(rows)
    return b"".join(out), offset


def _run_all(impl, data, lo, hi, txn_aside, max_rows, with_headers):
    """Every call a reader makes over ``data``: growing on NO_SPACE, stepping over a
    batch set aside (stopping at bytes that do not frame), going on after FULL."""
    cols, fill = _fresh(with_headers)
    at, prev, calls = 0, None, []
    while at < len(data):
        status, why, at, lo, prev = impl.arrow_decode_run(
            data, at, lo, hi, prev, txn_aside, max_rows, 1 << 30, with_headers, cols, fill)
        calls.append((status, why, at, lo, prev, tuple(fill)))
        if status == _native.ARROW_NO_SPACE:
            cols = [c + bytes(len(c) * 2 + 64) for c in cols]
        elif why == _native.RUN_ASIDE:
            found, _, _ = _native.pure.scan_batches(data, at, verify_crc=False, max_batches=1)
            if not found:
                break
            at += found[0][4]
        elif why in (_native.RUN_END, _native.RUN_STOPPED):
            break
        max_rows = fill[0] + max_rows
    return calls, cols, fill


@NATIVE
@given(batches=st.lists(chunk_batch, min_size=1, max_size=8),
       window=st.tuples(st.integers(0, 30), st.integers(0, 30)),
       txn_aside=st.booleans(), max_rows=st.integers(1, 12), with_headers=st.booleans(),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**4), st.integers(1, 255))))
def test_run_is_the_same_in_both(batches, window, txn_aside, max_rows, with_headers, damage):
    data, end = _chunk(batches)
    if damage is not None:
        data = bytearray(data)
        data[damage[0] % len(data)] ^= damage[1]
        data = bytes(data)
    lo, hi = min(window), max(window)
    results = [_run_all(impl, data, lo, hi, txn_aside, max_rows, with_headers)
               for impl in IMPLS]
    calls, cols, fill = results[0]
    for other_calls, other_cols, other_fill in results[1:]:
        assert other_calls == calls
        assert other_fill == fill
        assert _rows(other_cols, other_fill, with_headers) == _rows(cols, fill, with_headers)


def test_run_decodes_plain_batches_and_leaves_out_markers():
    recs = [(b"k%d" % i, b"v%d" % i, [], i) for i in range(6)]
    data, _ = _chunk([(recs[:1], "plain", False), (recs[1:3], "idempotent", False),
                      (recs[3:4], "control", False), (recs[4:6], "log_append", False)])
    for impl in IMPLS:
        cols, fill = _fresh(False, rows=16, data=64)
        status, why, at, lo, prev = impl.arrow_decode_run(data, 0, 0, 99, None, False, 99,
                                                          1 << 30, False, cols, fill)
        assert (status, why, at, lo, prev) == (0, _native.RUN_END, len(data), 6, 5)
        got = _rows(cols, fill, False)
        assert [r[0] for r in got] == [0, 1, 2, 4, 5]      # offset 3 is the marker
        assert [r[3] for r in got] == [b"v0", b"v1", b"v2", b"v4", b"v5"]


def test_run_sets_aside_what_the_reader_takes_batch_by_batch():
    recs = [(None, b"v%d" % i, [], i) for i in range(3)]
    for kind, txn_aside in [("gzip", False), ("transactional", True), ("control", True)]:
        data, _ = _chunk([(recs[:1], "plain", False), (recs[1:2], kind, False),
                          (recs[2:], "plain", False)])
        first = len(_chunk([(recs[:1], "plain", False)])[0])
        for impl in IMPLS:
            cols, fill = _fresh(False, rows=16, data=64)
            got = impl.arrow_decode_run(data, 0, 0, 99, None, txn_aside, 99, 1 << 30, False,
                                        cols, fill)
            assert got == (0, _native.RUN_ASIDE, first, 1, 0), kind
            assert fill[0] == 1


def test_run_stops_at_hi_and_when_full():
    recs = [(None, b"v%d" % i, [], i) for i in range(4)]
    data, _ = _chunk([([r], "plain", False) for r in recs])
    size = len(data) // 4
    for impl in IMPLS:
        cols, fill = _fresh(False, rows=16, data=64)
        assert impl.arrow_decode_run(data, 0, 1, 3, None, False, 99, 1 << 30, False,
                                     cols, fill) == (0, _native.RUN_STOPPED, 3 * size, 3, 2)
        assert fill[0] == 2
        cols, fill = _fresh(False, rows=16, data=64)
        assert impl.arrow_decode_run(data, 0, 0, 99, None, False, 2, 1 << 30, False,
                                     cols, fill) == (0, _native.RUN_FULL, 2 * size, 2, 1)
