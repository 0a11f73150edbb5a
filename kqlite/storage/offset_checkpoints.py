"""The offsets of one partition that Kafka keeps in checkpoint files.

In a data dir (data_dir.py) they are entries of Kafka's data-dir-wide files:
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` (the high watermark) and
``cleaner-offset-checkpoint`` (compaction's first dirty offset). A log opened
anywhere else keeps only its log start offset, in ``.kqlite-log-start`` in its
own directory (Kafka's checkpoint format, one entry), and its first dirty offset
in memory.

Checkpoints are advisory, as in Kafka: the shared state record (sharing.py) is
what every change writes; a checkpoint is written now and then, and a malformed
one is logged and ignored. The exception is the log start offset, which must
survive a torn state record: :meth:`PartitionCheckpoints.persist_log_start` makes
it durable whenever it moves.

In a cluster broker's data dir (cluster_dir.py) the high watermark is the other
exception: it is *only* what ``replication-offset-checkpoint`` says (the log start
for a partition it does not name, Kafka's ``getOrElse(0)``), never the log end. A Log
there that no replication layer pins re-reads it at most every
``HW_REREAD_INTERVAL`` seconds, and never writes it back.
"""

import logging
import os
import time

from ..errors import CorruptRecordError
from .checkpoint import read_offsets, write_checkpoint
from .data_dir import (
    CLEANER_OFFSET_FILE, LOG_START_FILE, RECOVERY_POINT_FILE, REPLICATION_OFFSET_FILE,
)

__all__ = ["PartitionCheckpoints", "OWN_LOG_START_FILE", "HW_REREAD_INTERVAL"]

log = logging.getLogger("kqlite.storage")

OWN_LOG_START_FILE = ".kqlite-log-start"   # a log outside a data dir: its start offset
HW_REREAD_INTERVAL = 0.1    # s; a broker rewrites the file every few seconds at most


class PartitionCheckpoints:
    """Read and write one partition's entries (``data_dir`` None: outside a data dir)."""

    def __init__(self, fs, directory, topic, partition, data_dir):
        self.fs = fs
        self.dir = directory
        self.tp = (topic, partition)
        self.data_dir = data_dir
        self._first_dirty = None      # the cleaner offset, when there is no data dir
        self._hw_read_at = time.monotonic()

    def read(self):
        """{checkpoint file name: offset} for this partition's recorded entries (the
        cleaner offset excepted: :meth:`first_dirty_offset`)."""
        if self.data_dir is None:
            try:
                offsets = read_offsets(self.fs, os.path.join(self.dir, OWN_LOG_START_FILE))
            except CorruptRecordError as exc:
                log.warning("ignoring %s", exc)
                return {}
            except FileNotFoundError:
                return {}
            start = offsets.get(self.tp)
            return {} if start is None else {LOG_START_FILE: start}
        found = {}
        for name in (RECOVERY_POINT_FILE, LOG_START_FILE, REPLICATION_OFFSET_FILE):
            offset = self._read_one(name)
            if offset is not None:
                found[name] = offset
        return found

    def _read_one(self, name):
        try:
            return self.data_dir.read(name).get(self.tp)
        except CorruptRecordError as exc:
            log.warning("ignoring %s", exc)
            return None

    def write(self, recovery_point, log_start_offset, high_watermark):
        """Checkpoint the three offsets Kafka checkpoints per data dir (nothing to do
        outside a data dir); a ``high_watermark`` of None leaves that entry as it is."""
        if self.data_dir is None:
            return
        self.data_dir.update(RECOVERY_POINT_FILE, {self.tp: recovery_point})
        self.data_dir.update(LOG_START_FILE, {self.tp: log_start_offset})
        if high_watermark is not None:
            self.data_dir.update(REPLICATION_OFFSET_FILE, {self.tp: high_watermark})

    def checkpointed_high_watermark(self, found, log_start, log_end):
        """The high watermark of a replicated partition from ``found`` (what :meth:`read`
        answered), clamped to [log start, log end]; the log start when it has none."""
        hw = found.get(REPLICATION_OFFSET_FILE)
        return log_start if hw is None else max(log_start, min(hw, log_end))

    def refreshed_high_watermark(self, current, log_start, log_end):
        """A replicated partition's high watermark as the checkpoint says it now (read
        again at most every HW_REREAD_INTERVAL seconds; in between ``current``, clamped)."""
        now = time.monotonic()
        if self.data_dir is None or now - self._hw_read_at < HW_REREAD_INTERVAL:
            return max(log_start, min(current, log_end))
        self._hw_read_at = now
        hw = self._read_one(REPLICATION_OFFSET_FILE)
        return self.checkpointed_high_watermark(
            {} if hw is None else {REPLICATION_OFFSET_FILE: hw}, log_start, log_end)

    def persist_log_start(self, offset):
        """Make a moved log start durable apart from .kqlite-state, which every append
        rewrites in place: a torn write of it must not bring deleted records back."""
        if self.data_dir is not None:
            self.data_dir.update(LOG_START_FILE, {self.tp: offset})
        else:
            write_checkpoint(self.fs, os.path.join(self.dir, OWN_LOG_START_FILE),
                             [(self.tp[0], self.tp[1], offset)])

    def first_dirty_offset(self):
        """Compaction's first dirty offset as last recorded, or None."""
        if self.data_dir is None:
            return self._first_dirty
        return self._read_one(CLEANER_OFFSET_FILE)

    def set_first_dirty_offset(self, offset):
        if self.data_dir is None:
            self._first_dirty = offset
        else:
            self.data_dir.update(CLEANER_OFFSET_FILE, {self.tp: offset})
