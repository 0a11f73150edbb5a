"""Several processes on one log directory, as docs/log.md promises (SQLite-like concurrency).

- 4 writer processes append 10,000 records each at the same time: exactly 40,000
  records come out, offsets 0..39999 dense and unique, each writer's records once
  and in its own order.
- A reader process with one Log kept open sees the writers' records as they land,
  without reopening, never a gap or a duplicate.
- Writers with fsync="always" / flush.messages (their fsync path writes the shared
  state too) lose nothing of each other's.
- A writer killed with SIGKILL in the middle of appending never wedges the log:
  another process appends within seconds and the offsets stay dense. Random kills,
  plus kills at chosen points inside the locked part of an append (through the
  file-system seam, ``Log.open(fs=...)``): half a batch written, a whole batch but no
  shared-state update, all but the unlock; in the active segment and in a segment the
  dying append had just rolled.

Processes are started with the 'spawn' context, so no kqlite state (open files,
locks) is inherited from the test process.
"""

import multiprocessing
import os
import random
import signal
import time

import pytest

import kqlite

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX only")

CTX = multiprocessing.get_context("spawn")
# Small segments so that writers roll segments under each other's feet.
CONFIG = {"segment.bytes": 64 * 1024, "index.interval.bytes": 1024, "lock.timeout.ms": 20000}


def value(writer, seq):
    return b"w%d:%d" % (writer, seq)


def parse(v):
    writer, seq = v[1:].split(b":")
    return int(writer), int(seq)


# -- Child process bodies (module level so that 'spawn' can import them) -----------------------

def _writer(path, writer, count, seed, ready, go, options=None):
    rng = random.Random(seed)
    with kqlite.Log.open(path, CONFIG, **(options or {})) as log:
        ready.release()
        go.wait(30)
        seq = 0
        while seq < count:
            if rng.random() < 0.5:
                log.append(value(writer, seq))                       # a single record
                seq += 1
            else:
                n = min(rng.randint(2, 8), count - seq)              # a small batch
                kind = rng.random()
                if kind < 0.7:
                    log.append([value(writer, s) for s in range(seq, seq + n)])
                else:
                    log.append([kqlite.Record(key=b"k%d" % writer, value=value(writer, s),
                                              headers=[("w", b"%d" % writer)])
                                for s in range(seq, seq + n)])
                seq += n


def _reader(path, total, ready, go, results, deadline_s):
    """Keep one Log open and poll it; report (error or None, records seen, polls with news)."""
    try:
        with kqlite.Log.open(path, CONFIG) as log:
            ready.set()
            go.wait(30)
            nxt = 0
            last_seq = {}
            growing_polls = 0
            deadline = time.monotonic() + deadline_s
            while nxt < total and time.monotonic() < deadline:
                got = 0
                for rec in log.read(nxt):
                    if rec.offset != nxt:
                        raise AssertionError(f"expected offset {nxt}, got {rec.offset}")
                    w, s = parse(rec.value)
                    if s != last_seq.get(w, -1) + 1:
                        raise AssertionError(f"writer {w}: seq {s} after {last_seq.get(w)}")
                    last_seq[w] = s
                    nxt += 1
                    got += 1
                if got:
                    growing_polls += 1
                else:
                    time.sleep(0.001)
            results.put((None, nxt, growing_polls, log.end_offset))
    except BaseException as exc:  # report, do not hang the parent
        results.put((f"{type(exc).__name__}: {exc}", -1, 0, -1))


def _endless_writer(path, writer, started):
    """Append forever (until killed); records are numbered so the survivors can be checked."""
    rng = random.Random(writer)
    with kqlite.Log.open(path, CONFIG) as log:
        seq = 0
        while True:
            n = rng.choice([1, 1, 2, 5, 20, 300])
            pad = rng.choice([None, b"p" * 1000])   # big appends widen the window to die in
            log.append([kqlite.Record(key=pad, value=value(writer, s))
                        for s in range(seq, seq + n)])
            seq += n
            if seq >= 20:
                started.set()


class _DyingFile:
    """A file of _DyingFS: passes everything through until its file system is armed."""

    def __init__(self, inner, fs):
        self._inner, self._fs = inner, fs

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def pwrite(self, data, pos):
        point, path = self._fs.armed, self._inner.path
        if point == "mid-batch-write" and path.endswith(".log"):
            self._inner.pwrite(bytes(data)[:len(data) // 2], pos)
            os.kill(os.getpid(), signal.SIGKILL)
        if point == "before-state-write" and self._fs.wrote_log and path.endswith("-state"):
            os.kill(os.getpid(), signal.SIGKILL)
        self._inner.pwrite(data, pos)
        if point and path.endswith(".log"):
            self._fs.wrote_log = True
        if point == "after-state-write" and self._fs.wrote_log and path.endswith("-state"):
            os.kill(os.getpid(), signal.SIGKILL)


class _DyingFS:
    """The file-system seam (Log.open(fs=...)) that SIGKILLs its own process at a crash
    point, always while the append lock is held."""

    def __init__(self, inner):
        self._inner = inner
        self.armed = None
        self.wrote_log = False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def open(self, path, create=False):
        return _DyingFile(self._inner.open(path, create), self)


def _die_at(path, point, roll):
    from kqlite.storage.fs import DEFAULT_FS
    fs = _DyingFS(DEFAULT_FS)
    # With ``roll`` the fatal append does not fit in the active segment (64 KiB): the
    # writer dies after creating the new segment, before the shared state names it.
    pad = b"p" * 2000 if roll else None
    with kqlite.Log.open(path, CONFIG, fs=fs) as log:
        log.append([value(99, 0), value(99, 1)])
        fs.armed = point
        log.append([kqlite.Record(key=pad, value=value(99, s)) for s in range(2, 40)])
    raise AssertionError("still alive")


def _append_one(path, writer, results):
    try:
        t0 = time.monotonic()
        with kqlite.Log.open(path, CONFIG, lock_timeout_ms=5000) as log:
            offset = log.append(value(writer, 0))
            end = log.end_offset
        results.put((None, offset, end, time.monotonic() - t0))
    except BaseException as exc:
        results.put((f"{type(exc).__name__}: {exc}", -1, -1, -1))


# -- Helpers -------------------------------------------------------------------------------------

def join_all(procs, timeout):
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join(5)
    assert not alive, f"{len(alive)} process(es) still running after {timeout} s"
    assert [p.exitcode for p in procs] == [0] * len(procs)


def run_writers(path, count, seeds, extra=(), options=None):
    """Start one writer process per seed, let them all open the log, then release them
    together so that they really append at the same time; wait for them to finish."""
    ready, go = CTX.Semaphore(0), CTX.Event()
    procs = [CTX.Process(target=_writer, args=(path, w, count, seed, ready, go, options))
             for w, seed in enumerate(seeds)]
    for p in procs:
        p.start()
    for _ in procs:
        assert ready.acquire(timeout=30), "a writer did not start"
    go.set()
    for e in extra:
        e.set()
    join_all(procs, 50)


def check_writers(records, writers, counts=None):
    """Dense offsets from 0; each writer's seqs 0..n-1 exactly once, in order."""
    assert [r.offset for r in records] == list(range(len(records)))
    seqs = {w: [] for w in writers}
    for r in records:
        w, s = parse(r.value)
        seqs[w].append(s)
    for w in writers:
        expected = counts[w] if counts else len(seqs[w])
        assert seqs[w] == list(range(expected)), f"writer {w}"
    return seqs


# -- Tests ---------------------------------------------------------------------------------------

def test_four_concurrent_writers(tmp_path):
    path = str(tmp_path / "data" / "mp-0")
    with kqlite.Log.open(path, CONFIG):
        pass                                  # create the data dir before the race
    run_writers(path, 10_000, seeds=range(4))
    with kqlite.Log.open(path, CONFIG) as log:
        assert (log.start_offset, log.end_offset) == (0, 40_000)
        records = list(log.read())
        assert len(log.segments) > 5           # the writers rolled segments under each other
    assert len(records) == 40_000
    check_writers(records, range(4), {w: 10_000 for w in range(4)})
    assert len({r.value for r in records}) == 40_000
    keyed = [r for r in records if r.key is not None]
    assert keyed and all(r.headers == (("w", r.key[1:]),) for r in keyed)
    # They really ran at the same time: the log switches writer many times.
    switches = sum(1 for a, b in zip(records, records[1:]) if a.value[:3] != b.value[:3])
    assert switches > 100


def test_concurrent_writers_with_fsync_always_and_flush_messages(tmp_path):
    """The fsync paths write the shared state too (recovery point): they must never put
    an older view of the log back (that once cut other writers' acknowledged records)."""
    path = str(tmp_path / "data" / "mp-0")
    with kqlite.Log.open(path, CONFIG):
        pass
    run_writers(path, 600, seeds=[7, 8], options={"fsync": "always"})
    run_writers(path, 600, seeds=[9, 10], options={"flush_messages": 3})
    with kqlite.Log.open(path, CONFIG) as log:
        records = list(log.read())
    assert len(records) == 2400
    assert [r.offset for r in records] == list(range(2400))
    # Writer ids restart at 0 in the second round: each id has seqs 0..599 twice, in order.
    for w in (0, 1):
        assert [parse(r.value)[1] for r in records if parse(r.value)[0] == w] == \
            list(range(600)) * 2


def test_reader_sees_new_records_without_reopening(tmp_path):
    path = str(tmp_path / "data" / "mp-0")
    writers, per_writer = 3, 3000
    total = writers * per_writer
    with kqlite.Log.open(path, CONFIG):
        pass
    reader_ready, reader_go = CTX.Event(), CTX.Event()
    results = CTX.Queue()
    reader = CTX.Process(target=_reader,
                         args=(path, total, reader_ready, reader_go, results, 40))
    reader.start()
    assert reader_ready.wait(30)
    run_writers(path, per_writer, seeds=[100 + w for w in range(writers)], extra=[reader_go])
    error, seen, growing_polls, end = results.get(timeout=45)
    join_all([reader], 10)
    assert error is None, error
    assert seen == total and end == total
    assert growing_polls > 1                  # it saw records arrive while they were written
    with kqlite.Log.open(path, CONFIG) as log:
        check_writers(list(log.read()), range(writers), {w: per_writer for w in range(writers)})


@pytest.mark.parametrize("others_open", [False, True],
                         ids=["recovery-by-next-opener", "log-held-open-elsewhere"])
def test_writer_killed_mid_append_does_not_wedge_the_log(tmp_path, others_open, soak):
    """SIGKILL a writer at random moments while it appends in a loop; each time another
    process must append within a few seconds and the log must stay dense.

    With ``others_open`` the test process keeps a Log open the whole time, so the dead
    writer's torn tail is cut by the next writer; without it the next opener is alone
    and runs crash recovery.
    """
    path = str(tmp_path / "data" / "mp-0")
    rng = random.Random(7)
    kills = 32 if soak else 5
    held = kqlite.Log.open(path, CONFIG) if others_open else None
    counts = {}
    try:
        for i in range(kills):
            writer = 10 + i
            started = CTX.Event()
            child = CTX.Process(target=_endless_writer, args=(path, writer, started))
            child.start()
            assert started.wait(30), "writer never started"
            time.sleep(rng.uniform(0, 0.05))
            os.kill(child.pid, signal.SIGKILL)
            child.join(10)
            assert child.exitcode == -signal.SIGKILL

            # Another process appends, under a short lock timeout so a wedge shows as an error.
            results = CTX.Queue()
            other = CTX.Process(target=_append_one, args=(path, 1000 + i, results))
            other.start()
            error, offset, end, elapsed = results.get(timeout=30)
            join_all([other], 10)
            assert error is None, error
            assert elapsed < 5 and end == offset + 1
            counts[1000 + i] = 1

            if held is not None:
                assert held.end_offset == end
                assert held.append(value(2000 + i, 0)) == end
                counts[2000 + i] = 1
            with kqlite.Log.open(path, CONFIG) as log:
                records = list(log.read())
                assert log.end_offset == len(records)
            seqs = check_writers(records, {parse(r.value)[0] for r in records})
            counts[writer] = len(seqs[writer])
            assert counts[writer] >= 20        # what it had acknowledged before `started`
    finally:
        if held is not None:
            held.close()
    with kqlite.Log.open(path, CONFIG) as log:
        records = list(log.read())
        assert log.append(b"after") == len(records)
    check_writers(records, counts, counts)


@pytest.mark.parametrize("roll", [False, True], ids=["same-segment", "after-roll"])
@pytest.mark.parametrize("point", ["mid-batch-write", "before-state-write", "after-state-write"])
@pytest.mark.parametrize("others_open", [False, True],
                         ids=["recovery-by-next-opener", "log-held-open-elsewhere"])
def test_writer_killed_at_crash_points_while_holding_the_lock(tmp_path, point, others_open,
                                                             roll):
    """The same, at chosen crash points inside the locked part of an append: half a batch
    on disk; a whole batch but no shared-state update; everything but the unlock; each
    in the active segment and in a segment the dying append had just rolled."""
    path = str(tmp_path / "data" / "mp-0")
    held = kqlite.Log.open(path, CONFIG) if others_open else None
    try:
        child = CTX.Process(target=_die_at, args=(path, point, roll))
        child.start()
        child.join(30)
        assert child.exitcode == -signal.SIGKILL

        results = CTX.Queue()
        other = CTX.Process(target=_append_one, args=(path, 1, results))
        other.start()
        error, offset, end, elapsed = results.get(timeout=30)
        join_all([other], 10)
        assert error is None, error
        assert elapsed < 5
        if point == "mid-batch-write":
            assert offset == 2                 # the torn batch is gone, its offsets reused
        elif point == "after-state-write":
            assert offset == 40                # it was in the shared state: it stays
        else:
            assert offset in (2, 40)           # never acknowledged: either is fine
        if held is not None:
            assert held.end_offset == offset + 1
            assert [r.offset for r in held.read()] == list(range(offset + 1))
            assert held.append(b"w3:0") == offset + 1
            held.roll()                        # a generation change: everyone relists files
            assert held.append(b"w3:1") == offset + 2
    finally:
        if held is not None:
            held.close()
    with kqlite.Log.open(path, CONFIG) as log:
        records = list(log.read())
        assert log.append(b"w4:0") == len(records)
    counts = {99: offset, 1: 1}
    if others_open:
        counts[3] = 2
    check_writers(records, counts, counts)


@pytest.mark.parametrize("point", ["mid-batch-write", "before-state-write"])
def test_segment_rolled_by_a_dead_writer_does_not_resurface(tmp_path, point):
    """A writer dies right after rolling a new segment, before the shared state names it.
    The log held open elsewhere appends next (to the segment the state names), rolls, and
    later a reader and a fresh opener must see one dense log, with nothing skipped or
    duplicated and nothing acknowledged lost."""
    path = str(tmp_path / "data" / "mp-0")
    with kqlite.Log.open(path, CONFIG) as held:
        child = CTX.Process(target=_die_at, args=(path, point, True))
        child.start()
        child.join(30)
        assert child.exitcode == -signal.SIGKILL
        first = held.append(b"w3:0")
        assert first in (2, 40)
        held.roll()
        held.append([b"w3:1", b"w3:2"])
        end = held.end_offset
        assert end == first + 3
        with kqlite.Log.open(path, CONFIG) as reader:   # not alone: no recovery
            assert [r.offset for r in reader.read()] == list(range(end))
            assert [r.offset for r in reader.read(first)] == [first, first + 1, first + 2]
        assert [r.offset for r in held.read()] == list(range(end))
    with kqlite.Log.open(path, CONFIG) as log:          # alone: recovery
        assert log.end_offset == end
        records = list(log.read())
    check_writers(records, {99: first, 3: 3}, {99: first, 3: 3})
