"""AT-03/04/05 beyond tests/storage/test_recovery.py: corrupt bytes on disk are cut (in
a torn tail) or reported (below the acknowledged end), never returned as data.

Covered here and not there: garbage on the .timeindex too and on the indexes of
closed segments (Kafka's testCorruptLog shape), zero-filled tails of every awkward
length and zeros *replacing* the last batch (ext4 delayed allocation), zero-filled
preallocated index files, and a bit flip at every bit of one small batch (header and
records) in a closed segment: every read either returns exactly the records that
were appended or raises CorruptRecordError naming the file and a position inside the
damaged batch; records before it still read.
"""

import os
import random
import shutil

import pytest

import kqlite
from kqlite.errors import CorruptRecordError

STATE = ".kqlite-state"
T0 = 1_700_000_000_000


def rec(i):
    return kqlite.Record(key=b"k%d" % i, value=b"value-%d" % i, timestamp=T0 + i,
                         headers=[("i", b"%d" % i)])


def same(r, i):
    return (r.offset, r.key, r.value, r.timestamp, r.headers) == \
        (i, b"k%d" % i, b"value-%d" % i, T0 + i, (("i", b"%d" % i),))


def write_records(path, n, per_batch=1, **config):
    with kqlite.Log.open(path, **config) as log:
        for i in range(0, n, per_batch):
            log.append([rec(j) for j in range(i, min(n, i + per_batch))])


def check_all(log, n):
    recs = list(log.read())
    assert log.end_offset == n
    assert len(recs) == n and all(same(r, i) for i, r in enumerate(recs))


def files(path, suffix):
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(suffix))


def append_bytes(name, data):
    with open(name, "ab") as f:
        f.write(data)


# -- Kafka's testCorruptLog, with every file of the segment and closed segments too ---------------

@pytest.mark.parametrize("run", range(10))
def test_random_garbage_on_every_segment_file(tmp_path, run):
    rnd = random.Random(1000 + run)
    path = str(tmp_path / "t-0")
    config = {"segment_bytes": 1000, "index_interval_bytes": 1}
    n = rnd.randint(50, 99)
    write_records(path, n, **config)
    with kqlite.Log.open(path, **config) as log:
        times = [log.offset_for_time(T0 + t) for t in range(-1, n + 1, 3)]
    logs = files(path, ".log")
    assert len(logs) >= 3
    active = logs[-1][:-4]
    for suffix in (".log", ".index", ".timeindex"):           # the active segment
        append_bytes(active + suffix, rnd.randbytes(rnd.randint(1, 1024)))
    closed = rnd.choice(logs[:-1])[:-4]                         # and a closed one's indexes
    for suffix in (".index", ".timeindex"):
        append_bytes(closed + suffix, rnd.randbytes(rnd.randint(1, 1024)))
    os.remove(os.path.join(path, STATE))                        # unclean shutdown
    with kqlite.Log.open(path, **config) as log:
        check_all(log, n)
        assert [log.offset_for_time(T0 + t) for t in range(-1, n + 1, 3)] == times
        assert log.append(rec(n)) == n


# -- Zeros ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("zeros", [1, 8, 11, 12, 13, 60, 61, 62, 100, 511, 512, 4096, 70_000])
def test_zero_filled_tail_of_any_length_is_cut(tmp_path, zeros):
    path = str(tmp_path / "t-0")
    write_records(path, 7, per_batch=2)
    seg = files(path, ".log")[-1]
    size = os.path.getsize(seg)
    append_bytes(seg, bytes(zeros))
    os.remove(os.path.join(path, STATE))
    with kqlite.Log.open(path) as log:
        check_all(log, 7)
        assert [r.truncated_bytes for r in log.recovery_reports] == [zeros]
    assert os.path.getsize(seg) == size


@pytest.mark.parametrize("kept", [0, 1, 2])
def test_last_batches_replaced_by_zeros_are_cut(tmp_path, kept):
    """ext4 delayed allocation: the file length covers blocks never written (zeros)."""
    path = str(tmp_path / "t-0")
    write_records(path, 6, per_batch=2)
    seg = files(path, ".log")[-1]
    with kqlite.Log.open(path) as log:
        batch = len(log.read_batches(0, max_bytes=1))
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.seek(batch * kept)
        f.write(bytes(size - batch * kept))
    os.remove(os.path.join(path, STATE))
    with kqlite.Log.open(path) as log:
        check_all(log, 2 * kept)
        assert log.recovery_reports[0].truncated_bytes == size - batch * kept
        assert log.append(rec(2 * kept)) == 2 * kept


@pytest.mark.parametrize("clean", [True, False])
def test_zero_filled_preallocated_indexes_are_rebuilt(tmp_path, clean):
    """Kafka preallocates index files with zeros; a crash can leave them that way."""
    path = str(tmp_path / "t-0")
    config = {"segment_bytes": 600, "index_interval_bytes": 100}
    write_records(path, 30, **config)
    originals = {f: open(f, "rb").read() for f in files(path, "index")}
    for f in originals:
        append_bytes(f, bytes(4096 * 3))            # a multiple of both entry sizes
    if not clean:
        os.remove(os.path.join(path, STATE))
    with kqlite.Log.open(path, **config) as log:
        check_all(log, 30)
        assert [next(iter(log.read(o))).offset for o in range(30)] == list(range(30))
        assert log.offset_for_time(T0 + 17) == 17
    for f, data in originals.items():
        assert open(f, "rb").read() == data, f


def test_empty_log_file_is_an_empty_log(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 0 + 1)
    for f in files(path, ".log"):
        os.truncate(f, 0)
    os.remove(os.path.join(path, STATE))
    with kqlite.Log.open(path) as log:
        assert (log.start_offset, log.end_offset) == (0, 0)
        assert list(log.read()) == []
        assert log.append(rec(0)) == 0


# -- A bit flip at every bit of one batch in a closed segment -----------------------------------

def flip_template(tmp_path, config):
    """A log of 2-record batches whose first segment is closed; returns (path, n, segment
    file, batch start, batch size, first offset of the batch)."""
    path = str(tmp_path / "template" / "t-0")
    n = 24
    write_records(path, n, per_batch=2, **config)
    seg = files(path, ".log")[0]
    assert len(files(path, ".log")) >= 2
    with kqlite.Log.open(path, **config) as log:
        size = len(log.read_batches(0, max_bytes=1))
    return path, n, seg, 2 * size, size, 4          # the third batch: offsets 4 and 5


def read_outcome(log, start, n):
    """'ok' if reading from ``start`` returns exactly the records appended; the
    CorruptRecordError if it raises one; a description of wrong data otherwise."""
    try:
        recs = list(log.read(start))
    except CorruptRecordError as exc:
        return exc
    if len(recs) == n - start and all(same(r, start + i) for i, r in enumerate(recs)):
        return "ok"
    got = [(r.offset, r.value) for r in recs if not same(r, r.offset)] or \
        sorted(set(range(start, n)) - {r.offset for r in recs})[:5]
    return f"WRONG DATA from {start}: {got[:3]} ({len(recs)} records for {n - start})"


# Byte ranges of a v2 batch header; the CRC covers byte 21 onwards. These once let
# records vanish silently: base-offset (outside the CRC; reads now check that offsets
# rise within the segment and meet the index entries), length-and-magic and
# crc-covered (a closed segment ending early was stepped over; a read stepped over the
# batches in front of its offset by their unchecked headers: it now CRC-checks them).
FIELDS = {
    "base-offset": range(0, 8),
    "length-and-magic": [8, 9, 10, 11, 16],
    "leader-epoch": range(12, 16),
    "crc": range(17, 21),
    "crc-covered": None,        # attributes to the end of the records
}


@pytest.mark.parametrize("interval", [4096, 1], ids=["sparse-index", "index-every-batch"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_bit_flip_anywhere_in_a_batch_is_never_returned_as_data(disk, interval, field):
    positions = FIELDS[field]
    config = {"segment_bytes": 500, "index_interval_bytes": interval}
    tmp_path = disk
    template, n, seg, pos, size, first = flip_template(tmp_path, config)
    positions = range(21, size) if positions is None else positions
    name = os.path.basename(seg)
    original = open(seg, "rb").read()
    wrong = []
    for byte in positions:
        for bit in range(8):
            work = str(tmp_path / "work")
            shutil.copytree(os.path.dirname(template), work)
            path = os.path.join(work, "t-0")
            data = bytearray(original)
            data[pos + byte] ^= 1 << bit
            with open(os.path.join(path, name), "wb") as f:
                f.write(data)
            where = f"bit {bit} of byte {byte} of the batch"
            try:
                with kqlite.Log.open(path, **config) as log:
                    if log.end_offset != n:
                        wrong.append(f"{where}: log end {log.end_offset} != {n}")
                    for start in (0, first - 1, first, first + 1, first + 2, n - 1):
                        out = read_outcome(log, start, n)
                        if isinstance(out, CorruptRecordError):
                            # A damaged length can make the scanner notice a little later.
                            if out.path != os.path.join(path, name) or \
                                    not pos <= (out.position or -1) < len(original):
                                wrong.append(f"{where}: error at {out.path}:{out.position}")
                        elif out != "ok":
                            wrong.append(f"{where}: {out}")
                    before = list(log.read(0, max_offset=first))    # earlier offsets read
                    if not (len(before) == first and all(same(r, i)
                                                         for i, r in enumerate(before))):
                        wrong.append(f"{where}: offsets before the batch do not read")
            except CorruptRecordError:
                pass        # refusing to open a corrupt log is loud too
            shutil.rmtree(work)
    bad_bytes = sorted({int(w.split(" of byte ")[1].split()[0]) for w in wrong})
    assert not wrong, f"{len(wrong)} problems at bytes {bad_bytes} of a {size}-byte " \
        "batch:\n" + "\n".join(wrong[:20])


def test_integrity_check_reports_a_flip_in_a_closed_segment(tmp_path):
    """AT-05's last part: the read-only check (``kqlite check``) finds it too."""
    from kqlite.storage.fs import DEFAULT_FS
    from kqlite.storage.verify import verify_segment
    config = {"segment_bytes": 500}
    template, n, seg, pos, size, first = flip_template(tmp_path, config)
    assert verify_segment(DEFAULT_FS, seg).problems == []
    with open(seg, "r+b") as f:
        f.seek(pos + 70)
        byte = f.read(1)
        f.seek(pos + 70)
        f.write(bytes([byte[0] ^ 0x04]))
    problems = verify_segment(DEFAULT_FS, seg).problems
    assert problems and problems[0].path == seg and problems[0].position == pos
