"""A cluster broker's data dir: its identity check at start, its mark, and the periodic
``replication-offset-checkpoint``.

Theory of operation. Start-up follows Kafka's KafkaServer in ZooKeeper mode:

1. before any log opens (:func:`open_broker_dir`), ``meta.properties`` must not name
   another broker id (InconsistentBrokerIdError); it is written with this broker's id,
   the dir is marked replicated and claimed by this process (storage/cluster_dir.py:
   every other process then reads it only up to the checkpointed high watermarks and
   may not write it);
2. once the cluster id is read from ZooKeeper (:func:`adopt_cluster_id`),
   ``meta.properties`` must not name another cluster (InconsistentClusterIdError); it
   then holds ``cluster.id`` too.

:class:`HighWatermarkCheckpointer` is Kafka's ``checkpointHighWatermarks``: every
``replica.high.watermark.checkpoint.interval.ms`` (5000 by default) and when the broker
stops, the high watermark of every partition this broker hosts is written to
``<data dir>/replication-offset-checkpoint`` in one update, in a storage thread (the
event loop never waits on the file). The values are the ones the replicated partitions
hold (the leader's from its ISR, a follower's from its leader, capped at its log end),
not their logs' ends.
"""

import asyncio
import logging
import os

from ...storage import cluster_dir
from ...storage.data_dir import REPLICATION_OFFSET_FILE, DataDir

__all__ = ["open_broker_dir", "adopt_cluster_id", "close_broker_dir",
           "HighWatermarkCheckpointer", "DEFAULT_HW_CHECKPOINT_INTERVAL_MS"]

log = logging.getLogger("kqlite.cluster")

DEFAULT_HW_CHECKPOINT_INTERVAL_MS = 5000   # Kafka's replica.high.watermark.checkpoint.interval.ms


def open_broker_dir(fs, data_dir, broker_id):
    """Step 1 of the module docstring; raises InconsistentBrokerIdError."""
    fs.makedirs(data_dir)
    cluster_dir.check_broker_id(fs, data_dir, broker_id)
    cluster_dir.write_broker_meta_properties(fs, data_dir, broker_id)
    cluster_dir.mark_replicated(fs, data_dir, broker_id)
    cluster_dir.claim(data_dir)


def adopt_cluster_id(fs, data_dir, broker_id, cluster_id):
    """Step 2 of the module docstring (a thread); raises InconsistentClusterIdError."""
    cluster_dir.check_cluster_id(fs, data_dir, cluster_id)
    cluster_dir.write_broker_meta_properties(fs, data_dir, broker_id, cluster_id)


def close_broker_dir(data_dir):
    cluster_dir.release(data_dir)


class HighWatermarkCheckpointer:
    """Writes the hosted partitions' high watermarks every ``interval_ms``. ``partitions()``
    returns the replicated partitions now hosted (each with ``topic``, ``index`` and
    ``checkpoint_high_watermark``, -1 when it knows none yet); ``run_io(fn, *args)`` runs a
    blocking call in a storage thread."""

    def __init__(self, fs, data_dir, partitions, run_io,
                 interval_ms=DEFAULT_HW_CHECKPOINT_INTERVAL_MS):
        if interval_ms <= 0:
            raise ValueError(f"replica.high.watermark.checkpoint.interval.ms must be "
                             f"positive, not {interval_ms!r}")
        self.fs = fs
        self.path = os.path.join(data_dir, REPLICATION_OFFSET_FILE)
        self.data_dir = data_dir
        self.interval = interval_ms / 1000.0
        self._partitions = partitions
        self._run_io = run_io
        self._task = None
        self._data_dir = None
        self.written = 0            # checkpoints written, for tests and metrics

    def start(self):
        # Held like an open log's: the checkpoint file is updated under the data dir's
        # lock, and the clean-shutdown marker is written by the last user only.
        self._data_dir = DataDir.acquire(self.fs, self.data_dir)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="kqlite-hw-checkpoint")

    async def stop(self):
        """Stop the timer and write one last checkpoint (Kafka does at shutdown)."""
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        try:
            await self.checkpoint()
        finally:
            self._data_dir.release()

    async def _run(self):
        while True:
            await asyncio.sleep(self.interval)
            await self.checkpoint()

    async def checkpoint(self):
        """Write the high watermarks known now; False (logged) if the write failed."""
        hws = {(p.topic, p.index): p.checkpoint_high_watermark for p in self._partitions()}
        hws = {tp: hw for tp, hw in hws.items() if hw >= 0}
        if not hws:
            return True
        try:
            await self._run_io(self._write, hws)
        except OSError as exc:
            log.error("cannot write %s: %s", self.path, exc)
            return False
        self.written += 1
        return True

    def _write(self, hws):
        self._data_dir.update(REPLICATION_OFFSET_FILE, hws)
