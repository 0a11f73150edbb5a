"""Transactional offset commits in ``__consumer_offsets`` as the data dir's offset store
reads them (kqlite.db.offsets.CommitLog, Kafka's GroupMetadataManager load loop): pending
until the producer's COMMIT marker, dropped by its ABORT, never over a commit written
after them; plain commits applied at once; pending partitions named for require_stable."""

from kqlite.db.offsets import CommitLog
from kqlite.format.batch import build_batch, decode_batch
from kqlite.format.control_records import build_control_batch
from kqlite.format.offset_records import OffsetAndMetadata, encode_offset_key, encode_offset_value
from kqlite.format.record import Record


def commits(group, offsets):
    return [Record(key=encode_offset_key(group, t, p), value=encode_offset_value(o, "", 7))
            for (t, p), o in offsets.items()]


def batch(records, base_offset, producer_id=-1, transactional=False):
    data = build_batch(records, base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=0 if producer_id >= 0 else -1,
                       transactional=transactional)
    return decode_batch(data)


def marker(producer_id, commit, base_offset):
    return decode_batch(bytes(build_control_batch(producer_id, 0, 0, commit, 1,
                                                  base_offset=base_offset)))


def offsets_of(log, group):
    return {tp: o.offset for tp, o in log.committed(group).items()}


def test_a_transactional_commit_waits_for_its_commit_marker():
    log = CommitLog()
    log.add_batch(*batch(commits("g", {("t", 0): 5}), 0))
    log.add_batch(*batch(commits("g", {("t", 0): 9, ("t", 1): 3}), 1, 77, True))
    assert offsets_of(log, "g") == {("t", 0): 5}
    assert log.pending_partitions("g") == {("t", 0), ("t", 1)}
    assert log.pending_partitions("other") == set()
    log.add_batch(*marker(77, True, 3))
    assert offsets_of(log, "g") == {("t", 0): 9, ("t", 1): 3}
    assert log.pending_partitions("g") == set()
    assert log.committed("g")[("t", 0)] == OffsetAndMetadata(9, -1, "", 7)


def test_an_abort_marker_drops_the_pending_commits():
    log = CommitLog()
    log.add_batch(*batch(commits("g", {("t", 0): 5}), 0))
    log.add_batch(*batch(commits("g", {("t", 0): 9}), 1, 77, True))
    log.add_batch(*marker(77, False, 2))
    assert offsets_of(log, "g") == {("t", 0): 5} and log.pending_partitions("g") == set()


def test_a_commit_written_after_the_transactional_one_wins():
    # Kafka applies a pending commit at its marker only if no later batch holds the
    # partition (CommitRecordMetadataAndOffset.olderThan).
    log = CommitLog()
    log.add_batch(*batch(commits("g", {("t", 0): 9}), 0, 77, True))
    log.add_batch(*batch(commits("g", {("t", 0): 12}), 1))
    log.add_batch(*marker(77, True, 2))
    assert offsets_of(log, "g") == {("t", 0): 12}


def test_producers_are_settled_independently():
    log = CommitLog()
    log.add_batch(*batch(commits("g", {("t", 0): 1}), 0, 1, True))
    log.add_batch(*batch(commits("h", {("t", 0): 2}), 1, 2, True))
    log.add_batch(*marker(2, True, 2))
    assert offsets_of(log, "h") == {("t", 0): 2} and offsets_of(log, "g") == {}
    assert log.pending_partitions("g") == {("t", 0)}
    log.add_batch(*marker(1, False, 3))
    assert offsets_of(log, "g") == {} and log.groups() == {"h"}
