"""Compaction of transactional logs, as Kafka's LogCleaner with CleanedTransactionMetadata
(KIP-534): aborted data dropped whole, markers kept while their transaction's batches
remain, then given a delete horizon and dropped past it, ABORT entries copied into the
cleaned segment's ``.txnindex``, producers' last batches kept, never past the LSO.
LogCleanerTest's cases, in spirit."""

import os

import kqlite
from kqlite import Record
from kqlite.format import parse_header
from kqlite.format.batch import build_batch, decode_records
from kqlite.storage import Isolation
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.log import NO_VERIFICATION
from kqlite.storage.txn_index import AbortedTxn
from kqlite.storage.verify import TransactionReplay, find_segments, verify_segment

DAY = 86_400_000
T0 = 1_700_000_000_000


def open_log(path, **config):
    options = {"segment_bytes": 1 << 20, "cleanup_policy": "compact",
               "min_cleanable_dirty_ratio": 0.0}
    options.update(config)
    return kqlite.Log.open(path, **options)


class Keyed:
    """Keyed appends: a transactional producer's (its sequence running), plain ones,
    markers."""

    def __init__(self, log):
        self.log = log
        self.seq = {}

    def txn(self, pid, *keys, epoch=0, transactional=True):
        seq = self.seq.get(pid, 0)
        data = build_batch([Record(key=b"%d" % k, value=b"v%d@%d" % (k, pid), timestamp=T0)
                            for k in keys], producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq, transactional=transactional)
        self.seq[pid] = seq + len(keys)
        return self.log.append_as_leader(data, leader_epoch=0,
                                         verification_guard=NO_VERIFICATION).first_offset

    def plain(self, *keys):
        return self.log.append([Record(key=b"%d" % k, value=b"plain", timestamp=T0)
                                for k in keys])

    def end(self, pid, commit, epoch=0):
        return self.log.append_marker(pid, epoch, 0, commit, timestamp=T0)


def batches(log):
    """Every batch of the log, markers and emptied ones included: [(base, last,
    record offsets, is_control, delete horizon)]."""
    out, offset = [], log.start_offset
    while offset < log.end_offset:
        data = log.read_batches(offset, 1 << 20, isolation=Isolation.LOG_END)
        if not data:
            break
        pos = 0
        while pos < len(data):
            h = parse_header(data, pos)
            out.append((h.base_offset, h.last_offset,
                        [r.offset for r in decode_records(data, pos, h)], h.is_control,
                        h.delete_horizon_ms))
            pos += h.size
            offset = h.last_offset + 1
    return out


def record_offsets(log):
    """offsetsInLog: the offset of every record, markers' included."""
    return [o for b in batches(log) for o in b[2]]


def keys_in_log(log):
    return [r.key for r in log.read()]


def checked(path):
    """``kqlite check``'s verdict on a partition: its problems (the .txnindex entries
    compaction copied included)."""
    replay = TransactionReplay(str(path))
    return [p for seg in find_segments(DEFAULT_FS, str(path))
            for p in verify_segment(DEFAULT_FS, seg, replay=replay).problems]


def test_basic_transaction_aware_cleaning(tmp_path):
    with open_log(tmp_path / "t-0") as log:
        k = Keyed(log)
        k.txn(1, 1, 2)          # 0, 1
        k.txn(2, 2, 3)          # 2, 3
        k.txn(1, 3, 4)          # 4, 5
        k.end(1, False)         # 6
        k.end(2, True)          # 7
        k.txn(1, 2)             # 8
        k.end(1, True)          # 9
        aborted = log.aborted_transactions()
        log.roll()
        log.compact(now_ms=T0, force=True)
        assert keys_in_log(log) == [b"3", b"2"]
        assert record_offsets(log) == [3, 6, 7, 8, 9]
        assert log.aborted_transactions() == aborted == [AbortedTxn(1, 0, 6, 2)]
        assert [r.offset for r in log.read(isolation=Isolation.COMMITTED)] == [3, 8]
        assert checked(log.path) == []


def test_commit_marker_removal(tmp_path):
    """Three passes: the marker stays while a batch of its transaction was seen, then
    gets a delete horizon, then goes past it."""
    with open_log(tmp_path / "t-0") as log:
        k = Keyed(log)
        k.txn(1, 1)             # 0
        k.end(1, True)          # 1
        k.txn(1, 2)             # 2
        k.end(1, True)          # 3
        k.plain(1)              # 4: supersedes key 1
        log.roll()
        log.compact(now_ms=T0, force=True)
        # Batch 0 is gone, but this pass saw it: its marker stays as it was.
        assert [(b[0], b[3], b[4]) for b in batches(log)] == \
            [(1, True, None), (2, False, None), (3, True, None), (4, False, None)]
        log.compact(now_ms=T0, force=True)
        # Nothing of its transaction left: discardable, kept until its delete horizon.
        horizon = T0 + DAY
        assert [(b[0], b[3], b[4]) for b in batches(log)] == \
            [(1, True, horizon), (2, False, None), (3, True, None), (4, False, None)]
        log.compact(now_ms=horizon - 1, force=True)
        assert batches(log)[0][0] == 1
        log.compact(now_ms=horizon, force=True)
        assert [b[0] for b in batches(log)] == [2, 3, 4]
        assert keys_in_log(log) == [b"2", b"1"]


def test_abort_marker_removal(tmp_path):
    with open_log(tmp_path / "t-0") as log:
        k = Keyed(log)
        k.txn(1, 1, 2)          # 0, 1
        k.end(1, False)         # 2
        k.txn(1, 3)             # 3
        k.end(1, True)          # 4
        k.plain(5)              # 5
        log.roll()
        segment = log._segments[0]
        log.compact(now_ms=T0, force=True)
        # The aborted batch goes whole; its marker stays (this pass saw the batch) and
        # keeps its .txnindex entry in the cleaned segment.
        assert record_offsets(log) == [2, 3, 4, 5]
        cleaned = log._segments[0]
        assert cleaned is not segment
        assert cleaned.txnindex.entries() == [AbortedTxn(1, 0, 2, 3)]
        log.compact(now_ms=T0, force=True)
        assert batches(log)[0][4] == T0 + DAY          # discardable: a horizon
        assert log.aborted_transactions() == []        # no batch of it left to skip
        log.compact(now_ms=T0 + DAY, force=True)
        assert record_offsets(log) == [3, 4, 5]
        assert [n for n in os.listdir(log.path) if n.endswith(".txnindex")] == []
        assert checked(log.path) == []


def test_aborted_transaction_spanning_segments(tmp_path):
    """A segment cleaned on its own still knows its batches were aborted: the ABORT
    marker and its entry are in a later segment."""
    with open_log(tmp_path / "t-0", segment_bytes=200) as log:
        k = Keyed(log)
        k.txn(1, 1)             # segment 0
        log.roll()
        k.txn(1, 2)             # segment 1
        k.end(1, False)
        log.roll()
        k.plain(3)
        assert len(log.segments) == 3
        log.compact(now_ms=T0, force=True)
        assert keys_in_log(log) == [b"3"]
        assert [r.offset for r in log.read(isolation=Isolation.COMMITTED)] == [3]


def test_cleaner_retains_producer_last_sequence(tmp_path):
    """LogCleanerTest.testLogCleanerRetainsProducerLastSequence: an idempotent producer's
    last batch stays, emptied, so its sequence survives a rebuilt producer state."""
    path = tmp_path / "t-0"
    with open_log(path) as log:
        k = Keyed(log)
        k.txn(7, 1, transactional=False)      # sequence 0, offset 0
        k.plain(1)                            # supersedes it
        log.roll()
        log.compact(now_ms=T0, force=True)
        assert batches(log)[0][:3] == (0, 0, [])
    for name in os.listdir(path):
        if name.endswith(".snapshot"):
            os.remove(path / name)
    os.remove(path / ".kqlite-state")
    with open_log(path) as log:
        (producer,) = log.active_producers()
        assert (producer.producer_id, producer.last_sequence) == (7, 0)
        retry = build_batch([Record(key=b"1", value=b"x")], producer_id=7, producer_epoch=0,
                            base_sequence=0)
        assert log.append_as_leader(retry, leader_epoch=0).duplicate


def test_marker_retention_with_empty_batch(tmp_path):
    """A producer whose data is all gone keeps its last marker, emptied past its
    horizon (its epoch fences a zombie); an earlier marker of it goes."""
    with open_log(tmp_path / "t-0") as log:
        k = Keyed(log)
        k.txn(1, 1)             # 0
        k.end(1, True)          # 1
        k.plain(1)              # 2: supersedes key 1
        k.end(1, True, epoch=1)  # 3: an empty transaction's marker, the producer's last
        k.plain(9)              # 4
        log.roll()
        for now in (T0, T0, T0 + DAY, T0 + 2 * DAY):
            log.compact(now_ms=now, force=True)
        found = [(b[0], b[2], b[3]) for b in batches(log)]
        assert (3, [], True) in found
        assert all(b[0] != 1 for b in found)
        assert log.active_producers()[0].producer_epoch == 1


def test_never_past_the_last_stable_offset(tmp_path):
    with open_log(tmp_path / "t-0", segment_bytes=200) as log:
        k = Keyed(log)
        k.plain(1)
        k.plain(1)
        log.roll()
        first = k.txn(1, 1)     # open: the LSO
        log.roll()
        k.plain(1)
        log.roll()
        assert log.last_stable_offset == first
        log.compact(now_ms=T0, force=True)
        # Only the segment below the LSO's is cleaned: offset 0 goes, the rest stays.
        assert [r.offset for r in log.read()] == [1, first, first + 1]
        k.end(1, False)
        log.roll()
        log.compact(now_ms=T0, force=True)
        assert [r.offset for r in log.read()] == [first + 1]
