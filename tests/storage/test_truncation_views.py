"""A log's view of its files across a truncation, with the write lock kept, threads and
several handles: what a zombie leader's partition goes through when it becomes a
follower (it appended client batches alone, truncates back to the new leader's epoch,
then appends the leader's batches with their offsets).

The bug these pin down (found by ``tests/faults/test_zombies.py``): a truncation of a
log whose producer state was loaded reloads that state from the batch headers, and
reading them refreshed the handle from the shared state record, which still described
the log before the truncation (it is published at the end of the write). The handle
took back the old size and generation, published them, and the next append landed at
the old end of the file, past a hole of zeros: ``CorruptRecordError: invalid batch
header`` once the log was reopened. A handle holding the write lock no longer
refreshes (sharing.py).

Also here: an fsync round (group_commit.py) that a truncation overtakes must not
move the recovery point, nor what counts as synced, past the new log end.
"""

import os
import random
import threading
import traceback

import pytest

import kqlite
from kqlite.errors import InvalidRecordError, OffsetOutOfRangeError
from kqlite.format.batch import build_batch
from kqlite.storage import Isolation
from kqlite.storage.fs import DEFAULT_FS, OsFileSystem
from kqlite.storage.verify import find_segments, verify_segment


def _idempotent(values, producer_id, base_offset=0, epoch=-1):
    return build_batch(values, base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=0, base_sequence=0, partition_leader_epoch=epoch)


def _replicated(lg, values, base_offset, epoch, producer_id):
    return lg.append_batches(_idempotent(values, producer_id, base_offset, epoch),
                             leader_epoch=epoch, assign_offsets=False, origin="replication")


def _problems(path):
    return [p for seg in find_segments(DEFAULT_FS, str(path))
            for p in verify_segment(DEFAULT_FS, seg).problems]


def _log_bytes(path):
    return sum(os.path.getsize(seg) for seg in find_segments(DEFAULT_FS, str(path)))


def _records(path):
    with kqlite.Log.open(path) as lg:
        return [(r.offset, r.value) for r in lg.read(isolation=Isolation.LOG_END)]


def test_zombie_truncates_then_follows_with_producer_state_loaded(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as lg:
        for n in range(3):                         # committed: idempotent producers
            lg.append_as_leader(_idempotent([b"v%d" % n], 100 + n), leader_epoch=0)
        lg.append_as_leader(_idempotent([b"zombie-1", b"zombie-2"], 200), leader_epoch=1)
        assert lg.truncate_to(3) == 3
        assert lg.end_offset == 3
        assert lg.segments == [0] and lg.size == os.path.getsize(
            find_segments(DEFAULT_FS, str(path))[0])
        _replicated(lg, [b"f3", b"f4"], 3, 2, 300)
        assert lg.end_offset == 5
        assert lg.active_producers()[-1][0] == 300
    assert _problems(path) == []
    assert _records(path) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"f3"), (4, b"f4")]


def test_other_handle_and_reopen_agree_after_truncation_and_follow(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as lg, kqlite.Log.open(path) as other:
        lg.append_as_leader(_idempotent([b"a", b"b"], 1), leader_epoch=0)
        other.append_as_leader(_idempotent([b"zombie"], 2), leader_epoch=1)
        lg.truncate_to(2)                          # lg's producer state reloads here
        _replicated(lg, [b"c"], 2, 2, 3)
        assert [(r.offset, r.value) for r in other.read(isolation=Isolation.LOG_END)] == \
            [(0, b"a"), (1, b"b"), (2, b"c")]
        other.append_as_leader(_idempotent([b"d"], 4), leader_epoch=2)
        assert lg.end_offset == 4
    assert _problems(path) == []
    assert _records(path) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


@pytest.mark.parametrize("segment_bytes", [1 << 20, 700])
def test_truncations_racing_appends_and_reads_keep_the_files_whole(tmp_path, segment_bytes):
    """Client appends on one handle, truncations followed by replicated appends (as a
    follower after a diverging epoch) on another, each in its own
    thread, and a thread looking at each handle; small segments add rolls and
    truncations across segments. Afterwards
    every batch and index entry on disk is valid, the files have no hole and the
    offsets are dense; no thread saw an error other than the expected refusals."""
    path = tmp_path / "t-0"
    rng = random.Random(15)
    seeds = [rng.randrange(1 << 30) for _ in range(4)]
    errors = []
    epoch = [0]
    stop = threading.Event()
    with kqlite.Log.open(path, segment_bytes=segment_bytes) as lg, \
            kqlite.Log.open(path, segment_bytes=segment_bytes) as other:

        def guarded(fn):
            def run(seed):
                try:
                    fn(random.Random(seed))
                except Exception:      # noqa: BLE001 -- reported by the test
                    errors.append(traceback.format_exc())
                    stop.set()
            return run

        @guarded
        def clients(r):
            for n in range(300):
                if stop.is_set():
                    return
                lg.append_as_leader(_idempotent([b"c%d" % n] * r.randint(1, 3), 1000 + n),
                                    leader_epoch=epoch[0])

        @guarded
        def follower(r):
            for n in range(120):
                if stop.is_set():
                    return
                end = other.end_offset
                start = other.start_offset
                target = r.randint(max(start, end - 6), end)
                end = other.truncate_to(target)
                epoch[0] += 1
                try:
                    _replicated(other, [b"f%d" % n] * r.randint(1, 3), end, epoch[0],
                                5000 + n)
                except InvalidRecordError:
                    pass      # a client append got in first: its base is now behind

        @guarded
        def reader(r):
            # On the truncating handle: a read on another handle may still walk a file
            # the truncation just cut (reads.py refreshes once per call).
            while not stop.is_set():
                end = other.end_offset
                try:
                    list(other.read(max(0, end - 10), isolation=Isolation.LOG_END))
                    list(other.batch_headers(max(0, end - 10)))
                except OffsetOutOfRangeError:
                    pass      # truncated below the offset meanwhile

        @guarded
        def looker(r):
            # On the appending handle, between its writes (the write lock kept or handed
            # over): refreshes, and the producer state read under the write lock.
            while not stop.is_set():
                assert lg.start_offset <= lg.end_offset
                lg.active_producers()

        writers = [threading.Thread(target=clients, args=(seeds[0],)),
                   threading.Thread(target=follower, args=(seeds[1],))]
        reading = [threading.Thread(target=reader, args=(seeds[2],)),
                   threading.Thread(target=looker, args=(seeds[3],))]
        for t in writers + reading:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in reading:
            t.join()
        assert not errors, "\n".join(errors)
        end = lg.end_offset
        assert other.end_offset == end
    assert _problems(path) == []
    recs = _records(path)
    assert [o for o, _ in recs] == list(range(end))
    with kqlite.Log.open(path) as lg:
        assert lg.size == _log_bytes(path)


class _SyncHookFS(OsFileSystem):
    """The real file system, calling ``hook()`` once, in the thread of the first fsync of
    a segment file after ``arm()``, before that fsync."""

    def __init__(self):
        self.hook = None

    def arm(self, hook):
        self.hook = hook

    def open(self, path, create=False):
        file = super().open(path, create)
        return _HookedFile(file, self) if path.endswith(".log") else file


class _HookedFile:
    def __init__(self, file, fs):
        self._file, self._fs = file, fs

    def __getattr__(self, name):
        return getattr(self._file, name)

    def sync(self):
        hook, self._fs.hook = self._fs.hook, None
        if hook is not None:
            hook()
        self._file.sync()


def test_truncation_during_an_fsync_round_keeps_the_marks_below_the_log_end(tmp_path):
    fs = _SyncHookFS()
    path = tmp_path / "t-0"
    with kqlite.Log.open(path, fs=fs) as lg:
        for n in range(6):
            lg.append([b"r%d" % n])
        cut = []

        def truncate_meanwhile():
            # The round noted its target (6) and syncs outside the log's lock; the
            # truncation's own flush waits for it, so wait for the cut only.
            t = threading.Thread(target=lg.truncate_to, args=(3,))
            t.start()
            cut.append(t)
            while lg.next_offset != 3:
                t.join(0.001)

        fs.arm(truncate_meanwhile)
        lg.flush()
        cut[0].join()
        assert lg.next_offset == 3
        assert lg.recovery_point <= 3
        assert lg._synced_offset <= 3
        lg.append([b"s3", b"s4"])
        assert lg.recovery_point <= 3      # the new records are not synced yet
        lg.flush()
        assert lg.recovery_point == lg._synced_offset == 5
    assert _records(path) == [(0, b"r0"), (1, b"r1"), (2, b"r2"), (3, b"s3"), (4, b"s4")]
