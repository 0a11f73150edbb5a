"""What log compaction may see and do with a Log: :class:`CleanableLog`.

The cleaner (cleaner.py) works on a snapshot of the closed segments, with its own
file descriptors and without the Log's locks, and comes back to the Log only to
install its result. This class is the whole of its contact with the Log:

* :meth:`~CleanableLog.segments_to_clean`: the closed segments as of now (after
  finishing a swap a dead compactor left half done), the active segment's base
  offset, the log start offset and the last stable offset;
* :meth:`~CleanableLog.aborted_transactions`: the ``.txnindex`` entries of a range;
* :meth:`~CleanableLog.last_records_of_active_producers`: where each producer's last
  batch is, which compaction keeps (Kafka's lastRecordsOfActiveProducers);
* :meth:`~CleanableLog.first_dirty_offset` / :meth:`~CleanableLog.set_first_dirty_offset`:
  where the last compaction stopped (Kafka's cleaner-offset-checkpoint);
* :meth:`~CleanableLog.closed_segments`: the closed segments now, to tell a changed
  log from a corrupt one when a read fails;
* :meth:`~CleanableLog.swap_lock` and, inside it, :meth:`~CleanableLog.replace_segments`:
  the only moment the cleaner holds the write lock, to check that the segments it
  cleaned are unchanged and swap the cleaned ones in.

plus ``fs``, ``path`` and ``config``. Everything else of the Log stays private to it.
"""

from collections import namedtuple
from contextlib import contextmanager

from ..errors import LogFailedError
from . import appending, swap
from .segment import Segment
from .sharing import reload_segments

__all__ = ["CleanableLog", "SegmentSnapshot"]

SegmentSnapshot = namedtuple("SegmentSnapshot", "seg base next_offset size max_timestamp "
                                                "index_bytes timeindex_bytes")
SegmentSnapshot.__doc__ = """A closed segment as compaction planned with it: the Segment
and, at planning time, its base offset, end offset, size, largest timestamp and index
file sizes."""


class CleanableLog:
    """The Log ``lg`` as compaction sees it (see the module docstring)."""

    __slots__ = ("_log",)

    def __init__(self, lg):
        self._log = lg

    @property
    def fs(self):
        return self._log.fs

    @property
    def path(self):
        return self._log.path

    @property
    def config(self):
        return self._log.config

    def segments_to_clean(self):
        """``([SegmentSnapshot of each closed segment], active base offset, log start
        offset, last stable offset)`` as of now. Raises as a write would on a closed,
        failed or corrupt log."""
        lg = self._log
        with lg._lock:
            lg._check_writable()
            if swap.recover_swaps(lg.fs, lg.path, dry_run=True):
                with lg._locked_write():    # a compactor died mid-swap: finish its work first
                    state = lg._shared.read()
                    if state is not None:
                        reload_segments(lg, state)
            else:
                lg._refresh()
            snaps = [SegmentSnapshot(s, s.base_offset, s.next_offset, s.size, s.max_timestamp,
                                     s.index.count * 8, s.timeindex.count * 12)
                     for s in lg._segments[:-1]]
            return (snaps, lg._segments.active.base_offset, lg.log_start_offset,
                    lg._last_stable_offset())

    def aborted_transactions(self, offset, upper_bound):
        """The AbortedTxns of [``offset``, ``upper_bound``) (Log.aborted_transactions)."""
        return self._log.aborted_transactions(offset, upper_bound)

    def last_records_of_active_producers(self):
        """``{producer id: (offset of its last data batch's last record or None, its
        epoch)}`` of the producers the log's producer state keeps (Kafka's
        UnifiedLog.lastRecordsOfActiveProducers): their last batch stays, emptied if
        need be, and a producer without data keeps its last marker."""
        lg = self._log
        with lg._locked_write():
            producers = appending.producer_state(lg).producers
            return {pid: (e.last_data_offset if e.last_data_offset >= 0 else None, e.epoch)
                    for pid, e in producers.items()}

    def closed_segments(self):
        """The closed segments now (caught up with other processes)."""
        lg = self._log
        with lg._lock:
            lg._check_open()
            lg._refresh()
            return lg._segments[:-1]

    def first_dirty_offset(self):
        """Where the last compaction stopped, as recorded, or None."""
        return self._log._checkpoints.first_dirty_offset()

    def set_first_dirty_offset(self, offset):
        self._log._checkpoints.set_first_dirty_offset(offset)

    @contextmanager
    def swap_lock(self):
        """Hold the write lock (after the sync lock, as Log._sync_to takes them: no fsync
        of a segment about to be replaced is in flight); yields the closed segments."""
        lg = self._log
        with lg._sync_lock, lg._locked_write():
            lg._check_writable()
            yield lg._segments[:-1]

    def replace_segments(self, replacements):
        """Swap cleaned segments in (inside :meth:`swap_lock`): ``replacements`` is
        ``[(new base offset, [old Segment, ...]), ...]`` whose ``.cleaned`` files are
        written and fsynced (swap.py). Other processes then reload their segment lists.
        Any failure fails the log; reopening it finishes the swap."""
        lg = self._log
        fs, d = lg.fs, lg.path
        try:
            swap.swap_in(fs, d, [(base, [s.base_offset for s in olds])
                                 for base, olds in replacements])
            new_for = {}
            for base, olds in replacements:
                new = Segment.open(fs, d, base, lg.config)
                new_for.update((id(s), new) for s in olds)
            lg._segments.replace(new_for)
            for _, olds in replacements:
                for s in olds:
                    s.close()
            swap.remove_deleted(fs, d, [s.base_offset for _, olds in replacements for s in olds])
            lg._generation += 1
            lg._write_state(sync=True)
        except BaseException as exc:
            lg._failed = exc
            if isinstance(exc, Exception):
                raise LogFailedError(f"compaction swap in {d} failed ({exc}); reopen "
                                     f"the log to finish it") from exc
            raise
