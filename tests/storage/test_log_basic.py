"""The Log's normal path and its errors: append, read, reopen, roll, config."""

import os

import pytest

import kqlite
from kqlite import Record
from kqlite.errors import (ConfigError, InvalidRecordError, LogClosedError,
                           OffsetOutOfRangeError, RecordTooLargeError)


def values(log, offset=None):
    return [r.value for r in log.read(offset)]


def test_append_and_read_round_trip(tmp_path):
    with kqlite.Log.open(tmp_path / "data" / "clicks-0") as log:
        first = log.append([b"a", b"b", Record(key=b"u1", value=b"c", headers=[("h", b"1")])])
        assert first == 0
        recs = list(log.read(first))
    assert [r.offset for r in recs] == [0, 1, 2]
    assert [r.value for r in recs] == [b"a", b"b", b"c"]
    assert recs[2].key == b"u1" and recs[2].headers == (("h", b"1"),)
    assert recs[0].key is None and recs[0].headers == ()
    assert all(isinstance(r.timestamp, int) and r.timestamp > 0 for r in recs)


def test_offsets_are_dense_across_appends_and_reopen(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        assert log.append(b"one") == 0
        assert log.append([b"two", b"three"]) == 1
        assert log.end_offset == 3 and log.start_offset == 0
    with kqlite.Log.open(path) as log:
        assert log.end_offset == 3
        assert log.append(b"four") == 3
        assert values(log) == [b"one", b"two", b"three", b"four"]
        assert values(log, 2) == [b"three", b"four"]
        assert list(log.read(4)) == []


def test_tombstones_keys_headers_and_explicit_timestamps(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([Record(key=b"k", value=None, timestamp=1000),
                    Record(key=b"k2", value=b"v", timestamp=900, headers=[("a", None), ("b", b"")]),
                    b"plain"], timestamp=5000)
        recs = list(log.read())
    assert recs[0].value is None and recs[0].timestamp == 1000
    assert recs[1].timestamp == 900 and recs[1].headers == (("a", None), ("b", b""))
    assert recs[2].timestamp == 5000


def test_segment_files_use_kafka_names_and_roll_on_size(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=200, index_interval_bytes=1) as log:
        for i in range(20):
            log.append(b"x" * 50)
        bases = log.segments
        assert len(bases) > 3
        names = sorted(os.listdir(path))
        for base in bases:
            assert "%020d.log" % base in names
            assert "%020d.index" % base in names
            assert "%020d.timeindex" % base in names
        assert values(log) == [b"x" * 50] * 20
        assert [r.offset for r in log.read(7)] == list(range(7, 20))


def test_index_allows_reading_from_any_offset(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", index_interval_bytes=64) as log:
        for i in range(300):
            log.append(b"%d" % i)
        for offset in (0, 1, 57, 150, 299):
            assert next(iter(log.read(offset))).value == b"%d" % offset
        assert list(log.read(200, max_records=3)) and \
            [r.offset for r in log.read(200, max_records=3)] == [200, 201, 202]


def test_large_append_is_split_into_batches(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", max_message_bytes=10_000) as log:
        log.append([b"v" * 100] * 1000)
        assert log.end_offset == 1000
        raw = log.read_batches(0, max_bytes=1 << 30)
    from kqlite import _native
    batches, stop, status = _native.scan_batches(raw)
    assert len(batches) > 10 and all(b[4] <= 10_000 for b in batches)


def test_read_out_of_range(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"a", b"b"])
        with pytest.raises(OffsetOutOfRangeError) as err:
            log.read(5)
        assert err.value.end_offset == 2
        with pytest.raises(kqlite.OffsetOutOfRange):
            log.read(-1)


def test_bad_records_are_rejected_without_writing(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(b"good")
        with pytest.raises(InvalidRecordError, match="str"):
            log.append(["text"])
        with pytest.raises(InvalidRecordError):
            log.append([b"ok", 42])
        with pytest.raises(InvalidRecordError):
            log.append([])
        assert values(log) == [b"good"]


def test_record_too_large(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", max_message_bytes=1000) as log:
        with pytest.raises(RecordTooLargeError) as err:
            log.append(b"x" * 5000)
        assert err.value.limit == 1000
        assert log.end_offset == 0


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="segment.bytes"):
        kqlite.Log.open(tmp_path / "t-0", segment_bites=100)
    with pytest.raises(ConfigError, match="segment.bytes"):
        kqlite.Log.open(tmp_path / "t-0", config={"segment.bytes": "big"})
    with pytest.raises(ConfigError, match="fsync"):
        kqlite.Log.open(tmp_path / "t-0", fsync="sometimes")


def test_closed_log_refuses_use(tmp_path):
    log = kqlite.Log.open(tmp_path / "t-0")
    log.close()
    log.close()
    with pytest.raises(LogClosedError):
        log.append(b"x")
    with pytest.raises(LogClosedError):
        log.read()


def test_open_without_create(tmp_path):
    with pytest.raises(FileNotFoundError):
        kqlite.Log.open(tmp_path / "missing-0", create=False)


def test_offset_for_time(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=1) as log:
        for i in range(50):
            log.append(b"v", timestamp=1000 + 10 * i)
        assert log.offset_for_time(0) == 0
        assert log.offset_for_time(1000) == 0
        assert log.offset_for_time(1001) == 1
        assert log.offset_for_time(1250) == 25
        assert log.offset_for_time(1490) == 49
        assert log.offset_for_time(1491) is None


def test_offset_for_time_with_out_of_order_timestamps(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", index_interval_bytes=1) as log:
        for ts in (100, 300, 200, 400, 250):
            log.append(b"v", timestamp=ts)
        assert log.offset_for_time(250) == 1
        assert log.offset_for_time(350) == 3
        assert log.offset_for_time(401) is None


def test_compressed_appends(tmp_path):
    from kqlite.format.compression import available_codecs
    with kqlite.Log.open(tmp_path / "t-0") as log:
        for codec in available_codecs():
            log.append([b"%s-%d" % (codec.encode(), i) for i in range(100)], codec=codec)
        got = values(log)
    assert len(got) == 100 * len(available_codecs())
    assert got[:2] == [b"none-0", b"none-1"] or got[0].endswith(b"-0")


def test_log_append_time(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", message_timestamp_type="LogAppendTime") as log:
        log.append(Record(value=b"v", timestamp=5))
        rec = next(iter(log.read()))
    assert rec.timestamp > 1_600_000_000_000


def test_data_dir_checkpoints_are_kafka_text(tmp_path):
    data = tmp_path / "data"
    with kqlite.Log.open(data / "clicks-0") as log:
        log.append([b"a", b"b", b"c"])
    assert (data / "meta.properties").exists()
    assert (data / ".kafka_cleanshutdown").exists()
    text = (data / "recovery-point-offset-checkpoint").read_text()
    assert text == "0\n1\nclicks 0 3\n"
    assert (data / "log-start-offset-checkpoint").read_text() == "0\n1\nclicks 0 0\n"
    log = kqlite.Log.open(data / "clicks-0")
    assert not (data / ".kafka_cleanshutdown").exists()
    log.close()


def test_truncate_to_and_high_watermark(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200) as log:
        for i in range(10):
            log.append(b"m%d" % i)
        assert log.high_watermark == 10
        assert log.truncate_to(4) == 4
        assert log.high_watermark == 4
        assert values(log) == [b"m0", b"m1", b"m2", b"m3"]
        assert log.append(b"new") == 4
        log.set_high_watermark(3)
        assert [r.offset for r in log.read()] == [0, 1, 2]
        assert log.end_offset == 5


def test_leader_epoch_cache(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        log.append(b"a", leader_epoch=0)
        log.append(b"b", leader_epoch=0)
        log.append(b"c", leader_epoch=2)
        assert log.epochs.entries == [(0, 0), (2, 2)]
        assert log.epochs.end_offset_for(1, log.end_offset) == (0, 2)
        assert log.epochs.end_offset_for(2, log.end_offset) == (2, 3)
        raw = log.read_batches(2)
    assert int.from_bytes(raw[12:16], "big") == 2
    assert (path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 2\n"
    with kqlite.Log.open(path) as log:
        log.truncate_to(2)
        assert log.epochs.entries == [(0, 0)]
