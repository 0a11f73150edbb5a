"""ProducerStateManager: every check outcome, update, Kafka's snapshot layout read back
by an independent decoder, corrupt snapshots, truncation and replay from a snapshot."""

import logging
import os
import struct

import crcmod.predefined
import pytest

from kqlite.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from kqlite.format import BatchHeader
from kqlite.format.batch import build_batch
from kqlite.format.constants import CONTROL_MASK, TRANSACTIONAL_MASK
from kqlite.format.control_records import COMMIT, EndTransactionMarker
from kqlite.format.validate import AppendOrigin, validate_batches
from kqlite.storage.fs import OsFileSystem
from kqlite.storage.producer_state import (NO_VERIFICATION, BatchMetadata,
                                           CorruptSnapshotError, ProducerStateManager,
                                           decode_snapshot, snapshot_name)

INT32_MAX = 2 ** 31 - 1


def header_for(base_offset, last_offset, max_timestamp, producer_id, producer_epoch,
               base_sequence, records_count, is_transactional=False, is_control=False):
    """A BatchHeader, what Log.batch_headers yields, with the fields the producer state
    reads (the others as a batch of that many records would have them)."""
    attributes = (TRANSACTIONAL_MASK if is_transactional else 0) | \
        (CONTROL_MASK if is_control else 0)
    return BatchHeader(base_offset, 49, -1, 2, 0, attributes,
                       last_offset - base_offset, max_timestamp, max_timestamp, producer_id,
                       producer_epoch, base_sequence, records_count)


class FakeLog:
    """Batch headers at increasing offsets, as a log would hold them, and the marker of
    each control batch (a COMMIT of ``coordinator_epoch``)."""

    def __init__(self):
        self.headers = []
        self.markers = {}
        self.asked = []

    @property
    def end(self):
        return self.headers[-1].last_offset + 1 if self.headers else 0

    def append(self, pid, epoch, seq, count, ts=None, control=False, coordinator_epoch=0):
        base = self.end
        header = header_for(base, base + count - 1, 1_000 + base if ts is None else ts, pid,
                            epoch, seq, count, False, control)
        self.headers.append(header)
        if control:
            self.markers[base] = EndTransactionMarker(COMMIT, coordinator_epoch)
        return header

    def truncate(self, end):
        self.headers = [h for h in self.headers if h.last_offset < end]

    def batches(self, offset):
        """What the producer state replays: (header, marker) from ``offset`` on."""
        self.asked.append(offset)
        return iter([(h, self.markers.get(h.base_offset)) for h in self.headers
                     if h.last_offset >= offset])


def batch(pid, epoch, seq, count=1, base=0):
    return header_for(base, base + count - 1, 5, pid, epoch, seq, count)


@pytest.fixture
def log():
    return FakeLog()


def appended(state, log, *args, **kwargs):
    header = log.append(*args, **kwargs)
    assert state.check(header) is None
    state.update(header)
    return header


# -- check --------------------------------------------------------------------------------------

def test_unknown_producers_and_batches_without_producer_are_appended():
    state = ProducerStateManager("/nonexistent")
    assert state.check(batch(-1, -1, -1)) is None
    assert state.check(batch(7, 0, 1234)) is None        # its earlier batches may be gone
    assert state.check(batch(7, 0, -1)) is None


def test_in_sequence_duplicates_and_gaps(log):
    state = ProducerStateManager("/nonexistent")
    sent = [appended(state, log, 7, 0, seq, 10) for seq in range(0, 60, 10)]
    assert state.check(batch(7, 0, 60, 3)) is None
    for header in sent[1:]:                               # the newest five are remembered
        duplicate = state.check(batch(7, 0, header.base_sequence, 10, base=99))
        assert duplicate == BatchMetadata(header.base_sequence, header.base_sequence + 9,
                                          header.base_offset, header.last_offset,
                                          header.max_timestamp)
    with pytest.raises(OutOfOrderSequenceError, match="next expected is 60") as err:
        state.check(batch(7, 0, 0, 10))                   # older than the window
    assert (err.value.producer_id, err.value.sequence, err.value.expected) == (7, 0, 60)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(batch(7, 0, 61))                      # a gap
    with pytest.raises(OutOfOrderSequenceError):
        state.check(batch(7, 0, 50, 5))                   # overlaps, not a retry
    assert state.check(batch(8, 0, 60)) is None           # producers are independent


def test_epochs(log):
    state = ProducerStateManager("/nonexistent")
    appended(state, log, 7, 3, 0, 5)
    with pytest.raises(InvalidProducerEpochError, match="fenced") as err:
        state.check(batch(7, 2, 5))
    assert (err.value.epoch, err.value.current_epoch) == (2, 3)
    with pytest.raises(InvalidProducerEpochError):
        state.check(batch(7, 2, 0, 5))                    # not a duplicate in another epoch
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 4"):
        state.check(batch(7, 4, 5))
    assert state.check(batch(7, 4, 0)) is None
    appended(state, log, 7, 4, 0, 2)
    assert state.producers[7].epoch == 4 and len(state.producers[7].batches) == 1
    assert state.check(batch(7, 4, 2)) is None


def test_sequence_wraps_after_int32_max(log):
    state = ProducerStateManager("/nonexistent")
    first = appended(state, log, 7, 0, INT32_MAX - 4, 10)
    assert state.producers[7].last_seq == 4
    assert state.check(batch(7, 0, 5)) is None
    assert state.check(batch(7, 0, INT32_MAX - 4, 10)).first_offset == first.base_offset


def test_only_client_appends_are_judged(log):
    state = ProducerStateManager("/nonexistent")
    appended(state, log, 7, 3, 0, 5)
    for origin in (AppendOrigin.LOCAL, AppendOrigin.REPLICATION, "replication"):
        assert state.check(batch(7, 1, 99), origin) is None
        assert state.check(batch(7, 3, 0, 5), origin) is None


def test_update_uses_the_assigned_offset_and_validated_batches():
    state = ProducerStateManager("/nonexistent")
    data = build_batch([b"a", b"b", b"c"], producer_id=11, producer_epoch=1, base_sequence=0,
                       timestamp=77)
    (validated,) = validate_batches(data)
    assert state.check(validated) is None
    state.update(validated, first_offset=500)
    assert state.end_offset == 503
    assert state.check(validated) == BatchMetadata(0, 2, 500, 502, 77)
    state.update(batch(-1, -1, -1, 4, base=503))           # no producer: the end moves
    assert state.end_offset == 507 and set(state.producers) == {11}


def test_control_batches_move_the_epoch_only(log):
    state = ProducerStateManager("/nonexistent")
    appended(state, log, 7, 0, 0, 3)
    state.update(log.append(7, 1, -1, 1, control=True), marker=log.markers[3])
    entry = state.producers[7]
    assert entry.epoch == 1 and not entry.batches
    with pytest.raises(OutOfOrderSequenceError):
        state.check(batch(7, 1, 3))
    assert state.check(batch(7, 1, 0)) is None


def test_remove_expired(log):
    state = ProducerStateManager("/nonexistent")
    appended(state, log, 1, 0, 0, 1, ts=1_000)
    appended(state, log, 2, 0, 0, 1, ts=5_000)
    assert state.remove_expired(now_ms=6_000, expiration_ms=5_000) == 1
    assert set(state.producers) == {2}


# -- snapshots ----------------------------------------------------------------------------------

def kafka_decode(data):
    """Kafka's PRODUCER_SNAPSHOT v1 read from its documented schema, independently of
    kqlite: [(producer_id, epoch, last_seq, last_offset, offset_delta, timestamp,
    coordinator_epoch, current_txn_first_offset)]."""
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert version == 1
    assert crc == crcmod.predefined.mkPredefinedCrcFun("crc-32c")(data[6:])
    entries = [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(count)]
    assert 10 + 46 * count == len(data)
    return entries


def kafka_encode(entries):
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e)
                                                      for e in entries)
    crc = crcmod.predefined.mkPredefinedCrcFun("crc-32c")(body)
    return struct.pack(">hI", 1, crc) + body


def test_snapshot_is_kafkas_file(tmp_path, log):
    state = ProducerStateManager(str(tmp_path))
    for seq in range(0, 70, 10):
        appended(state, log, 7, 2, seq, 10)
    appended(state, log, 9, 0, 0, 1)
    state.update(log.append(12, 5, -1, 1, control=True, coordinator_epoch=4),
                 marker=log.markers[71])
    path = state.take_snapshot()
    assert os.path.basename(path) == "00000000000000000072.snapshot" == snapshot_name(72)
    entries = kafka_decode(open(path, "rb").read())
    # Kafka's reader keeps the last entry of each producer id: its newest batch.
    newest = {e[0]: e for e in entries}
    assert newest == {
        7: (7, 2, 69, 69, 9, 1_060, -1, -1),
        9: (9, 0, 0, 70, 0, 1_070, -1, -1),
        12: (12, 5, -1, -1, 0, 1_071, 4, -1),    # the marker's coordinator epoch
    }
    assert [e[3] for e in entries if e[0] == 7] == [29, 39, 49, 59, 69]   # the whole window


def test_snapshot_round_trip_keeps_the_duplicate_window(tmp_path, log):
    state = ProducerStateManager(str(tmp_path))
    sent = [appended(state, log, 7, 2, seq, 10) for seq in range(0, 50, 10)]
    state.take_snapshot()
    reloaded = ProducerStateManager.load(str(tmp_path), 0, log.end, log.batches)
    assert log.asked == [log.end]                  # nothing before the snapshot is read
    assert reloaded.end_offset == log.end
    for header in sent:
        assert reloaded.check(batch(7, 2, header.base_sequence, 10)).first_offset == \
            header.base_offset
    assert reloaded.check(batch(7, 2, 50)) is None


def test_a_kafka_snapshot_is_a_window_of_one(tmp_path):
    (tmp_path / snapshot_name(40)).write_bytes(kafka_encode([
        (7, 2, 39, 39, 9, 1_000, -1, -1), (8, 0, -1, -1, 0, 900, 3, -1)]))
    state = ProducerStateManager.load(str(tmp_path), 0, 40, lambda offset: iter(()))
    assert list(state.producers[7].batches) == [BatchMetadata(30, 39, 30, 39, 1_000)]
    assert state.producers[8].epoch == 0 and not state.producers[8].batches
    assert state.check(batch(7, 2, 30, 10)).last_offset == 39
    assert state.check(batch(7, 2, 40)) is None


def test_load_replays_after_the_newest_snapshot(tmp_path, log):
    state = ProducerStateManager(str(tmp_path))
    appended(state, log, 7, 0, 0, 5)
    state.take_snapshot()
    appended(state, log, 7, 0, 5, 5)
    appended(state, log, 8, 0, 0, 5)
    state.take_snapshot(log.end + 3)               # batches without producers filled the gap
    appended(state, log, 7, 0, 10, 5)
    reloaded = ProducerStateManager.load(str(tmp_path), 0, log.end, log.batches)
    assert log.asked == [18]
    assert reloaded.producers[7].last_seq == 14 and reloaded.producers[8].last_seq == 4
    assert reloaded.check(batch(7, 0, 0, 5)).first_offset == 0
    assert reloaded.snapshot_offsets() == [5, 18]


def test_corrupt_snapshots_fall_back(tmp_path, log, caplog):
    state = ProducerStateManager(str(tmp_path))
    appended(state, log, 7, 0, 0, 5)
    state.take_snapshot()
    appended(state, log, 7, 0, 5, 5)
    newest = state.take_snapshot()
    with open(newest, "r+b") as f:
        f.seek(20)
        f.write(b"\xff")
    with caplog.at_level(logging.WARNING, logger="kqlite.storage"):
        reloaded = ProducerStateManager.load(str(tmp_path), 0, log.end, log.batches)
    assert "CRC mismatch" in caplog.text and not os.path.exists(newest)
    assert log.asked == [5]                        # the older snapshot, then a replay
    assert reloaded.producers[7].last_seq == 9
    for damage in (b"\x00\x02" + b"\x00" * 8, b"\x00\x01", b""):   # version, size
        (tmp_path / snapshot_name(5)).write_bytes(damage)
        reloaded = ProducerStateManager.load(str(tmp_path), 0, log.end, log.batches)
        assert log.asked[-1] == 0                  # nothing usable: the whole log
        assert reloaded.producers[7].last_seq == 9 and reloaded.snapshot_offsets() == []


def test_truncation_forgets_truncated_batches(tmp_path, log):
    state = ProducerStateManager(str(tmp_path))
    appended(state, log, 7, 0, 0, 5)
    state.take_snapshot()
    appended(state, log, 7, 0, 5, 5)
    appended(state, log, 8, 0, 0, 5)
    state.take_snapshot()
    appended(state, log, 7, 0, 10, 5)
    log.truncate(10)
    state.truncate(0, 10, log.batches)
    assert state.snapshot_offsets() == [5]         # the snapshot at 15 described cut batches
    assert state.end_offset == 10 and set(state.producers) == {7}
    assert state.producers[7].last_seq == 9
    assert state.check(batch(7, 0, 10, 5)) is None            # no longer a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        state.check(batch(7, 0, 15))
    state.truncate(0, 10, log.batches)       # nothing to forget: nothing re-read
    assert log.asked == [5]
    log.append(7, 0, 10, 5)
    state.reload(0, 10, log.batches)         # headers past log_end are not used
    assert state.producers[7].last_seq == 9 and state.end_offset == 10


def test_catch_up_with_appends_and_truncations_of_another_process(tmp_path, log):
    state = ProducerStateManager(str(tmp_path))
    appended(state, log, 7, 0, 0, 5)
    log.append(7, 0, 5, 5)                         # written by another process
    log.append(-1, -1, -1, 3)
    log.append(8, 0, 0, 2)
    state.catch_up(0, log.end, log.batches)
    assert log.asked == [5] and state.end_offset == 15
    assert state.producers[7].last_seq == 9 and state.producers[8].last_seq == 1
    assert state.check(batch(7, 0, 5, 5)).first_offset == 5
    state.catch_up(0, log.end, log.batches)  # nothing new: nothing read
    log.append(-1, -1, -1, 4)                      # this process's own Log.append
    state.advance(log.end)
    state.advance(3)                               # (never backwards)
    state.catch_up(0, log.end, log.batches)
    assert log.asked == [5] and state.end_offset == 19
    log.truncate(10)
    state.catch_up(0, log.end, log.batches)   # the other process truncated
    assert state.end_offset == 10 and set(state.producers) == {7}
    state.catch_up(6, log.end, log.batches)
    assert state.end_offset == 10 and state.producers[7].last_seq == 9


def test_log_start_moves_and_full_truncation(tmp_path, log):
    state = ProducerStateManager(str(tmp_path))
    for seq in range(0, 20, 5):
        appended(state, log, 7, 0, seq, 5)
        state.take_snapshot()
    assert state.snapshot_offsets() == [10, 15, 20]           # the newest three are kept
    state.on_log_start_moved(16)
    assert state.snapshot_offsets() == [20] and state.producers[7].last_seq == 19
    reloaded = ProducerStateManager.load(str(tmp_path), 25, 30, lambda offset: iter(()))
    assert reloaded.snapshot_offsets() == [] and not reloaded.producers   # below the start
    assert reloaded.end_offset == 30
    state.take_snapshot()
    state.truncate_fully(100)
    assert state.snapshot_offsets() == [] and not state.producers and state.end_offset == 100


def test_take_snapshot_rules(tmp_path, log):
    state = ProducerStateManager(str(tmp_path), keep_snapshots=1)
    appended(state, log, 7, 0, 0, 5)
    assert state.take_snapshot(5)
    assert state.take_snapshot(5) is None                     # already there
    with pytest.raises(ValueError, match="already includes batches up to offset 4"):
        state.take_snapshot(4)
    state.take_snapshot(9)
    assert state.snapshot_offsets() == [9]
    state.delete_snapshots_before(10)
    assert state.snapshot_offsets() == []
    with pytest.raises(ValueError):
        ProducerStateManager(str(tmp_path), keep_snapshots=0)


def test_files_go_through_the_file_system_seam(tmp_path, log):
    class Recording(OsFileSystem):
        def __init__(self):
            self.calls = []

        def rename(self, src, dst):
            self.calls.append(("rename", os.path.basename(src), os.path.basename(dst)))
            super().rename(src, dst)

        def remove(self, path):
            self.calls.append(("remove", os.path.basename(path)))
            super().remove(path)

    fs = Recording()
    (tmp_path / (snapshot_name(3) + ".tmp")).write_bytes(b"half")   # a crash mid-snapshot
    state = ProducerStateManager.load(str(tmp_path), 0, 0, log.batches, fs=fs)
    appended(state, log, 7, 0, 0, 5)
    state.take_snapshot()
    assert fs.calls == [("remove", snapshot_name(3) + ".tmp"),
                        ("rename", snapshot_name(5) + ".tmp", snapshot_name(5))]
    assert sorted(os.listdir(tmp_path)) == [snapshot_name(5)]


def test_decode_snapshot_rejects_what_is_not_a_snapshot():
    good = kafka_encode([(7, 2, 39, 39, 9, 1_000, -1, -1)])
    assert set(decode_snapshot(good)) == {7}
    for bad in (good[:-1], good + b"\x00", b"\x00\x01" + good[2:6] + b"\xff" * 4 + good[10:],
                b"\x00\x03" + good[2:], b"\x00"):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)


# -- transactions ---------------------------------------------------------------------------------

def txn_header(base, count, pid, epoch, seq, ts=1_000):
    return header_for(base, base + count - 1, ts, pid, epoch, seq, count, is_transactional=True)


def test_snapshot_with_open_transactions_is_kafkas_bytes(tmp_path):
    """Packed by hand from Kafka's PRODUCER_SNAPSHOT schema: producer 7 (epoch 2) has a
    transaction open since offset 10 after a marker of coordinator epoch 5; producer 8's
    is open since 12; producer 9 has none."""
    state = ProducerStateManager(str(tmp_path))
    state.update(txn_header(0, 5, 7, 2, 0))
    state.complete_txn(state.update(header_for(5, 5, 1_005, 7, 2, -1, 1, is_control=True),
                                    marker=EndTransactionMarker(COMMIT, 5)))
    state.update(txn_header(10, 2, 7, 2, 5, ts=1_010))
    state.update(txn_header(12, 1, 8, 0, 0, ts=1_012))
    state.update(header_for(13, 13, 1_013, 9, 4, 0, 1))
    path = state.take_snapshot()
    assert open(path, "rb").read() == kafka_encode([
        (7, 2, 4, 4, 4, 1_000, 5, 10),       # the window: every entry carries the txn
        (7, 2, 6, 11, 1, 1_010, 5, 10),
        (8, 0, 0, 12, 0, 1_012, -1, 12),
        (9, 4, 0, 13, 0, 1_013, -1, -1),
    ])
    # The first transaction is decided, but holds the LSO until its marker is replicated.
    assert state.first_unstable_offset() == 0
    assert state.first_unstable_offset(high_watermark=14) == 10
    assert state.ongoing_transactions() == [(7, 10), (8, 12)]


def test_a_kafka_snapshot_with_an_open_transaction_reopens_it(tmp_path):
    (tmp_path / snapshot_name(20)).write_bytes(kafka_encode([
        (7, 2, 6, 19, 1, 1_000, 5, 14), (8, 1, -1, -1, 0, 900, 3, -1)]))
    state = ProducerStateManager.load(str(tmp_path), 0, 20, lambda offset: iter(()))
    assert state.ongoing_transactions() == [(7, 14)]
    assert state.first_unstable_offset() == 14
    entry = state.producers[7]
    assert (entry.coordinator_epoch, entry.current_txn_first_offset) == (5, 14)
    assert state.producers[8].coordinator_epoch == 3
    # Its marker, replayed, decides it; the high watermark then passes the marker.
    replay = [(header_for(20, 20, 1_100, 7, 2, -1, 1, is_control=True),
               EndTransactionMarker(COMMIT, 5))]
    state.catch_up(0, 21, lambda offset: iter(replay))
    assert state.ongoing_transactions() == [] and state.first_unstable_offset() == 14
    assert state.first_unstable_offset(high_watermark=21) is None


def test_check_all_judges_each_batch_after_the_ones_before_it():
    """One append of several batches (a follower's, an application's copy): a marker
    closes the transaction a batch before it opened, so a plain batch after it passes;
    the same batches in another order do not."""
    state = ProducerStateManager("/nonexistent")
    opened = txn_header(0, 2, 7, 0, 0)
    marker = header_for(2, 2, 1_002, 7, 0, -1, 1, is_control=True)
    plain = header_for(3, 3, 1_003, 7, 0, 2, 1)
    ended = EndTransactionMarker(COMMIT, 0)
    for origin in AppendOrigin:
        state.check_all([opened, marker, plain], origin, NO_VERIFICATION,
                        [None, ended, None])
    with pytest.raises(InvalidTxnStateError):
        state.check_all([opened, plain], AppendOrigin.REPLICATION)
    assert state.producers == {}                     # judging changes nothing
