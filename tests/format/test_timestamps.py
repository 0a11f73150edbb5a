"""set_timestamp_type: a batch's timestamp type and maxTimestamp set in place (Kafka's
DefaultRecordBatch.setMaxTimestamp) without touching the records, with a CRC kafka-python
accepts; and the append path applying the topic's message.timestamp.type to a Log."""

import pytest
from kafka.record.default_records import DefaultRecordBatch

import kqlite
from kqlite.format.batch import build_batch, decode_batch, verify_crc
from kqlite.format.record import Record
from kqlite.format.timestamps import InvalidTimestampError, set_timestamp_type
from kqlite.storage.appending import append_batches

T0 = 1_700_000_000_000
NOW = 1_800_000_000_000


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_log_append_time_is_set_without_touching_the_records(codec):
    if codec == "zstd":
        pytest.importorskip("zstandard")
    records = [Record(b"v%d" % i, key=b"k", timestamp=T0 + i) for i in range(4)]
    data = bytearray(build_batch(records, codec=codec))
    before = bytes(data[61:])
    attributes = set_timestamp_type(data, 0, True, NOW)
    assert attributes & 0x08 and data[61:] == before
    verify_crc(data)
    header, decoded = decode_batch(data)
    assert (header.timestamp_type, header.max_timestamp, header.base_timestamp) == (1, NOW, T0)
    assert [r.timestamp for r in decoded] == [NOW] * 4
    theirs = DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert [r.timestamp for r in theirs] == [NOW] * 4


def test_create_time_clears_the_bit_and_keeps_record_timestamps():
    data = bytearray(build_batch([Record(b"a", timestamp=T0), Record(b"b", timestamp=T0 + 3)],
                                 timestamp_type=1))
    set_timestamp_type(data, 0, False, T0 + 3)
    verify_crc(data)
    header, decoded = decode_batch(data)
    assert header.timestamp_type == 0
    assert [r.timestamp for r in decoded] == [T0, T0 + 3]


def test_an_unchanged_batch_is_left_as_it_is():
    data = bytearray(build_batch([Record(b"a", timestamp=T0)]))
    original = bytes(data)
    set_timestamp_type(data, 0, False, T0)
    assert bytes(data) == original


def test_a_log_append_time_log_stamps_every_append(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", message_timestamp_type="LogAppendTime") as log:
        info = log.append_as_leader(build_batch([b"a", b"b"], timestamp=T0), leader_epoch=0)
        assert info.log_append_time > T0
        log.append_batches(build_batch([b"c"], timestamp=T0))      # the embedded API too
        stamped = [r.timestamp for r in log.read()]
        assert stamped[:2] == [info.log_append_time] * 2 and stamped[2] > T0
        assert log.offset_for_time(T0 + 1) == 0
        with pytest.raises(InvalidTimestampError):
            log.append_as_leader(build_batch([b"d"], timestamp=T0, timestamp_type=1),
                                 leader_epoch=0)
        assert log.end_offset == 3
    with kqlite.Log.open(tmp_path / "t-0") as log:     # kept on disk
        assert [r.timestamp for r in log.read()][:2] == [info.log_append_time] * 2


def test_a_create_time_log_answers_no_append_time(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        info = append_batches(log, build_batch([b"a"], timestamp=T0), 0, True, "client")
        assert info.log_append_time == -1
        assert [r.timestamp for r in log.read()] == [T0]
