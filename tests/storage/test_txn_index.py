"""The ``.txnindex`` file: 34-byte AbortedTxn entries equal to bytes packed by hand from
Kafka's layout (both directions), and Kafka's TransactionIndexTest cases."""

import struct

import pytest

from kqlite.errors import CorruptRecordError
from kqlite.storage.fs import OsFileSystem
from kqlite.storage.txn_index import (ENTRY, AbortedTxn, TransactionIndex, decode_entries,
                                      encode_entries)

FS = OsFileSystem()


def packed(producer_id, first, last, lso, version=0):
    """AbortedTxn as Kafka lays it out: int16 version, int64 producerId, int64 firstOffset,
    int64 lastOffset, int64 lastStableOffset, big-endian."""
    return struct.pack(">h", version) + struct.pack(">qqqq", producer_id, first, last, lso)


def index(tmp_path, base=0):
    return TransactionIndex(FS, str(tmp_path / f"{base:020d}.txnindex"), base)


def test_an_entry_is_34_bytes_of_kafkas_layout_both_ways(tmp_path):
    # docs/format.md's worked example: producer 4242 aborted [1000, 1075], LSO 1076.
    entry = AbortedTxn(4242, 1000, 1075, 1076)
    raw = packed(4242, 1000, 1075, 1076)
    assert ENTRY.size == len(raw) == 34
    assert encode_entries([entry]) == raw
    assert raw.hex() == ("0000" "0000000000001092" "00000000000003e8" "0000000000000433"
                         "0000000000000434")
    assert decode_entries(raw) == [entry]
    idx = index(tmp_path)
    idx.append(entry)
    assert (tmp_path / "00000000000000000000.txnindex").read_bytes() == raw


def test_the_file_is_created_at_the_first_entry(tmp_path):
    idx = index(tmp_path, 100)
    assert not idx.exists and idx.entries() == []
    idx.reset()
    assert not idx.exists                     # forgetting nothing creates nothing
    idx.append(AbortedTxn(1, 100, 105, 106))
    assert idx.exists


def test_last_offset_must_increase(tmp_path):
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 0, 10, 11))
    for last in (10, 9):          # testLastOffsetMustIncrease, testLastOffsetCannotDecrease
        with pytest.raises(ValueError, match="not above the last offset 10"):
            idx.append(AbortedTxn(2, 5, last, 11))
    assert idx.entries() == [AbortedTxn(1, 0, 10, 11)]


def test_collect_aborted_transactions(tmp_path):
    """TransactionIndexTest.testCollectAbortedTransactions: entries overlapping
    [fetch offset, upper bound), complete once an entry's LSO reaches the bound."""
    idx = index(tmp_path)
    entries = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
               AbortedTxn(3, 32, 50, 40)]
    for e in entries:
        idx.append(e)
    assert idx.collect(0, 100) == (entries, False)
    assert idx.collect(0, 32) == (entries[:3], True)
    assert idx.collect(11, 32) == (entries[1:3], True)
    assert idx.collect(0, 5) == (entries[:1], True)       # LSO 11 >= 5: stop there


def test_truncate(tmp_path):
    idx = index(tmp_path)
    entries = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25),
               AbortedTxn(3, 32, 50, 40)]
    for e in entries:
        idx.append(e)
    idx.truncate_to(50)
    assert idx.entries() == entries[:3]
    idx.truncate_to(20)
    assert idx.entries() == entries[:2]
    assert (tmp_path / "00000000000000000000.txnindex").read_bytes() == encode_entries(entries[:2])
    reread = index(tmp_path)
    assert reread.entries() == entries[:2]


def test_sanity_check(tmp_path):
    """testSanityCheck: an entry whose marker lies below the segment's base is insane; so
    is a file that ends inside an entry."""
    path = tmp_path / f"{100:020d}.txnindex"
    path.write_bytes(packed(0, 90, 99, 100))
    assert not index(tmp_path, 100).sane()
    path.write_bytes(packed(0, 90, 100, 101))
    assert index(tmp_path, 100).sane()
    path.write_bytes(packed(0, 90, 100, 101) + b"\x00" * 10)
    assert not index(tmp_path, 100).sane()
    assert index(tmp_path, 100).entries() == [AbortedTxn(0, 90, 100, 101)]


def test_the_version_is_read_from_the_first_byte(tmp_path):
    raw = packed(3, 0, 10, 11, version=0x0100)         # first byte 1
    with pytest.raises(CorruptRecordError, match="aborted transaction version 1"):
        decode_entries(raw)
    # Kafka reads the int16's first byte only: 0x00 0x07 is version 0.
    assert decode_entries(packed(3, 0, 10, 11, version=7)) == [AbortedTxn(3, 0, 10, 11)]


def test_another_process_appended_entries_are_read_after_invalidate(tmp_path):
    writer, reader = index(tmp_path), index(tmp_path)
    assert reader.entries() == []
    writer.append(AbortedTxn(1, 0, 4, 5))
    assert reader.entries() == []               # kept until the segment changes
    reader.invalidate()
    assert reader.entries() == [AbortedTxn(1, 0, 4, 5)]


def test_delete_and_sync(tmp_path):
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 0, 4, 5))
    assert idx.dirty
    idx.sync()
    assert not idx.dirty
    idx.delete()
    assert not (tmp_path / "00000000000000000000.txnindex").exists() and idx.entries() == []
