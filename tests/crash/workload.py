"""A scripted log workload and a model of what it acknowledged, shared by the
power-loss and I/O-error loops.

The model knows, for every offset, which append put it there and how far that
append got: *acked durable* (``fsync="always"`` and append returned, or a later
``flush()`` returned), *acked* (append returned, not yet flushed: survives a
process crash but not a power cut), *maybe* (the append raised or never
returned: it may be there after a crash, but only whole and intact) or *absent*
(the append raised an error that promises it is not in the log). :func:`check`
compares a reopened log with it and returns the violations as text, so that a
negative control can assert that violations were found.
"""

import random

import kqlite
from kqlite.errors import KqliteError, LogFailedError

T0 = 1_700_000_000_000

BASE_CONFIG = {"segment_bytes": 1024, "index_interval_bytes": 200}


def make_value(tag, size, rnd):
    head = b"%s|" % tag.encode()
    body = rnd.randbytes(max(0, size - len(head)))
    return head + body


def script(seed, *, appends=(10, 6, 5, 5), sizes=(8, 180)):
    """The steps of the standard workload: fsync="always" appends with rolls from
    small segments, an explicit roll, delete_records, retention by size, close and
    reopen, then a default-mode phase acknowledged by explicit flush() calls, and a
    final close. Deterministic for a seed."""
    rnd = random.Random(seed)
    always = dict(BASE_CONFIG, fsync="always", retention_bytes=3000)
    never = dict(BASE_CONFIG, fsync="never", retention_bytes=3000)

    def some(n):
        return [("append", rnd.randint(1, 4), rnd.randint(*sizes)) for _ in range(n)]

    steps = [("open", always)]
    steps += some(appends[0])
    steps += [("roll",)]
    steps += some(appends[1])
    steps += [("delete_records", 3), ("retention",), ("close",), ("open", always)]
    steps += some(appends[2])
    steps += [("close",), ("open", never)]
    steps += some(appends[3] // 2 + 1) + [("flush",)] + some(appends[3] - appends[3] // 2 - 1)
    steps += [("flush",), ("retention",), ("append", 2, 40), ("close",)]
    return steps


class Model:
    def __init__(self):
        self.records = {}        # offset -> (append number, value)
        self.appends = []        # [first, count, status]; status: durable, acked, maybe, absent
        self.next = 0            # the log end if every append so far succeeded
        self.start_acked = 0     # log start offset acknowledged by a returned call
        self.start_bound = 0     # highest log start a started call may have set
        self.durable_end = 0     # offsets below it survive power loss
        self.end = 0             # offsets below it survive a process crash

    def begin_append(self, values):
        n = len(self.appends)
        self.appends.append([self.next, len(values), "maybe"])
        for i, v in enumerate(values):
            self.records.setdefault(self.next + i, {})[n] = v
        return n

    def settle(self, n, status):
        a = self.appends[n]
        a[2] = status
        if status in ("acked", "durable"):
            self.next = self.end = a[0] + a[1]
            if status == "durable":
                self.durable_end = self.end

    def flushed(self):
        self.durable_end = self.end
        for a in self.appends:
            if a[2] == "acked":
                a[2] = "durable"


class Runner:
    """Runs script steps against a Log on ``fs``, keeping ``model`` up to date.

    Exceptions propagate (PowerLoss, injected I/O errors); ``self.log`` is the Log
    in use (None when closed).
    """

    def __init__(self, fs, path, seed=0, model=None):
        self.fs, self.path = fs, path
        self.model = model or Model()
        self.rnd = random.Random(seed ^ 0x5EED)
        self.log = None
        self.config = None
        self.count = 0

    def run(self, steps):
        for step in steps:
            self.step(step)

    def step(self, step):
        kind, args = step[0], step[1:]
        m = self.model
        if kind == "open":
            self.config = args[0]
            self.log = kqlite.Log.open(self.path, fs=self.fs, **self.config)
        elif kind == "close":
            log, self.log = self.log, None
            log.close()
            m.flushed()
        elif kind == "append":
            n, size = args
            self.count += 1
            values = [make_value("a%d.%d" % (self.count, i), size, self.rnd) for i in range(n)]
            ts = T0 + self.count * 1000
            number = m.begin_append(values)
            try:
                first = self.log.append(values, timestamp=ts)
            except LogFailedError:
                raise   # may be in the log (a failed fsync): stays "maybe"
            except KqliteError:
                m.settle(number, "absent")
                raise
            assert first == m.appends[number][0], (first, m.appends[number])
            m.settle(number, "durable" if self.config.get("fsync") == "always" else "acked")
        elif kind == "roll":
            self.log.roll()
        elif kind == "flush":
            self.log.flush()
            m.flushed()
        elif kind == "delete_records":
            before = max(m.start_acked, m.end - args[0])
            m.start_bound = max(m.start_bound, before)
            self.log.delete_records(before)
            m.start_acked = max(m.start_acked, before)
        elif kind == "retention":
            m.start_bound = max(m.start_bound, m.end)
            self.log.enforce_retention(now_ms=T0)
            m.start_acked = max(m.start_acked, self.log.start_offset)
        else:
            raise AssertionError(step)


def check(log, model, durable=True):
    """Compare the reopened ``log`` with ``model``; returns a list of violations.

    ``durable``: a power loss happened, so only durable acknowledgements count
    (otherwise every returned append counts, as after a process crash)."""
    m = model
    bad = []
    must_end = m.durable_end if durable else m.end
    start, end = log.start_offset, log.end_offset
    if not m.start_acked <= start <= max(m.start_bound, m.start_acked):
        bad.append(f"log start {start} outside [{m.start_acked}, {m.start_bound}]")
    if end < must_end:
        bad.append(f"LOST: log end {end} < acknowledged end {must_end}")
    try:
        recs = list(log.read(start))
    except KqliteError as exc:
        return bad + [f"read from {start} failed: {exc!r}"]
    offsets = [r.offset for r in recs]
    if offsets != list(range(start, start + len(recs))):
        bad.append(f"offsets not dense from {start}: {offsets[:5]}...{offsets[-5:]}")
    if len(recs) != end - start:
        bad.append(f"read {len(recs)} records, expected end - start = {end - start}")
    # Which append does each surviving record belong to? Acknowledged ones first.
    live = {}
    for n, (first, count, status) in enumerate(m.appends):
        if status == "absent":
            continue
        for o in range(first, first + count):
            live.setdefault(o, []).append(n)
    chosen = {}
    for r in recs:
        cands = m.records.get(r.offset, {})
        owners = [n for n in live.get(r.offset, ()) if cands.get(n) == r.value]
        if not owners:
            absent = [n for n, v in cands.items() if v == r.value]
            what = "a failed append's record" if absent else "garbage"
            bad.append(f"offset {r.offset}: {what} {r.value[:24]!r}")
            continue
        chosen[r.offset] = owners[-1]
    for o in range(max(start, m.start_acked), must_end):
        n = max((k for k in live.get(o, ()) if m.appends[k][2] in
                 (("durable",) if durable else ("durable", "acked"))), default=None)
        if n is not None and o < end and chosen.get(o) != n:
            bad.append(f"LOST: acknowledged offset {o} (append {n}) reads as "
                       f"append {chosen.get(o)}")
    # Whole appends only: every append's records are all there or none.
    for n, (first, count, status) in enumerate(m.appends):
        got = [o for o in range(first, first + count) if chosen.get(o) == n]
        if got and len(got) != count and first >= start:
            bad.append(f"append {n} at {first} is partial: {len(got)} of {count}")
    return bad


def verify_reopen(fs, path, model, config, durable=True):
    """Open the log after a crash, check it against the model, and check that recovery
    is idempotent and durable: reopening (cleanly, then after another power cut that
    drops everything unsynced) changes nothing. Returns violations."""
    try:
        log = kqlite.Log.open(path, fs=fs, **config)
    except KqliteError as exc:
        return [f"reopen failed: {exc!r}"]
    try:
        bad = check(log, model, durable)
        first = (log.start_offset, log.end_offset, [r.value for r in log.read()]) \
            if not bad else None
    finally:
        if bad:
            log.close()
    if bad:
        return bad
    # Power is cut right after recovery: what recovery kept must have been made durable.
    fs.crash(random.Random(1), "drop")
    log = kqlite.Log.open(path, fs=fs, **config)
    try:
        second = (log.start_offset, log.end_offset, [r.value for r in log.read()])
        if second != first:
            bad.append(f"not durable after recovery: {first[:2]} then {second[:2]}")
        if log.recovery_reports:
            bad.append(f"second recovery cut bytes: {log.recovery_reports}")
    finally:
        log.close()
    return bad
