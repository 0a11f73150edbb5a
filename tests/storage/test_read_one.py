"""The read fast paths return exactly what the general read returns.

``Log.read_one(o)`` (marks of record boundaries, one record decoded) against the first
record of ``Log.read(o, 1)``; ``Log.fetch_records`` and ``read(o, m)`` against a full
read; on random logs: batch sizes, codecs, keys and null keys, headers, tombstones,
LogAppendTime, compaction holes (inside batches and between them), control batches,
segment rolls, legacy message sets, a pinned high watermark; and bad offsets. Another
process's appends and truncations are seen. The C or pure-Python helpers are whatever
KQLITE_PURE_PYTHON selects: run this file in both modes.
"""

import multiprocessing
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite
from kqlite import Record
from kqlite.errors import CorruptRecordError, OffsetOutOfRangeError
from kqlite.format.batch import build_batch
from kqlite.format.compression import available_codecs
from kqlite.storage import Isolation, reads
from kqlite.storage.record_lookup import STRIDE

CTX = multiprocessing.get_context("spawn")
CODECS = [None] + [c for c in ("gzip", "snappy", "lz4", "zstd") if c in available_codecs()]
T0 = 1_700_000_000_000
OUT = "out of range"

EXAMPLES = settings(max_examples=int(os.environ.get("KQLITE_READ_EXAMPLES", "40")),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

record_st = st.tuples(
    st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d"])),        # key
    st.one_of(st.none(), st.binary(max_size=300)),                          # value
    st.lists(st.tuples(st.sampled_from(["h", "trace-id", "\u00e9"]),
                       st.one_of(st.none(), st.binary(max_size=8))), max_size=2),
    st.integers(0, 5000))                                                   # ts offset
batch_st = st.tuples(st.lists(record_st, min_size=1, max_size=40), st.sampled_from(CODECS))


def general(log, offset, isolation=Isolation.HIGH_WATERMARK):
    """What the general read (reads.py, whole batches decoded) says about ``offset``: its
    record, None, or OUT. (Log.read(offset, 1) walks record boundaries as read_one does.)"""
    try:
        rec = next(iter(reads.read(log, offset, 1, None, isolation)), None)
    except OffsetOutOfRangeError:
        return OUT
    return rec if rec is not None and rec.offset == offset else None


def fast(log, offset, **kw):
    try:
        rec = log.read_one(offset, **kw)
    except OffsetOutOfRangeError:
        return OUT
    # Bytes, not views of the bytes read (== would take a memoryview as equal).
    assert rec is None or {type(rec.key), type(rec.value)} <= {bytes, type(None)}
    return rec


def check_all(log, rnd, **kw):
    """read_one == general for every offset around the log, in random order, twice (the
    first read of a batch marks it; the second answers from the marks)."""
    start, end = log.start_offset, log.end_offset
    offsets = list(range(max(start - 2, 0), end + 3))
    for _ in range(2):
        rnd.shuffle(offsets)
        for o in offsets:
            assert fast(log, o, **kw) == general(log, o, **kw), o


def control_batch(offset):
    marker = Record(key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00\x00\x00", timestamp=T0)
    return build_batch([marker], base_offset=offset, control=True, transactional=True,
                       producer_id=7, producer_epoch=0)


@EXAMPLES
@given(batches=st.lists(batch_st, min_size=1, max_size=8),
       segment_bytes=st.sampled_from([1 << 20, 3000]),
       append_time=st.booleans(), compact=st.booleans(), control=st.booleans(),
       seed=st.integers(0, 2 ** 32))
def test_read_one_is_the_general_read(tmp_path_factory, batches, segment_bytes, append_time,
                                      compact, control, seed):
    rnd = random.Random(seed)
    path = tmp_path_factory.mktemp("log") / "t-0"
    config = {"segment.bytes": segment_bytes,
              "message.timestamp.type": "LogAppendTime" if append_time else "CreateTime"}
    if compact:     # a compacted log takes keyed records only
        config.update({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.0})
    with kqlite.Log.open(path, config) as log:
        for i, (records, codec) in enumerate(batches):
            log.append([Record(key=b"z" if k is None and compact else k, value=v, headers=h,
                               timestamp=T0 + t) for k, v, h, t in records], codec=codec)
            if control and i == 0:
                log.append_batches(control_batch(log.end_offset), assign_offsets=False)
        check_all(log, rnd)
        if compact:
            log.roll()
            log.append([Record(key=b"a", value=b"after compaction")])
            log.compact(now_ms=T0, force=True)
            check_all(log, rnd)
            check_all(log, rnd, isolation=Isolation.LOG_END)
        # A pinned high watermark: offsets at or past it read as nothing.
        log.set_high_watermark(log.start_offset + (log.end_offset - log.start_offset) // 2)
        check_all(log, rnd)
        check_all(log, rnd, isolation=Isolation.LOG_END)


@EXAMPLES
@given(batches=st.lists(batch_st, min_size=1, max_size=6), wanted=st.integers(1, 120),
       seed=st.integers(0, 2 ** 32))
def test_fetch_records_and_read_with_a_limit_are_cuts_of_the_full_read(
        tmp_path_factory, batches, wanted, seed):
    rnd = random.Random(seed)
    with kqlite.Log.open(tmp_path_factory.mktemp("log") / "t-0") as log:
        bounds = []
        for records, codec in batches:
            first = log.append([Record(key=k, value=v, headers=h, timestamp=T0 + t)
                                for k, v, h, t in records], codec=codec)
            bounds.append(first + len(records))     # each append here is one batch
        everything = list(log.read(0))
        for o in rnd.sample(range(log.end_offset + 1), min(10, log.end_offset + 1)):
            rest = everything[o:]
            assert list(log.read(o, wanted)) == rest[:wanted]
            got = log.fetch_records(o, wanted)
            assert got == rest[:len(got)]
            assert len(got) >= min(wanted, len(rest))
            assert not got or got[-1].offset + 1 in bounds     # whole batches


def test_legacy_message_sets_and_v2_batches(tmp_path):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    def legacy(magic, offset, key, value, codec=0):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec,
                                           batch_size=1 << 16)
        builder.append(0 if codec else offset, timestamp=T0 + offset, key=key, value=value)
        entry = bytearray(builder.build())
        entry[:8] = offset.to_bytes(8, "big")   # a wrapper carries its last inner offset
        return bytes(entry)

    path = tmp_path / "t-0"
    os.makedirs(path)
    with open(path / ("%020d.log" % 0), "wb") as f:
        f.write(legacy(0, 0, b"a", b"zero") + legacy(1, 1, None, b"one")
                + legacy(1, 2, b"c", None) + legacy(1, 3, b"d", b"gz", codec=1))
    with kqlite.Log.open(path) as log:
        log.append([b"v2-%d" % i for i in range(50)])
        check_all(log, random.Random(1))
        assert log.read_one(1).value == b"one" and log.read_one(4).value == b"v2-0"


def test_a_large_batch_is_read_a_few_marks_at_a_time(tmp_path):
    values = [os.urandom(100) for _ in range(10_000)]
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(values)
        sizes = []
        real = log._segments[0].log

        class Counting:
            def pread(self, size, position):
                sizes.append(size)
                return real.pread(size, position)

            def __getattr__(self, name):
                return getattr(real, name)

        wanted = (0, 1, 4321, 9361, 9362, 9999)
        expected = [general(log, o) for o in wanted]
        for o in wanted:
            log.read_one(o)                     # marks the batches
        log._segments[0].log = Counting()
        try:
            assert [log.read_one(o) for o in wanted] == expected
        finally:
            log._segments[0].log = real
    assert [r.value for r in expected] == [values[o] for o in wanted]
    # One read of the segment per record: a stride's worth of records (up to the record
    # crossing the next mark), never the 1 MiB batch.
    assert len(sizes) == len(wanted) and max(sizes) < STRIDE + 2 * 120


def test_bad_offsets_and_a_closed_log(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        assert log.read_one(0) is None                        # empty: the end
        with pytest.raises(OffsetOutOfRangeError):
            log.read_one(1)
        log.append([b"x", b"y", b"z"])
        log.delete_records(1)
        with pytest.raises(OffsetOutOfRangeError):
            log.read_one(0)
        with pytest.raises(OffsetOutOfRangeError):
            log.read_one(4)
        assert log.read_one(3) is None
        assert log.read_one(2).value == b"z"
    with pytest.raises(kqlite.errors.LogClosedError):
        log.read_one(2)


def test_a_damaged_batch_raises_as_the_general_read_does(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        log.append([b"a" * 100] * 50)
        log.append([b"b" * 100] * 50)
    seg = path / ("%020d.log" % 0)
    data = bytearray(seg.read_bytes())
    data[len(data) // 4] ^= 0xFF                # inside the first batch's records
    seg.write_bytes(bytes(data))
    with kqlite.Log.open(path) as log:
        with pytest.raises(CorruptRecordError):
            next(iter(log.read(10, 1)))
        with pytest.raises(CorruptRecordError):
            log.read_one(10)
        assert log.read_one(60) == general(log, 60)


def _append(path, values):
    with kqlite.Log.open(path) as log:
        log.append(values)


def _truncate_and_append(path, offset, values):
    with kqlite.Log.open(path) as log:
        log.truncate_to(offset)
        log.append(values)


def _run(target, *args):
    p = CTX.Process(target=target, args=args)
    p.start()
    p.join(60)
    assert p.exitcode == 0


def test_another_process_appends_and_truncations_are_seen(tmp_path):
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as log:
        log.append([b"mine-%d" % i for i in range(100)])
        assert log.read_one(50).value == b"mine-50"
        assert log.read_one(100) is None
        _run(_append, path, [b"theirs-%d" % i for i in range(100)])
        assert log.read_one(150).value == b"theirs-50"
        assert log.read_one(50).value == b"mine-50"
        # The other process replaces offsets 100.. : the marks of the batch that held
        # them must not answer any more.
        _run(_truncate_and_append, path, 100, [b"new-%d" % i for i in range(30)])
        assert log.read_one(120).value == b"new-20"
        assert log.read_one(130) is None                    # the new log end
        with pytest.raises(OffsetOutOfRangeError):
            log.read_one(150)
        check_all(log, random.Random(2))
