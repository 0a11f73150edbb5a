"""Segment.recover against the recovery it replaced, on random damaged segments.

The reference is what recovery did before the write-back was folded into its
validation walk: rebuild the indexes by a CRC-checking walk, cut the file at the
walk's stop. ``Segment.recover`` must give the same log end, bytes, indexes and
report, with or without ``write_back_from``; with it, exactly the valid batches
whose last offset is at or past that offset are written again, in place, with their
own bytes.
"""

import os
import random
import shutil

from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite
from kqlite.storage.config import LogConfig
from kqlite.storage.fs import OsFileSystem
from kqlite.storage.scan import STATUS_TEXT, SegmentWalk
from kqlite.storage.segment import Segment, segment_name

MAX_SIZE = 1 << 30
CONFIG = {"index.interval.bytes": 256}

DAMAGES = ("none", "torn_last", "bad_crc_last", "garbage_after", "zeros_after")


class RecordingFS(OsFileSystem):
    """The real file system, noting every pwrite to a ``.log`` file."""

    def __init__(self):
        self.writes = []

    def open(self, path, create=False):
        f = super().open(path, create)
        if path.endswith(".log"):
            writes = self.writes
            pwrite = f.pwrite

            class Noting(type(f)):
                __slots__ = ()

                def pwrite(self, data, pos):
                    writes.append((pos, bytes(data)))
                    pwrite(data, pos)
            f.__class__ = Noting
        return f


def build(path, batches, damage, rnd):
    """A one-segment log of ``batches`` (lists of values), then ``damage`` to its end."""
    with kqlite.Log.open(path, CONFIG) as log:
        for values in batches:
            log.append(values, timestamp=1000 + len(values))
    name = os.path.join(path, segment_name(0))
    with open(name, "rb") as f:
        data = bytearray(f.read())
    ends = [b.position + b.size for b in SegmentWalk(OsFileSystem().open(name), 0, len(data))]
    last_start = ends[-2] if len(ends) > 1 else 0
    if damage == "torn_last":
        data = data[:rnd.randrange(last_start + 1, len(data))]
    elif damage == "bad_crc_last":
        at = rnd.randrange(last_start + 21, len(data))     # past the CRC field: covered by it
        data[at] ^= 1 << rnd.randrange(8)
    elif damage == "garbage_after":
        data += bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 200)))
    elif damage == "zeros_after":
        data += bytes(rnd.randrange(1, 5000))
    with open(name, "wb") as f:
        f.write(data)


def reference_recover(seg):
    """Recovery as it was: a CRC-checking index rebuild, then the cut."""
    walk = seg.rebuild_indexes(verify_crc=True, max_size=MAX_SIZE)
    stop = walk.stop
    truncated = seg.size - stop
    if truncated:
        seg.log.truncate(stop)
        seg.size = stop
    return stop, truncated, STATUS_TEXT[walk.status] if truncated else "ok"


def outcome(seg, path):
    with open(seg.path(), "rb") as f:
        data = f.read()
    return (seg.next_offset, seg.size, seg.max_timestamp, seg.offset_of_max_timestamp,
            seg.first_batch_timestamp, bytes(seg.index.buf), bytes(seg.timeindex.buf), data)


batches_strategy = st.lists(
    st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=20),
    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(batches=batches_strategy, damage=st.sampled_from(DAMAGES), seed=st.integers(0, 2**32),
       data=st.data())
def test_recover_matches_the_reference(tmp_path_factory, batches, damage, seed, data):
    rnd = random.Random(seed)
    # None (no write-back) or an offset next to a batch boundary, where a mistake shows.
    lasts = [sum(map(len, batches[:i + 1])) - 1 for i in range(len(batches))]
    write_back = data.draw(st.one_of(st.none(), st.sampled_from(
        sorted({0, *lasts, *(x + 1 for x in lasts), *(max(0, x - 1) for x in lasts)}))))
    base = tmp_path_factory.mktemp("walk")
    original = str(base / "t-0")
    build(original, batches, damage, rnd)
    config = LogConfig(CONFIG)
    results = []
    for variant in ("reference", "recover"):
        path = str(base / variant / "t-0")
        shutil.copytree(original, path)
        fs = RecordingFS()
        seg = Segment.open(fs, path, 0, config)
        fs.writes.clear()
        if variant == "reference":
            report = reference_recover(seg)
            expected_valid = seg.size
        else:
            r = seg.recover(MAX_SIZE, write_back)
            report = (r.valid_bytes, r.truncated_bytes, r.reason)
            assert seg.tail_valid
            # What was written back: the valid batches whose last offset reaches
            # write_back, each with its own bytes at its own position.
            with open(seg.path(), "rb") as f:
                kept = f.read()
            wanted = [b for b in SegmentWalk(OsFileSystem().open(seg.path()), 0, seg.size,
                                             verify_crc=True)
                      if write_back is not None and b.last_offset >= write_back]
            written = sorted(fs.writes)
            covered = bytearray()
            for pos, data in written:
                assert data == kept[pos:pos + len(data)], "wrote bytes that differ"
                covered += data
            assert bytes(covered) == b"".join(kept[b.position:b.position + b.size]
                                              for b in wanted)
            assert r.valid_bytes == expected_valid
        results.append((report, outcome(seg, path)))
        seg.close()
    assert results[0] == results[1]
