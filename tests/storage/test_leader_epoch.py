"""OffsetsForLeaderEpoch answers from the leader-epoch cache, case by case as Kafka's
LeaderEpochFileCache.endOffsetFor answers them (KIP-101, KIP-279)."""

import pytest

import kqlite


@pytest.fixture
def log(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as lg:
        lg.append([b"a", b"b"], leader_epoch=3)    # epoch 3 from offset 0
        lg.append([b"c"], leader_epoch=5)          # epoch 5 from offset 2
        lg.append([b"d", b"e"], leader_epoch=7)    # epoch 7 from offset 3
        yield lg


@pytest.mark.parametrize("requested, answer", [
    (7, (7, 5)),     # the latest epoch ends at the log end
    (5, (5, 3)),     # a known older epoch ends where the next one starts
    (6, (5, 3)),     # an unknown epoch between two: the largest known below it
    (4, (3, 2)),
    (2, (2, 0)),     # below every known epoch: itself, at the first known start
    (8, (-1, -1)),   # above the latest: undefined
    (-1, (-1, -1)),  # no epoch asked
])
def test_end_offset_for(log, requested, answer):
    assert log.epochs.entries == [(3, 0), (5, 2), (7, 3)]
    assert log.epochs.end_offset_for(requested, log.end_offset) == answer


def test_an_empty_cache_knows_no_epoch(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as lg:
        lg.append(b"no epoch")
        assert lg.epochs.end_offset_for(0, lg.end_offset) == (-1, -1)
