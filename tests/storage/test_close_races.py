"""A Log closed, truncated or evicted by one thread while other threads read it.

The rule under test (kqlite/storage/log.py, docs/log.md "Sharing a log"): a read of a
Log that another thread closes either completes on the files it started with or
raises LogClosedError; it never touches a closed descriptor (EBADF), nor one that a
later open reused (another file's bytes). A read racing a truncation or a retention
deletion answers from the log before or after it, or raises OffsetOutOfRangeError
when its offset left the log. A write racing a truncation must not fail the log: the
group-commit round fsyncs segments outside the Log's thread lock, and a truncation,
a deletion or a close that drops one of them meanwhile must leave its descriptor open
until the round is done.

Every record written here names its log and its offset (``_value``), and every read
checks the records it got against that, so a read through a reused descriptor, which
would return another file's records, fails as surely as an EBADF does. The readers
use every public read of a Log. The interpreter's switch interval is lowered so that
threads interleave at a fine grain, as on a loaded machine.

The bug these pin down: ``tests/cluster/test_fetcher.py`` failed on a loaded machine
with ``OSError: [Errno 9] Bad file descriptor`` from ``Log.end_offset``: it checked
that the log was open before taking the thread lock, and the close ran in between.

Each scenario runs for :func:`_duration` seconds: about two in the default run, thirty
with ``--soak``.
"""

import itertools
import os
import random
import sys
import threading
import time
import traceback

import pytest

import kqlite
from kqlite.errors import (InvalidRecordError, LogClosedError, OffsetOutOfRangeError)
from kqlite.format.batch import build_batch, decode_records, parse_header
from kqlite.storage import Isolation
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.verify import find_segments, verify_segment

# Small segments: rolls, and segments for retention and truncation to delete, every few
# appends.
_CONFIG = {"segment.bytes": 8192, "segment.index.bytes": 4096, "index.interval.bytes": 512}
_READERS = 3


def _duration(soak):
    return 30.0 if soak else 2.0


@pytest.fixture(autouse=True)
def _fine_grained_switches():
    """Hand the GIL over every 10 us instead of every 5 ms, so that a close lands
    between any two steps of a read."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def _value(tag, offset):
    """The record written at ``offset`` of the log ``tag``: its length varies (up to 2
    KiB) so that segments roll every few records."""
    return b"%s@%d;" % (tag, offset) + b"-" * (offset * 89 % 2048)


def _batch(tag, base, count):
    return build_batch([_value(tag, base + i) for i in range(count)], base_offset=base)


class _Race:
    """The threads of one scenario, the failures they saw and what they read."""

    def __init__(self, seconds, closes_wanted=0):
        now = time.monotonic()
        self.deadline = now + seconds
        # On a loaded machine the threads may not have overtaken each other often enough
        # by the deadline: the race goes on (up to four times as long) until they have.
        self.hard_deadline = now + 4 * seconds
        self.closes_wanted = closes_wanted
        self.failures = []
        self.records_checked = 0
        self.closed_seen = 0
        # Odd while a truncation runs; moved on by each one (the cutter is its only writer).
        self.cuts = 0
        self._threads = []
        self._lock = threading.Lock()

    def running(self):
        if self.failures:
            return False
        now = time.monotonic()
        return now < self.deadline or (now < self.hard_deadline and
                                       self.closed_seen < self.closes_wanted)

    def start(self, name, body, *args):
        def run():
            try:
                body(*args)
            except BaseException:       # anything a thread dies of is a failure
                self.fail(name)
        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def fail(self, what):
        with self._lock:
            self.failures.append(f"{what}:\n{traceback.format_exc()}")

    def count(self, records=0, closed=0):
        with self._lock:
            self.records_checked += records
            self.closed_seen += closed

    def join(self):
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), f"{thread.name} did not finish"
        assert not self.failures, "\n".join(self.failures[:3])


# -- Checking what a read returns -----------------------------------------------------------

def _check(tag, records, after=None):
    """Each record must be the one written at its offset; offsets rise (from ``after``
    on, when given). Returns how many were checked."""
    prev = -1 if after is None else after - 1
    n = 0
    for rec in records:
        assert rec.offset > prev, f"offset {rec.offset} after {prev}"
        assert rec.value == _value(tag, rec.offset), (rec.offset, rec.value)
        prev = rec.offset
        n += 1
    return n


def _check_batches(tag, data, at):
    """Raw whole batches (read_batches, a fetch region): each decodes, CRC checked, to the
    records written at its offsets, the first one holding or following ``at``."""
    view, pos, n = memoryview(data), 0, 0
    while pos < len(data):
        header = parse_header(view, pos)
        assert pos + header.size <= len(data), "a partial batch"
        assert n or header.last_offset >= at, (at, header.base_offset, header.last_offset)
        n += _check(tag, decode_records(data, pos))
        pos += header.size
    return n


def _read_one_way(lg, tag, rng, race):
    """One public read of ``lg`` at a random offset, its answer checked; returns the
    records it checked."""
    start, end = lg.start_offset, lg.end_offset
    assert lg.size >= 0 and lg.segments and lg.high_watermark >= 0
    at = rng.randint(start, max(start, end))     # a truncation may have come in between
    way = rng.randrange(10)
    if way == 0:
        return _check(tag, lg.read(at, max_records=rng.choice((1, 50, 500))), at)
    if way == 1:
        # A long read: its iterator takes the thread lock again at every step, and the
        # log may be closed or cut in between.
        return _check(tag, itertools.islice(lg.read(at), 3000), at)
    if way == 2:
        rec = lg.read_one(at)
        if rec is None:
            return 0
        assert rec.offset == at
        return _check(tag, [rec])
    if way == 3:
        return _check(tag, lg.fetch_records(at, 20), at)
    if way == 4:
        return _check_batches(tag, lg.read_batches(at, 16384), at)
    if way == 5:
        cuts = race.cuts
        region = lg.fetch_region(at, 16384)
        if region is None:
            return 0
        fd, position, length = region
        try:
            data = os.pread(fd, length, position)
        finally:
            os.close(fd)
        if cuts % 2 or race.cuts != cuts:
            # A truncation cut the segment's file in place while the region was read
            # (and appends may have written other batches there): a region is a view of
            # the file, as Kafka's FileRecords slice is, not a copy.
            return 0
        assert len(data) == length     # the duplicate keeps a deleted segment readable
        return _check_batches(tag, data, at)
    if way == 6:
        found = lg.offset_for_time(rng.choice((0, int(time.time() * 1000) - 50)))
        assert found is None or found >= 0
        return 0
    if way == 7:
        last = -1
        for header in itertools.islice(lg.batch_headers(at, isolation=Isolation.LOG_END),
                                       200):
            assert header.base_offset > last and header.last_offset >= header.base_offset
            last = header.last_offset
        return 0
    if way == 8:
        offset, ts = lg.max_timestamp()
        assert (offset, ts) == (-1, -1) or offset >= 0
        return 0
    rec = lg.read_one(at, isolation=Isolation.LOG_END)
    return 0 if rec is None else _check(tag, [rec])


def _reader(race, current, tag, seed, closing_expected):
    """Read the log ``current()`` answers, several reads per handle, so that a close or
    an eviction overtakes some; LogClosedError is expected only where the scenario closes
    logs under their readers."""
    rng = random.Random(seed)
    while race.running():
        lg = current()
        try:
            for _ in range(rng.randint(1, 20)):
                race.count(records=_read_one_way(lg, tag, rng, race))
        except LogClosedError:
            if not closing_expected:
                raise
            race.count(closed=1)
        except OffsetOutOfRangeError:
            pass        # the offset was in the log when chosen, and left it before the read


def _append_at_end(lg, tag, count):
    """Append ``count`` records at the log end as this thread sees it: their values name
    their offsets. A truncation that moves the end meanwhile leaves a gap (allowed: a
    replica keeps its leader's offsets) or refuses the batch (InvalidRecordError, when a
    full truncation moved the end past it)."""
    base = lg.end_offset
    try:
        lg.append_batches(_batch(tag, base, count), assign_offsets=False)
    except InvalidRecordError:
        pass


def _check_on_disk(path, tag):
    """After the race: every segment is sound and every record is the one written there."""
    problems = [p for seg in find_segments(DEFAULT_FS, str(path))
                for p in verify_segment(DEFAULT_FS, seg).problems]
    assert problems == []
    with kqlite.Log.open(path, _CONFIG) as lg:
        _check(tag, lg.read(isolation=Isolation.LOG_END))


# -- Close ----------------------------------------------------------------------------------

def test_reads_racing_close_raise_log_closed_or_answer_correctly(tmp_path, soak):
    """One thread keeps replacing the Log: it opens a new handle on the directory and
    closes the old one, whose readers are still at work (the follower of
    tests/cluster/log_follower.py once did this; LogManager eviction does it too). The
    writer appends through whichever handle is current."""
    path = tmp_path / "t-0"
    tag = b"close"
    # Retention keeps the log to a few segments, so that opening a handle stays cheap.
    config = dict(_CONFIG, **{"retention.bytes": 64 * 1024})
    handle = [kqlite.Log.open(path, config)]
    _append_at_end(handle[0], tag, 50)
    race = _Race(_duration(soak), closes_wanted=20)

    def writer():
        rng = random.Random(3)
        while race.running():
            try:
                _append_at_end(handle[0], tag, rng.randint(1, 40))
                handle[0].enforce_retention()
            except LogClosedError:
                pass        # it took the handle just before it was replaced

    def closer():
        rng = random.Random(7)
        while race.running():
            time.sleep(rng.uniform(0.0005, 0.01))
            old = handle[0]
            handle[0] = kqlite.Log.open(path, config)
            old.close()

    race.start("writer", writer)
    race.start("closer", closer)
    for i in range(_READERS):
        race.start(f"reader-{i}", _reader, race, lambda: handle[0], tag, i, True)
    race.join()
    handle[0].close()
    assert race.records_checked > 0 and race.closed_seen > 0
    _check_on_disk(path, tag)


def test_closing_a_log_from_four_threads_at_once(tmp_path):
    """Every close returns without error, and the log is then closed to every read."""
    path = tmp_path / "t-0"
    for _ in range(20):
        lg = kqlite.Log.open(path, _CONFIG)
        _append_at_end(lg, b"four", 10)
        errors = []

        def close():
            try:
                lg.close()
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=close) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with pytest.raises(LogClosedError):
            lg.read_one(0)
        with pytest.raises(LogClosedError):
            lg.end_offset
    _check_on_disk(path, b"four")


# -- Truncation and retention ---------------------------------------------------------------

def test_reads_racing_truncation_and_retention(tmp_path, soak):
    """A writer appends with ``fsync="always"`` (so group-commit rounds fsync segments
    outside the thread lock), while another thread truncates the log
    (``truncate_to``, ``truncate_fully_and_start_at``), deletes records and enforces
    retention, each of which closes segment files. Nothing closes the Log: a reader
    never sees LogClosedError, and the writer never sees the log fail."""
    path = tmp_path / "t-0"
    tag = b"cut"
    lg = kqlite.Log.open(path, _CONFIG, fsync="always", retention_bytes=64 * 1024)
    _append_at_end(lg, tag, 50)
    race = _Race(_duration(soak))

    def writer():
        rng = random.Random(3)
        while race.running():
            _append_at_end(lg, tag, rng.randint(1, 40))

    def cutter():
        rng = random.Random(5)
        while race.running():
            time.sleep(rng.uniform(0, 0.005))
            start, end = lg.start_offset, lg.end_offset
            action = rng.randrange(4)
            try:
                if action == 0:
                    race.cuts += 1
                    lg.truncate_to(rng.randint(start, max(start, end)))
                elif action == 1:
                    race.cuts += 1
                    lg.truncate_fully_and_start_at(end + rng.choice((0, 7)))
                elif action == 2:
                    lg.delete_records(rng.randint(start, max(start, lg.high_watermark)))
                else:
                    lg.enforce_retention()
            except OffsetOutOfRangeError:
                pass    # the writer moved the bounds since they were read
            finally:
                race.cuts += race.cuts % 2

    race.start("writer", writer)
    race.start("cutter", cutter)
    for i in range(_READERS):
        race.start(f"reader-{i}", _reader, race, lambda: lg, tag, i, False)
    race.join()
    lg.close()
    assert race.records_checked > 0
    _check_on_disk(path, tag)


# -- Eviction -------------------------------------------------------------------------------

def test_reads_racing_lru_eviction(tmp_path, soak):
    """A Database keeping two logs open serves six partitions: every lease of another
    partition evicts an idle log. A reader inside a lease is never closed under; a
    reader that keeps the Log after its lease ended (as ``Database.logs.open_logs()``
    hands logs out, with no lease) sees LogClosedError once the log is evicted, never a
    closed descriptor."""
    partitions = 6
    race = _Race(_duration(soak), closes_wanted=20)
    with kqlite.open(tmp_path / "db", max_open_logs=2) as db:
        db.create_topic("t", partitions, config=_CONFIG)
        tags = [b"p%d" % p for p in range(partitions)]
        for p in range(partitions):
            with db.leased_log("t", p) as lg:
                _append_at_end(lg, tags[p], 30)

        def writer(owned):
            rng = random.Random(owned[0])
            while race.running():
                p = rng.choice(owned)
                with db.leased_log("t", p) as lg:
                    _append_at_end(lg, tags[p], rng.randint(1, 30))

        def leased_reader(seed):
            rng = random.Random(seed)
            while race.running():
                p = rng.randrange(partitions)
                with db.leased_log("t", p) as lg:
                    for _ in range(rng.randint(1, 5)):
                        race.count(records=_read_one_way(lg, tags[p], rng, race))

        def unleased_reader(seed):
            rng = random.Random(seed)
            while race.running():
                p = rng.randrange(partitions)
                with db.leased_log("t", p) as lg:
                    pass
                kept = lg           # read on after the lease: eviction may close it
                try:
                    for _ in range(rng.randint(1, 20)):
                        race.count(records=_read_one_way(kept, tags[p], rng, race))
                except LogClosedError:
                    race.count(closed=1)

        race.start("writer-0", writer, [0, 1, 2])
        race.start("writer-1", writer, [3, 4, 5])
        race.start("leased-reader", leased_reader, 11)
        for i in range(2):
            race.start(f"unleased-reader-{i}", unleased_reader, 20 + i)
        race.join()
        assert race.records_checked > 0 and race.closed_seen > 0
    for p in range(partitions):
        _check_on_disk(tmp_path / "db" / f"t-{p}", tags[p])

