"""The high watermark a replicated partition holds for its log, and how storage is made
to keep it.

Theory of operation. Storage would let a log's high watermark (HW) follow its log end
when the log is closed and reopened (the LRU of open logs does that at any time), which
for a replica would expose records not committed yet. So the partition holds the HW it
knows (the leader's from its ISR, a follower's from its leader, capped at its log end),
and every lease of the log pins it first (:meth:`HighWatermarkPin.apply`, in the storage
thread that took the lease); a storage call that sets the HW records what storage kept
(:meth:`HighWatermarkPin.set`). Storage threads pin one at a time, each the value held
at that moment. The value is also what ``replication-offset-checkpoint`` records for
the partition (broker_dir.py).
"""

import threading

__all__ = ["HighWatermarkPin"]


class HighWatermarkPin:
    """The HW storage must hold for one partition; ``value`` is -1 until one is known."""

    def __init__(self):
        self.value = -1
        self._lock = threading.Lock()     # orders the storage threads' pins

    def hold(self, hw):
        """The event loop learned a new HW; the next lease pins it."""
        self.value = hw

    def apply(self, log):
        """Pin the held HW in ``log``, a leased log (storage thread)."""
        with self._lock:
            if self.value >= 0:
                log.set_high_watermark(self.value)

    def set(self, log, hw):
        """Pin ``hw`` in ``log`` and hold what storage kept (storage thread); returns it."""
        with self._lock:
            self.value = log.set_high_watermark(hw)
            return self.value
