"""Log.append_as_leader: a produce request's batches, validated once, stamped with the
leader's epoch and judged by the idempotent-producer state under the write lock, whose
snapshots let a reopened log recognise retries without rescanning it."""

import os

import pytest

import kqlite
from kqlite import _native
from kqlite.errors import (
    InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError, RecordTooLargeError,
)
from kqlite.format.batch import build_batch
from kqlite.format.record import Record
from kqlite.storage.producer_state import decode_snapshot


def produced(values, *, pid=-1, epoch=-1, seq=-1):
    return build_batch([Record(v) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)


def produce_six_over_several_segments(log):
    """Producer 5's sequences 0..5, one 60-byte record each; with segment_bytes=300
    the log rolls (and snapshots) on the way."""
    for seq in range(6):
        log.append_as_leader(produced([b"v" * 60], pid=5, epoch=0, seq=seq), leader_epoch=0)


def snapshots(log):
    return sorted(n for n in os.listdir(log.path) if n.endswith(".snapshot"))


def test_appends_stamp_the_epoch_and_answer_offsets(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        info = log.append_as_leader(produced([b"a", b"b"]), leader_epoch=4)
        assert (info.first_offset, info.last_offset, info.record_count,
                info.duplicate) == (0, 1, 2, False)
        assert log.epochs.entries == [(4, 0)]
        assert int.from_bytes(log.read_batches(0)[12:16], "big") == 4
        assert [r.value for r in log.read()] == [b"a", b"b"]


def test_a_retry_is_answered_with_its_first_offsets_and_not_written(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"before"])
        first = log.append_as_leader(produced([b"x", b"y"], pid=7, epoch=0, seq=0),
                                     leader_epoch=0)
        again = log.append_as_leader(produced([b"x", b"y"], pid=7, epoch=0, seq=0),
                                     leader_epoch=0)
        assert (again.first_offset, again.last_offset, again.duplicate) == (1, 2, True)
        assert first.first_offset == 1 and not first.duplicate
        assert log.end_offset == 3
        nxt = log.append_as_leader(produced([b"z"], pid=7, epoch=0, seq=2), leader_epoch=0)
        assert nxt.first_offset == 3


@pytest.mark.parametrize("seq, epoch, error", [
    (5, 0, OutOfOrderSequenceError),      # a gap in the sequence
    (0, 1, None),                          # a new epoch starting at 0 is fine
    (3, 2, OutOfOrderSequenceError),       # a new epoch must start at 0
])
def test_sequence_and_epoch_rules(tmp_path, seq, epoch, error):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append_as_leader(produced([b"a", b"b"], pid=9, epoch=0, seq=0), leader_epoch=0)
        batch = produced([b"c"], pid=9, epoch=epoch, seq=seq)
        if error is None:
            assert log.append_as_leader(batch, leader_epoch=0).first_offset == 2
        else:
            with pytest.raises(error):
                log.append_as_leader(batch, leader_epoch=0)
            assert log.end_offset == 2      # nothing written


def test_a_fenced_producer_epoch_is_refused(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append_as_leader(produced([b"a"], pid=9, epoch=3, seq=0), leader_epoch=0)
        with pytest.raises(InvalidProducerEpochError):
            log.append_as_leader(produced([b"b"], pid=9, epoch=2, seq=1), leader_epoch=0)
        assert log.end_offset == 1


def test_kafka_validator_refusals_store_nothing(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", max_message_bytes=2000) as log:
        log.append([b"kept"])
        bad = bytearray(produced([b"a"]))
        bad[23:27] = (-5).to_bytes(4, "big", signed=True)     # lastOffsetDelta, CRC-covered
        bad[17:21] = _native.crc32c(bytes(bad[21:])).to_bytes(4, "big")
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(bytes(bad), leader_epoch=0)
        with pytest.raises(RecordTooLargeError):
            log.append_as_leader(produced([b"v" * 5000]), leader_epoch=0)
        two = produced([b"a"]) + produced([b"b"])
        with pytest.raises(InvalidRecordError):          # a client sends one batch
            log.append_as_leader(two, leader_epoch=0)
        assert log.end_offset == 1 and [r.value for r in log.read()] == [b"kept"]


def test_snapshots_at_roll_and_close_keep_the_retry_window_across_a_reopen(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=300) as log:
        produce_six_over_several_segments(log)
        assert len(log.segments) > 1
        rolled = snapshots(log)
        assert rolled                                      # written at the rolls
    with kqlite.Log.open(path) as log:
        assert len(snapshots(log)) >= len(rolled)          # and one more at close
        newest = snapshots(log)[-1]
        assert int(newest.split(".")[0]) == log.end_offset
        with open(os.path.join(log.path, newest), "rb") as f:
            entries = decode_snapshot(f.read())
        assert 5 in entries
        retry = log.append_as_leader(produced([b"v" * 60], pid=5, epoch=0, seq=5),
                                     leader_epoch=0)
        assert retry.duplicate and retry.first_offset == 5
        assert log.append_as_leader(produced([b"n"], pid=5, epoch=0, seq=6),
                                    leader_epoch=0).first_offset == 6


def test_truncation_removes_the_snapshots_above_the_new_end(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, segment_bytes=300) as log:
        produce_six_over_several_segments(log)
    with kqlite.Log.open(path) as log:            # producer state not loaded in this handle
        assert max(int(n.split(".")[0]) for n in snapshots(log)) == 6
        log.truncate_to(2)
        assert all(int(n.split(".")[0]) <= 2 for n in snapshots(log))
        # The producer's batches at 2.. are gone: sequence 2 is new again, not a retry.
        info = log.append_as_leader(produced([b"again"], pid=5, epoch=0, seq=2),
                                    leader_epoch=0)
        assert not info.duplicate and info.first_offset == 2
