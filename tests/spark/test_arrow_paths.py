"""The columnar paths against the per-record paths they replace (no JVM): reading a
range through arrow_read gives exactly the rows Log.read gives, and writing through
arrow_write stores exactly the records the Record path stores."""

import os
import random
import tempfile

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

pa = pytest.importorskip("pyarrow")

import kqlite  # noqa: E402
from kqlite.spark import writing  # noqa: E402
from kqlite.spark.reading import read_range  # noqa: E402

FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

blobs = st.one_of(st.none(), st.binary(max_size=30))
headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
                   max_size=2)
record = st.builds(lambda k, v, h, t: kqlite.Record(key=k, value=v, headers=h, timestamp=t),
                   blobs, blobs, headers, st.integers(0, 2 * 10**12))
batch = st.tuples(st.lists(record, min_size=1, max_size=12), st.sampled_from(["none", "gzip"]))


def _legacy(offset, key, value, ts):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
    builder.append(offset, timestamp=ts, key=key, value=value)
    return bytes(builder.build())


def _read(path, start, end, include_headers, fast, batch_rows):
    got = list(read_range(path, "t", 0, start, end, include_headers=include_headers,
                          batch_rows=batch_rows, fast=fast))
    return pa.Table.from_batches(got).to_pylist() if got else []


@FEW
@given(batches=st.lists(batch, min_size=1, max_size=5), legacy=st.integers(0, 3),
       window=st.tuples(st.integers(0, 70), st.integers(0, 70)),
       include_headers=st.booleans(), batch_rows=st.integers(1, 40),
       log_append=st.booleans())
def test_columnar_read_gives_the_per_record_rows(batches, legacy, window, include_headers,
                                                 batch_rows, log_append):
    with tempfile.TemporaryDirectory() as path:
        db = kqlite.open(path, retention_check_interval_ms=0)
        config = {"message.timestamp.type": "LogAppendTime"} if log_append else None
        db.create_topic("t", partitions=1, config=config)
        db.close()
        if legacy:      # magic 1 messages at the start of the log, as an old Kafka left them
            seg = os.path.join(path, "t-0", "%020d.log" % 0)
            with open(seg, "wb") as f:
                for i in range(legacy):
                    f.write(_legacy(i, b"k%d" % i if i % 2 else None,
                                    None if i == 2 else b"old%d" % i, 1000 + i))
        db = kqlite.open(path, retention_check_interval_ms=0)
        try:
            lg = db.log("t", 0)
            for recs, codec in batches:
                lg.append(recs, codec=codec)
            end = lg.end_offset
        finally:
            db.close()
        start, stop = min(window), min(max(window), end)
        fast = _read(path, start, stop, include_headers, True, batch_rows)
        slow = _read(path, start, stop, include_headers, False, batch_rows)
        assert fast == slow
        assert len(fast) == max(0, stop - start)


# One step of a log written by producers: ("plain", n, codec) n records in batches of
# one (as a Producer with linger_ms=0 writes them) or all in one batch, or a producer's
# transactional batch, or its commit or abort.
step = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 5), st.sampled_from(["none", "gzip"]),
              st.booleans()),
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(1, 3), st.sampled_from([0, 1])),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()))


@FEW
@example(steps=[("plain", 1, "none", False), ("send", 0, 2, 0), ("plain", 2, "none", True),
                ("send", 1, 1, 1), ("end", 0, False), ("end", 1, True), ("plain", 1, "gzip", True)],
         window=(0, 40), isolation="read_committed", batch_rows=3)
@given(steps=st.lists(step, min_size=1, max_size=14),
       window=st.tuples(st.integers(0, 40), st.integers(0, 40)),
       isolation=st.sampled_from(["read_committed", "read_uncommitted"]),
       batch_rows=st.integers(1, 20))
def test_columnar_read_of_small_and_transactional_batches(steps, window, isolation,
                                                          batch_rows):
    from kqlite.format.batch import build_batch
    with tempfile.TemporaryDirectory() as path:
        with kqlite.open(path, retention_check_interval_ms=0) as db:
            db.create_topic("t", partitions=1)
            pids = [db.producer_ids.allocate() for _ in range(3)]
            seqs, open_txn = [0, 0, 0], [False, False, False]
            with db.leased_log("t", 0) as lg:
                n = 0
                for kind, a, b, c in (s + (None,) * (4 - len(s)) for s in steps):
                    if kind == "plain":
                        recs = [kqlite.Record(value=b"p%d" % (n + i), timestamp=1_000 + i)
                                for i in range(a)]
                        for part in ([[r] for r in recs] if c else [recs]):
                            lg.append(part, codec=b)
                    elif kind == "send":
                        recs = [kqlite.Record(value=b"t%d" % (n + i), key=b"k",
                                              timestamp=2_000) for i in range(b)]
                        lg.append_batches(build_batch(
                            recs, codec=c, producer_id=pids[a], producer_epoch=0,
                            base_sequence=seqs[a], transactional=True))
                        seqs[a] += b
                        open_txn[a] = True
                    elif open_txn[a]:
                        lg.append_marker(pids[a], 0, 0, b)
                        open_txn[a] = False
                    n = lg.end_offset
                end = lg.last_stable_offset if isolation == "read_committed" else n
        start, stop = min(window), min(max(window), end)
        got = list(read_range(path, "t", 0, start, stop, batch_rows=batch_rows, fast=True,
                              isolation=isolation))
        want = list(read_range(path, "t", 0, start, stop, batch_rows=batch_rows, fast=False,
                               isolation=isolation))
        rows = pa.Table.from_batches(got).to_pylist() if got else []
        assert rows == (pa.Table.from_batches(want).to_pylist() if want else [])
        assert all(len(b) for b in got)


def _topic(path, partitions=3, config=None):
    db = kqlite.open(path, retention_check_interval_ms=0)
    db.create_topic("t", partitions=partitions, config=config)
    db.close()


def _all(path, partitions=3):
    db = kqlite.open(path, retention_check_interval_ms=0)
    try:
        return {p: [(r.key, r.value, r.timestamp, tuple(r.headers)) for r in db.log("t", p).read()]
                for p in range(partitions)}
    finally:
        db.close()


rows = st.lists(st.tuples(blobs, st.binary(max_size=30), headers, st.integers(0, 10**12),
                          st.one_of(st.none(), st.integers(0, 2))), min_size=1, max_size=40)


@FEW
@given(rows=rows, mode=st.sampled_from(["staged", "direct"]), codec=st.sampled_from(
    ["producer", "gzip"]))
def test_columnar_write_stores_what_the_record_path_stores(rows, mode, codec):
    htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({
        "key": pa.array([r[0] for r in rows], pa.binary()),
        "value": pa.array([r[1] for r in rows], pa.binary()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r[2]] for r in rows], htype),
        "timestamp": pa.array([r[3] for r in rows], pa.int64()),
        "partition": pa.array([i % 3 if r[0] is None else r[4]
                               for i, r in enumerate(rows)], pa.int32()),
    })
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        _topic(a, config={"compression.type": codec})
        _topic(b)
        name, counts = writing.stage_rows(a, iter([batch]), "t", mode)
        if mode == "staged":
            writing.publish(a, [name])
        # The oracle: the Record path (every row's partition is determined: keyless
        # rows name theirs, keyed ones go by murmur2 in both paths).
        db = kqlite.open(b, retention_check_interval_ms=0)
        try:
            groups = writing.batch_to_records(batch, "t", db, 0, random.Random(), {})
        finally:
            db.close()
        want = {p: [] for p in range(3)}
        for (_, p), recs in groups.items():
            want[p] = [(r.key, r.value, r.timestamp, tuple(r.headers)) for r in recs]
        assert _all(a) == want
        assert sum(counts.values()) == len(rows)


@pytest.mark.parametrize("mode", ["staged", "direct"])
def test_columnar_write_partitions_as_kafka(tmp_path, mode):
    """Without a partition column: keyed rows by murmur2 of the key, keyless rows of
    one Arrow batch together in one (sticky) partition, every partition in row order."""
    path = str(tmp_path)
    _topic(path)
    keyed = pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(50)],
                                        "value": ["v%d" % i for i in range(50)]})
    keyless = pa.RecordBatch.from_pydict({"value": ["n%d" % i for i in range(30)]})
    name, counts = writing.stage_rows(path, iter([keyed, keyless]), "t", mode)
    if mode == "staged":
        writing.publish(path, [name])
    got = _all(path)
    from kqlite.db.partitioner import partition_for_key
    for p, recs in got.items():
        keyed_here = [r for r in recs if r[0] is not None]
        assert keyed_here == [(b"k%d" % i, b"v%d" % i, keyed_here[j][2], ())
                              for j, i in enumerate(i for i in range(50)
                                                    if partition_for_key(b"k%d" % i, 3) == p)]
    holders = [p for p, recs in got.items() if any(r[0] is None for r in recs)]
    assert len(holders) == 1
    assert [r[1] for r in got[holders[0]] if r[0] is None] == [b"n%d" % i for i in range(30)]
    assert sum(counts.values()) == 80
