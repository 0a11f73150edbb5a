"""batch.iter_records (the sequential read's decoder: Records built as they are taken)
gives exactly batch.decode_records' Records, and refuses exactly what it refuses,
before returning; batches of every codec and timestamp type, inside a larger buffer."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kqlite import Record
from kqlite.errors import CorruptRecordError
from kqlite.format import batch
from kqlite.format.compression import available_codecs

CODECS = [None] + [c for c in ("gzip", "snappy", "lz4", "zstd") if c in available_codecs()]

record_st = st.builds(
    lambda k, v, h, t: Record(key=k, value=v, headers=h, timestamp=1_700_000_000_000 + t),
    st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=50)),
    st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=3))),
             max_size=2),
    st.integers(0, 1000))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_st, min_size=1, max_size=40), codec=st.sampled_from(CODECS),
       append_time=st.booleans(), pad=st.binary(max_size=30), base=st.integers(0, 2 ** 40))
def test_iter_records_equals_decode_records(records, codec, append_time, pad, base):
    data = pad + batch.build_batch(records, base_offset=base, codec=codec,
                                   timestamp_type=1 if append_time else 0)
    expected = batch.decode_records(data, len(pad))
    first, last, rows = batch.iter_records(data, len(pad))
    got = list(rows)
    assert got == expected and all(type(r) is Record for r in got)
    assert (first, last) == (expected[0].offset, expected[-1].offset)


def test_a_damaged_batch_is_refused_before_any_record():
    data = bytearray(batch.build_batch([Record(value=b"x" * 20)] * 30))
    data[-3] ^= 0x40                                        # a value byte: the CRC fails
    with pytest.raises(CorruptRecordError):
        batch.iter_records(bytes(data), 0)
    data[-3] ^= 0x40
    data[57:61] = (31).to_bytes(4, "big")                   # recordsCount one too many
    with pytest.raises(CorruptRecordError):
        batch.iter_records(bytes(data), 0, verify=False)    # refused by the decoder
