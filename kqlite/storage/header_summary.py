"""What a process learns from the batches another process appended to a segment,
without an object per batch.

Theory of operation
-------------------
A process that takes the write lock catches up with the batches the others wrote
meanwhile (sharing.catch_up): often a thousand small ones. It needs only their end
offset and timestamps (:meth:`Segment.note_batches`; the indexes are reloaded from
their files), so :func:`summarize_headers` folds each read's batch headers in one
native pass (``_native.summarize_batches``) instead of handing out a BatchPosition
per batch as a :class:`SegmentWalk` does.

The result is exactly what ``Segment.note_batches(SegmentWalk(file, start, end,
headers_only=True))`` learns, for any bytes: a header walk without CRC checks
accepts exactly the entries one scan of the whole range would, the entries that
fit both the range and the file, up to the first bad header or cut-off entry.
Reads are bounded: at most :data:`CHUNK` bytes, and an entry that a read cuts off
(but whose header it holds) is stepped over by its header once the range and the
file hold it, as the header walk does; after an entry larger than a read the next
read is a header's worth, growing fourfold per read from there.
"""

from .. import _native
from ..format.batch import entry_size
from ..format.constants import BATCH_OVERHEAD, MAGIC_OFFSET, MAGIC_V2
from ..format.header import parse_header
from ..format.legacy import legacy_header
from .scan import CHUNK, SCAN_OK, SCAN_TRUNCATED

__all__ = ["HeaderSummary", "summarize_headers", "note_headers"]

# Bytes of an entry that hold its header, by magic (a legacy one's through its timestamp).
_HEADER_NEEDS = {0: 18, 1: 26, 2: BATCH_OVERHEAD}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class HeaderSummary:
    """The entries of a range folded: ``count`` of them, the first one's max
    timestamp, the largest max timestamp and the last offset of the first entry
    holding it, the last entry's last offset (the last four None without entries)."""

    __slots__ = ("count", "first_max_timestamp", "max_timestamp", "offset_of_max_timestamp",
                 "last_offset")

    def __init__(self):
        self.count = 0
        self.first_max_timestamp = self.max_timestamp = None
        self.offset_of_max_timestamp = self.last_offset = None

    def add(self, count, first, top, top_offset, last):
        """Fold in the summary of the entries that follow those already folded."""
        if not count:
            return
        if not self.count:
            self.first_max_timestamp = first
            self.max_timestamp, self.offset_of_max_timestamp = top, top_offset
        elif top > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = top, top_offset
        self.count += count
        self.last_offset = last


def summarize_headers(file, start, end, chunk=CHUNK):
    """The :class:`HeaderSummary` of the entries of ``file`` bytes [start, end); see the
    module docstring (``chunk``: the largest read)."""
    summary = HeaderSummary()
    summarize = _native.summarize_batches
    chunk = max(chunk, BATCH_OVERHEAD)
    pos, want, file_end = start, chunk, None
    while pos < end:
        asked = min(want, end - pos)
        data = file.pread(asked, pos)
        if not data:
            break
        count, stop, status, first, top, top_offset, last = summarize(data)
        summary.add(count, first, top, top_offset, last)
        if status == SCAN_OK:
            pos += stop
            want = min(want * 4, chunk)
            continue
        if status != SCAN_TRUNCATED or len(data) < asked or pos + len(data) >= end:
            break       # a bad header, or the file or the range ends inside this entry
        # This read cut the entry at ``stop`` off: step over it by its header.
        at = pos + stop
        rest = len(data) - stop
        if rest <= MAGIC_OFFSET or rest < _HEADER_NEEDS[data[stop + MAGIC_OFFSET]]:
            pos, want = at, max(want, BATCH_OVERHEAD)     # the next read holds its header
            continue
        size = entry_size(data, stop)
        after = at + size
        if after > end:
            break
        if data[stop + MAGIC_OFFSET] == MAGIC_V2:
            header = parse_header(data, stop)
            if not _INT64_MIN <= header.last_offset <= _INT64_MAX:
                break           # the scan's bad header
        else:
            header = legacy_header(data, stop)
        entry_last, max_ts = header.last_offset, header.max_timestamp
        if file_end is None:
            file_end = file.size()
        if after > file_end:
            break
        summary.add(1, max_ts, max_ts, entry_last, entry_last)
        pos = after
        grown = min(want * 4, chunk)
        want = BATCH_OVERHEAD if size > grown else grown
    return summary


def note_headers(seg, start, end, chunk=CHUNK):
    """``seg.note_batches(SegmentWalk(seg.log, start, end, headers_only=True))``, from
    :func:`summarize_headers` (reads of at most ``chunk`` bytes): the end offset and
    timestamps of the batches there."""
    s = summarize_headers(seg.log, start, end, chunk=chunk)
    if not s.count:
        return
    if seg.first_batch_timestamp is None:
        seg.first_batch_timestamp = s.first_max_timestamp
    if s.max_timestamp > seg.max_timestamp:
        seg.max_timestamp, seg.offset_of_max_timestamp = s.max_timestamp, \
            s.offset_of_max_timestamp
    seg.next_offset = s.last_offset + 1
