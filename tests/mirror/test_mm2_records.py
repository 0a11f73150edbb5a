"""MM2's internal records, against bytes packed by hand from MM2's schemas (Kafka 3.9
OffsetSync.java, Checkpoint.java, Heartbeat.java: INT16 length + UTF-8 STRINGs, big-endian
integers), and records a scripted MM2-format writer made read by kqlite's translator."""

import struct

import pytest

from kqlite.mirror.mm2_records import (Checkpoint, Heartbeat, MM2RecordError, OffsetSync,
                                       checkpoints_topic, offset_syncs_topic)
from kqlite.mirror.offset_syncs import OffsetSyncStore


def test_offset_sync_bytes_are_mm2s():
    sync = OffsetSync("orders", 0, 1000, 990)
    assert sync.key().hex() == "00066f726465727300000000"
    assert sync.value().hex() == "00000000000003e800000000000003de"
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_checkpoint_bytes_are_mm2s():
    cp = Checkpoint("g1", "A.orders", 3, 120, 101, "meta")
    key = struct.pack(">h", 2) + b"g1" + struct.pack(">h", 8) + b"A.orders" + struct.pack(">i", 3)
    value = struct.pack(">hqq", 0, 120, 101) + struct.pack(">h", 4) + b"meta"
    assert cp.key() == key and cp.value() == value
    assert Checkpoint.decode(key, value) == cp


def test_heartbeat_bytes_are_mm2s():
    hb = Heartbeat("A", "B", 1_700_000_000_000)
    assert hb.key() == b"\x00\x01A\x00\x01B"
    assert hb.value() == struct.pack(">hq", 0, 1_700_000_000_000)
    assert Heartbeat.decode(hb.key(), hb.value()) == hb


def test_topic_names():
    assert offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert checkpoints_topic("A") == "A.checkpoints.internal"


@pytest.mark.parametrize("key,value", [
    (b"\x00\x02g1\x00\x01t\x00\x00\x00\x00", struct.pack(">hqq", 1, 1, 1) + b"\x00\x00"),
    (b"\x00\x02g1\x00\x01t\x00\x00", struct.pack(">hqq", 0, 1, 1) + b"\x00\x00"),
    (b"\x00\x02g1\x00\x01t\x00\x00\x00\x00", struct.pack(">hqq", 0, 1, 1) + b"\x00\x00!"),
    (b"\xff\xff\x00\x01t\x00\x00\x00\x00", struct.pack(">hqq", 0, 1, 1) + b"\x00\x00"),
], ids=["version-1", "short-key", "trailing-bytes", "null-string"])
def test_checkpoints_mm2_would_refuse_are_refused(key, value):
    with pytest.raises(MM2RecordError):
        Checkpoint.decode(key, value)


def test_a_string_length_read_as_int32_is_refused():
    # The control of the byte tests: a writer that put STRING lengths as INT32.
    key = struct.pack(">i", 6) + b"orders" + struct.pack(">i", 0)
    with pytest.raises(MM2RecordError):
        OffsetSync.decode(key, struct.pack(">qq", 1, 1))


def _mm2_writer(syncs):
    """A scripted MM2-format writer: (key, value) pairs packed from the schema alone."""
    for topic, partition, upstream, downstream in syncs:
        raw = topic.encode()
        yield (struct.pack(">h", len(raw)) + raw + struct.pack(">i", partition),
               struct.pack(">qq", upstream, downstream))


def test_offset_syncs_written_by_an_mm2_format_writer_are_translated():
    store = OffsetSyncStore()
    for key, value in _mm2_writer([("orders", 0, 0, 0), ("orders", 0, 100, 90),
                                   ("orders", 0, 250, 200)]):
        store.add(*OffsetSync.decode(key, value))
    assert store.translate("orders", 0, 100).offset == 90        # exact
    assert store.translate("orders", 0, 180).offset == 91        # after a sync: + 1
    assert store.translate("orders", 0, 260).offset == 201
    assert store.translate("orders", 1, 5).offset is None        # no sync
