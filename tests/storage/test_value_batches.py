"""Log.append of a list of values takes format/batch.py value_batches (C cut, one
buffer per batch, CRC summed while encoding): the bytes it writes are exactly those
of the general path (build_batch over group_records' groups), in both
implementations of the C helpers, and every list it does not take still gets the
general path's answer."""

import os
import tempfile
from array import array

import pytest
from hypothesis import given, settings, strategies as st

import kqlite
from kqlite.errors import InvalidRecordError, RecordTooLargeError
from kqlite.format import batch as batch_format
from kqlite.format.batch import build_batch, build_values_batch_parts
from kqlite.format.constants import TIMESTAMP_TYPE_MASK
from kqlite.storage import appending

value_st = st.one_of(st.binary(max_size=600),
                     st.binary(max_size=600).map(bytearray),
                     st.binary(max_size=600).map(memoryview))
values_st = st.one_of(st.lists(value_st, min_size=1, max_size=60),
                      # many small values: several groups at small targets
                      st.integers(1, 3000).map(lambda n: [b"%d" % i for i in range(n)]))


def general_batches(values, target, timestamp, epoch, timestamp_type):
    """The general path's batches: group_records' groups, build_values_batch_parts."""
    config = {"max.message.bytes": target}
    out = []
    for group in appending.group_records(config, list(values), plain=False):
        head, body, count, max_ts = build_values_batch_parts(
            [bytes(v) for v in group], timestamp=timestamp, partition_leader_epoch=epoch,
            timestamp_type=timestamp_type)
        out.append((bytes(head + body), count, max_ts))
    return out


@settings(max_examples=150, deadline=None)
@given(values_st, st.integers(200, 40_000), st.integers(0, 2 ** 41),
       st.integers(-1, 2 ** 31 - 1), st.integers(0, 1))
def test_value_batches_are_the_general_batches(values, target, timestamp, epoch, ts_type):
    built = batch_format.value_batches(values, target, timestamp, epoch, ts_type)
    assert built is not None
    got = [(bytes(batch), count, max_ts) for batch, count, max_ts in built]
    assert got == general_batches(values, target, timestamp, epoch, ts_type)
    assert built.sizes == [len(b) for b, _, _ in got]
    for batch, _, _ in got:
        assert batch_format.verify_crc(batch)
        assert bool(batch_format.parse_header(batch).attributes & TIMESTAMP_TYPE_MASK) \
            == bool(ts_type)


@settings(max_examples=40, deadline=None)
@given(st.lists(values_st, min_size=1, max_size=4), st.sampled_from([600, 5000, 1 << 20]))
def test_log_appends_write_the_general_bytes(appends, max_message_bytes):
    with tempfile.TemporaryDirectory() as d, \
            kqlite.Log.open(os.path.join(d, "t-0"), max_message_bytes=max_message_bytes,
                            segment_bytes=64 << 10) as log:
        expected, written = [], []
        for values in appends:
            try:
                first = log.append(values, timestamp=1234)
            except RecordTooLargeError:
                continue
            offset = first
            for group in appending.group_records(log.config, list(values)):
                expected.append(build_batch(group, base_offset=offset, timestamp=1234))
                offset += len(group)
            written.extend(bytes(v) for v in values)
            assert log.next_offset == offset
        on_disk = b"".join(seg.read(0, seg.size) for seg in log._segments)
        assert on_disk == b"".join(expected)
        assert [r.value for r in log.read()] == written


def test_large_lists_are_built_batch_by_batch(tmp_path):
    # More value bytes than batch.py joins at once: each group is joined as its batch
    # is built, in the same buffer.
    values = [os.urandom(n) for n in range(1000, 9000, 7)] * 2
    assert sum(map(len, values)) > batch_format._JOIN_AHEAD
    with kqlite.Log.open(tmp_path / "t-0") as log:
        first = log.append(values, timestamp=99)
        expected, offset = b"", first
        for group in appending.group_records(log.config, values):
            expected += build_batch(group, base_offset=offset, timestamp=99)
            offset += len(group)
        assert log.read_batches(0, 1 << 30) == expected
        assert log.append([b"after"], timestamp=99) == len(values)
        assert [r.value for r in log.read()] == values + [b"after"]


def test_lists_it_does_not_take_get_the_general_answer(tmp_path):
    wide = memoryview(array("i", [1, 2, 3]))
    big = [b"x" * 1000] * (batch_format._JOIN_AHEAD // 1000 + 10)
    with kqlite.Log.open(tmp_path / "t-0", max_message_bytes=8 << 20) as log:
        assert batch_format.value_batches([b"a", wide], 1000) is None
        log.append([b"a", wide, None, kqlite.Record(key=b"k", value=b"v")], timestamp=5)
        assert [r.value for r in log.read()] == [b"a", wide.tobytes(), None, b"v"]
        # A wide view in a list too long to join at once: the type check sends it on.
        assert batch_format.value_batches(big + [wide], 1 << 20) is None
        first = log.append(big + [wide], timestamp=5)
        assert next(iter(log.read(first + len(big)))).value == wide.tobytes()
        end = log.next_offset
        for bad in (["text"], [b"a", 7], [b"a", ("k", "v")]):
            with pytest.raises(InvalidRecordError):
                log.append(bad)
            assert log.next_offset == end


def test_a_batch_too_large_is_refused_before_anything_is_written(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", max_message_bytes=2000) as log:
        log.append([b"a"])
        with pytest.raises(RecordTooLargeError):
            log.append([b"b" * 100] * 30 + [b"c" * 5000])
        assert log.next_offset == 1
        assert [r.value for r in log.read()] == [b"a"]


def test_log_append_time_stamps_every_batch(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", message_timestamp_type="LogAppendTime") as log:
        log.append([b"v" * 100] * 20_000, timestamp=5)
        headers = list(log.batch_headers())
        assert len(headers) > 1
        assert all(h.attributes & TIMESTAMP_TYPE_MASK and h.max_timestamp > 5 for h in headers)
