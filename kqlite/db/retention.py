"""Retention and compaction over a whole data dir, and the thread that runs them.

Theory of operation
-------------------
Deleting old segments (``retention.ms``/``retention.bytes``) and compacting are
Log operations; this module decides which logs to run them on without opening
every log, since a data dir may hold far more partitions than there are file
descriptors (see log_manager.py).

* A log that is open is checked as it is: it costs nothing.
* A closed log is opened only when its files show there may be work, judged from
  a directory listing, file sizes and, for ``retention.ms``, the last entry of the
  oldest segment's time index (a rolled segment's time index ends with its largest
  timestamp, as Kafka's does); the active segment is never deleted, so a log with
  one segment is never opened. Compaction is judged from the file sizes and the
  data dir's ``cleaner-offset-checkpoint``, counting a segment dirty unless it
  lies wholly below the checkpoint.

Every guess errs towards opening: a log is skipped only when the Log itself would
find nothing to do. The one exception is a rolled segment whose final time-index
entry a crash lost: its time is judged from the entries that remain until the
log is next opened (by any use), when the full check runs.
"""

import logging
import os
import threading

from ..errors import CorruptRecordError, LogClosedError, UnknownTopicError
from ..format.batch import now_ms as wall_clock_ms
from ..storage.checkpoint import read_offsets
from ..storage.data_dir import CLEANER_OFFSET_FILE
from ..storage.segment import LOG_SUFFIX, TIMEINDEX_SUFFIX, parse_segment_name, segment_name
from .layout import partition_dir

__all__ = ["enforce_retention", "compact", "RetentionThread", "may_delete", "may_compact"]

log = logging.getLogger("kqlite")

_TIME_ENTRY = 12    # ON-DISK: a .timeindex entry, int64 timestamp + int32 relative offset


def _segment_files(fs, pdir):
    """[(base offset, .log size)] of the segments in ``pdir``, oldest first."""
    try:
        names = fs.listdir(pdir)
    except FileNotFoundError:
        return []
    segments = []
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            try:
                segments.append((parsed[0], fs.file_size(os.path.join(pdir, name))))
            except FileNotFoundError:
                continue
    return sorted(segments)


def _largest_timestamp(fs, pdir, base):
    """The last time-index entry of segment ``base``; None when unknown (no index, or
    a torn or empty one while the segment holds data)."""
    path = os.path.join(pdir, segment_name(base, TIMEINDEX_SUFFIX))
    try:
        f = fs.open(path)
    except FileNotFoundError:
        return None
    try:
        size = f.size()
        if size == 0 or size % _TIME_ENTRY:
            return None
        return int.from_bytes(f.pread(8, size - _TIME_ENTRY), "big", signed=True)
    finally:
        f.close()


def may_delete(fs, pdir, config, now_ms):
    """Whether ``enforce_retention`` may delete a segment of the closed log in ``pdir``."""
    if "delete" not in config["cleanup.policy"]:
        return False
    segments = _segment_files(fs, pdir)
    if len(segments) < 2:
        return False
    limit = config["retention.bytes"]
    if limit >= 0 and sum(size for _, size in segments) - limit >= segments[0][1]:
        return True
    retention = config["retention.ms"]
    if retention >= 0:
        largest = _largest_timestamp(fs, pdir, segments[0][0])
        if largest is None or (largest >= 0 and now_ms - largest > retention):
            return True
    return False


def may_compact(fs, pdir, config, first_dirty):
    """Whether ``compact`` may find the closed log in ``pdir`` dirty enough to clean;
    ``first_dirty`` is its cleaner checkpoint (None when it has none)."""
    if "compact" not in config["cleanup.policy"]:
        return False
    segments = _segment_files(fs, pdir)
    if len(segments) < 2:
        return False
    active_base = segments[-1][0]
    if first_dirty is not None and first_dirty > active_base:
        first_dirty = None            # stale (truncated log): the cleaner starts over
    clean = dirty = 0
    for (base, size), (next_base, _) in zip(segments, segments[1:]):
        if first_dirty is not None and next_base <= first_dirty:
            clean += size
        else:
            dirty += size
    return dirty > 0 and dirty / (clean + dirty) >= config["min.cleanable.dirty.ratio"]


def _partitions(db):
    for topic in db.list_topics(internal=True):
        try:
            config = db.topic_config(topic)
            count = db.partitions_for(topic)
        except UnknownTopicError:     # deleted meanwhile
            continue
        for p in range(count):
            yield topic, p, config


def _run(db, key, needed, action):
    """``action(log)`` on the log of ``key`` if it is open, or if ``needed()`` says the
    closed log may need it; None when skipped."""
    with db.logs.lease_if_open(key) as lg:
        if lg is not None:
            return action(lg)
    if not needed():
        return None
    try:
        with db.logs.lease(key) as lg:
            return action(lg)
    except UnknownTopicError:
        return None


def enforce_retention(db, now_ms=None):
    """Delete expired segments in every partition that may have some;
    ``{(topic, partition): [deleted base offsets]}``."""
    now = wall_clock_ms() if now_ms is None else now_ms
    deleted = {}
    for topic, p, config in _partitions(db):
        pdir = partition_dir(db.path, topic, p)
        gone = _run(db, (topic, p), lambda: may_delete(db.fs, pdir, config, now),
                    lambda lg: lg.enforce_retention(now))
        if gone:
            deleted[(topic, p)] = gone
    return deleted


def compact(db, now_ms=None):
    """Compact every partition of a compacted topic that may be dirty enough;
    ``{(topic, partition): CompactionReport}`` of those compacted or checked."""
    try:
        checkpoints = read_offsets(db.fs, os.path.join(db.path, CLEANER_OFFSET_FILE))
    except CorruptRecordError as exc:
        log.warning("ignoring %s", exc)
        checkpoints = {}
    reports = {}
    for topic, p, config in _partitions(db):
        if "compact" not in config["cleanup.policy"]:
            continue
        pdir = partition_dir(db.path, topic, p)
        report = _run(db, (topic, p),
                      lambda: may_compact(db.fs, pdir, config, checkpoints.get((topic, p))),
                      lambda lg: lg.compact(now_ms))
        if report is not None:
            reports[(topic, p)] = report
    return reports


class RetentionThread:
    """Runs retention then compaction every ``interval`` seconds until stopped (Kafka's
    ``log.retention.check.interval.ms``, five minutes by default)."""

    def __init__(self, db, interval):
        self.db = db
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kqlite-retention",
                                        daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                enforce_retention(self.db)
                compact(self.db)
            except LogClosedError:
                return
            except Exception as exc:    # keep the thread alive: the next pass may succeed
                log.error("background retention in %s failed: %s", self.db.path, exc)

    def stop(self):
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
