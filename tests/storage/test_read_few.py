"""``Log.read(offset, max_records)`` with a few records walks record boundaries
(record_lookup.read_few) and answers exactly what the general read (reads.read, which
decodes whole batches) answers.

Random logs (batch sizes up to a few hundred records, codecs, keys, headers,
tombstones, LogAppendTime, control batches, compaction holes, segment rolls, a pinned
high watermark, transactional producers with aborted and undecided transactions), random
offsets, ``max_records`` and ``max_offset``, every isolation; and a large batch read one
record at a time reads a stride's worth of it, not the batch. The C or pure-Python
helpers are whatever KQLITE_PURE_PYTHON selects: run this file in both modes.
"""

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite
from kqlite import Record
from kqlite.errors import OffsetOutOfRangeError
from kqlite.format.compression import available_codecs
from kqlite.storage import Isolation, reads
from kqlite.storage.record_lookup import FEW_RECORDS, STRIDE

from txn_workload import Producers

CODECS = [None] + [c for c in ("gzip", "snappy", "lz4", "zstd") if c in available_codecs()]
T0 = 1_700_000_000_000
ISOLATIONS = (Isolation.HIGH_WATERMARK, Isolation.COMMITTED, Isolation.LOG_END)

EXAMPLES = settings(max_examples=int(os.environ.get("KQLITE_READ_EXAMPLES", "20")),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

record_st = st.tuples(
    st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c"])),              # key
    st.one_of(st.none(), st.binary(max_size=200)),                          # value
    st.lists(st.tuples(st.sampled_from(["h", "\u00e9"]),
                       st.one_of(st.none(), st.binary(max_size=8))), max_size=1),
    st.integers(0, 5000))                                                   # ts offset
# A batch: its size (records), one record drawn whole and the rest as small variations of
# it (large batches without a large draw), its codec, and the transaction it is in.
batch_st = st.tuples(st.integers(1, 400), record_st, st.sampled_from(CODECS),
                     st.sampled_from(["plain", "txn", "txn", "commit", "abort"]))


def answer(read, *args, **kw):
    try:
        return list(read(*args, **kw))
    except OffsetOutOfRangeError:
        return "out of range"


def same_reads(log, rnd, cases):
    """The walk (Log.read) against the general read for random offsets, max_records,
    max_offsets and isolations; twice each (the first read of a batch marks it)."""
    start, end = log.start_offset, log.end_offset
    for _ in range(cases):
        offset = rnd.randrange(max(start - 2, 0), end + 3)
        wanted = rnd.choice([1, 1, 2, 3, rnd.randrange(1, FEW_RECORDS + 1)])
        max_offset = rnd.choice([None, None, offset + rnd.randrange(0, 2 * wanted + 2)])
        isolation = rnd.choice(ISOLATIONS)
        expected = answer(reads.read, log, offset, wanted, max_offset, isolation)
        for _ in range(2):
            got = answer(log.read, offset, wanted, max_offset=max_offset, isolation=isolation)
            assert got == expected, (offset, wanted, max_offset, isolation)
        one = answer(lambda: [log.read_one(offset, isolation=isolation)])
        # Keys and values are bytes (== would take a memoryview of them as equal).
        for r in (got if isinstance(got, list) else []) + \
                [r for r in one if isinstance(one, list) and r is not None]:
            assert {type(r.key), type(r.value)} <= {bytes, type(None)}


@EXAMPLES
@given(batches=st.lists(batch_st, min_size=1, max_size=6),
       segment_bytes=st.sampled_from([1 << 20, 4000]), append_time=st.booleans(),
       compact=st.booleans(), seed=st.integers(0, 2 ** 32))
def test_a_few_records_read_as_the_general_read_reads_them(
        tmp_path_factory, batches, segment_bytes, append_time, compact, seed):
    rnd = random.Random(seed)
    config = {"segment.bytes": segment_bytes,
              "message.timestamp.type": "LogAppendTime" if append_time else "CreateTime"}
    if compact:     # a compacted log takes keyed records only
        config.update({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.0})
    with kqlite.Log.open(tmp_path_factory.mktemp("log") / "t-0", config) as log:
        producers = Producers(log)
        for size, (key, value, headers, ts), codec, kind in batches:
            if compact or kind == "plain":
                records = [Record(key=rnd.choice([b"a", b"b", b"c"]) if compact else key,
                                  value=None if value is None else value[:rnd.randrange(
                                      len(value) + 1)],
                                  headers=headers, timestamp=T0 + ts + i)
                           for i in range(size)]
                log.append(records, codec=codec)
            else:
                producers.txn(7, size)
                if kind != "txn":
                    producers.end(7, kind == "commit")
        same_reads(log, rnd, 30)
        if compact:
            log.roll()
            log.append([Record(key=b"a", value=b"after compaction")])
            log.compact(now_ms=T0, force=True)
            same_reads(log, rnd, 30)
        log.set_high_watermark(log.start_offset + (log.end_offset - log.start_offset) // 2)
        same_reads(log, rnd, 30)


def test_a_large_batch_is_walked_a_few_records_at_a_time(tmp_path):
    values = [os.urandom(100) for _ in range(10_000)]
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(values)
        wanted = [(0, 1), (4321, 1), (9361, 3), (9990, 10), (9999, 5)]
        expected = [values[o:o + n] for o, n in wanted]
        for o, n in wanted:
            list(log.read(o, n))                # the first read of the batch marks it
        sizes = []
        real = log._segments[0].log

        class Counting:
            def pread(self, size, position):
                sizes.append(size)
                return real.pread(size, position)

            def __getattr__(self, name):
                return getattr(real, name)

        log._segments[0].log = Counting()
        try:
            got = [[r.value for r in log.read(o, n)] for o, n in wanted]
        finally:
            log._segments[0].log = real
    assert got == expected
    # A stride's worth of records per span read, never the 1 MiB batch.
    assert sizes and max(sizes) < STRIDE + 2 * 120 and len(sizes) <= 2 * len(wanted)


def test_past_a_few_records_the_general_read_decodes_batches(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"%d" % i for i in range(500)])
        assert [r.value for r in log.read(10, FEW_RECORDS + 1)] == \
            [b"%d" % i for i in range(10, 11 + FEW_RECORDS)]
        assert log._record_marks is None        # read_one's marks were never made
        assert [r.value for r in log.read(10, 2)] == [b"10", b"11"]
        assert log._record_marks.batches


def test_a_read_past_a_marker_goes_on_the_general_way(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.txn(1, 3)                             # 0-2
        p.end(1, False)                         # 3: the ABORT marker
        p.plain(2)                              # 4-5
        it = log.read(2, 3)
        assert [r.offset for r in it] == [2, 4, 5]
        it.close()
        assert [r.offset for r in log.read(0, 3, isolation=Isolation.COMMITTED)] == [4, 5]
        assert list(log.read(6, 1)) == []
        with pytest.raises(OffsetOutOfRangeError):
            log.read(7, 1)
    with pytest.raises(kqlite.errors.LogClosedError):
        log.read(0, 1)
