"""The storage methods replication uses (Kafka's UnifiedLog.truncateTo,
maybeAssignEpochStartOffset and truncateFullyAndStartAt), each under the write lock
with a shared-generation bump, so another process with the log open sees the change
without reopening.

- truncate_to cuts the leader-epoch cache at the offset even when no record goes;
  as a property: after any appends in epochs and any truncation, no epoch entry starts
  at or past the truncation offset and the log end never exceeds it;
- assign_epoch_start writes ``leader-epoch-checkpoint`` as Kafka does (version line,
  count line, ``epoch startOffset`` lines) and another process sees the new epoch;
- truncate_fully_and_start_at leaves one empty segment at the new offset, which is
  the log start, log end and high watermark; no epoch, no producer, no snapshot; a
  reopen and another process agree.
"""

import multiprocessing
import os

from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite
from kqlite.format.batch import build_batch
from kqlite.storage import Isolation

CTX = multiprocessing.get_context("spawn")


def _epoch_file(path):
    with open(os.path.join(path, "leader-epoch-checkpoint")) as f:
        return f.read()


def _assign_in_child(path, epoch, start):
    with kqlite.Log.open(path) as lg:
        lg.assign_epoch_start(epoch, start)


def _run_child(target, *args):
    proc = CTX.Process(target=target, args=args)
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0


# -- truncate_to ------------------------------------------------------------------------------

def test_truncate_to_at_the_log_end_still_cuts_the_epoch_cache(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as lg, kqlite.Log.open(path) as other:
        lg.append([b"a", b"b"], leader_epoch=1)
        lg.assign_epoch_start(2, 2)           # a leader epoch opened, nothing appended
        assert lg.truncate_to(2) == 2         # no record goes...
        assert lg.epochs.entries == [(1, 0)]  # ...but the epoch starting there does
        assert other.end_offset == 2          # another handle catches up on its next look
        assert other.epochs.entries == [(1, 0)]
    assert _epoch_file(path) == "0\n1\n1 0\n"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1, max_size=6),
       cut=st.integers(0, 30))
def test_truncate_to_never_leaves_an_epoch_at_or_past_the_offset(tmp_path_factory, runs, cut):
    path = tmp_path_factory.mktemp("prop") / "t-0"
    with kqlite.Log.open(path) as lg:
        epoch = 0
        boundaries = [0]                                    # where each batch ends
        for step, count in runs:
            epoch += step                                   # epochs never go down
            lg.append([b"x"] * count, leader_epoch=epoch)
            boundaries.append(boundaries[-1] + count)
        before = lg.end_offset
        end = lg.truncate_to(cut)
        # Whole batches go: the end is the last batch boundary at or below the offset.
        assert end == max(b for b in boundaries if b <= min(cut, before))
        assert all(start < cut for _e, start in lg.epochs.entries)
        if end < before:                  # records went: the cache follows the new end
            assert all(start < end for _e, start in lg.epochs.entries)
        assert [r.offset for r in lg.read(isolation=Isolation.LOG_END)] == list(range(end))
    with kqlite.Log.open(path) as again:
        assert again.end_offset == end
        assert all(start < cut for _e, start in again.epochs.entries)


# -- assign_epoch_start -----------------------------------------------------------------------

def test_assign_epoch_start_is_written_as_kafka_writes_it(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as lg:
        lg.append([b"a", b"b", b"c"], leader_epoch=0)
        assert lg.assign_epoch_start(3, 3) is True
        assert lg.assign_epoch_start(3, 3) is False       # already there
        assert lg.assign_epoch_start(2, 3) is False       # older than the latest
        assert _epoch_file(path) == "0\n2\n0 0\n3 3\n"
        lg.append([b"d"], leader_epoch=3)                 # the epoch is known: no new entry
        assert lg.epochs.entries == [(0, 0), (3, 3)]


def test_another_process_sees_an_assigned_epoch_without_reopening(tmp_path):
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as lg:
        lg.append([b"a", b"b"], leader_epoch=1)
        assert lg.epochs.entries == [(1, 0)]
        _run_child(_assign_in_child, path, 4, 2)
        assert lg.end_offset == 2             # catching up reloads the cache
        assert lg.epochs.entries == [(1, 0), (4, 2)]
        lg.append([b"c"], leader_epoch=4)
        assert lg.epochs.end_offset_for(1, lg.end_offset) == (1, 2)


# -- truncate_fully_and_start_at --------------------------------------------------------------

def test_truncate_fully_and_start_at(tmp_path):
    path = tmp_path / "t-0"
    idempotent = build_batch([b"p0", b"p1"], producer_id=7, producer_epoch=0, base_sequence=0)
    with kqlite.Log.open(path, segment_bytes=1024) as lg, kqlite.Log.open(path) as other:
        for i in range(40):
            lg.append([b"v%03d" % i] * 3, leader_epoch=i // 10)
        lg.append_as_leader(idempotent, leader_epoch=4)
        assert len(lg.segments) > 2 and lg.active_producers()
        lg.roll()                                     # a producer snapshot at the roll
        assert any(n.endswith(".snapshot") for n in os.listdir(path))
        assert lg.truncate_fully_and_start_at(500) == 500
        assert (lg.start_offset, lg.end_offset, lg.high_watermark) == (500, 500, 500)
        assert lg.segments == [500]
        assert lg.epochs.entries == [] and _epoch_file(path) == "0\n0\n"
        assert lg.active_producers() == []
        assert not any(n.endswith(".snapshot") for n in os.listdir(path))
        assert sorted(n for n in os.listdir(path) if n.endswith(".log")) == \
            ["00000000000000000500.log"]
        # The other handle forgets every segment it knew.
        assert (other.start_offset, other.end_offset) == (500, 500)
        assert list(other.read(isolation=Isolation.LOG_END)) == []
        lg.append([b"after"], leader_epoch=9)
        assert [r.value for r in other.read(500, isolation=Isolation.LOG_END)] == [b"after"]
        # The sequence the producer had is gone: it starts over like a new one.
        again = build_batch([b"p2"], producer_id=7, producer_epoch=0, base_sequence=0)
        assert lg.append_as_leader(again, leader_epoch=9).first_offset == 501
    with kqlite.Log.open(path) as reopened:
        assert (reopened.start_offset, reopened.end_offset) == (500, 502)
        assert reopened.epochs.entries == [(9, 500)]


def test_truncate_fully_and_start_at_an_offset_a_segment_had(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as lg:
        lg.append([b"a", b"b"], leader_epoch=0)
        assert lg.truncate_fully_and_start_at(0) == 0
        assert (lg.start_offset, lg.end_offset, lg.segments) == (0, 0, [0])
        assert list(lg.read(isolation=Isolation.LOG_END)) == []
