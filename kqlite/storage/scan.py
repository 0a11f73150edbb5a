"""The one walker over the log entries of a segment file, and what it hands out.

Every storage reader that looks at a segment's batches goes through
:class:`SegmentWalk`: opening and recovering a segment, finding the batch that
holds an offset, catching up with another process's appends, reads, fetches,
compaction, the integrity check and the producer-state rebuild
(:meth:`Log.batch_headers`, whose headers are :func:`batch_header`'s
:class:`~kqlite.format.BatchHeader`).

Theory of operation
-------------------
``_native.scan_batches`` validates framing (and CRC) over one in-memory buffer.
A walk feeds it the file bytes [start, end) one read (a :class:`Chunk`) at a
time and hands out the whole entries of each read as :class:`BatchPosition`
(absolute file positions).

*Data walks* (the default) see every byte of every entry: the next read starts
where the last whole entry ended, growing to hold an entry larger than a read, so
a batch is always seen whole; memory is bounded by the larger of the read size
and the largest entry. *Header walks* (``headers_only=True``, never with CRC
checks) step over a v2 batch that a read cut off by its 61-byte header alone:
without CRC checks a scan of all its bytes would report exactly the header's
facts, once the header says the batch ends within the walk and the file holds it
(the file's size is asked once, unless the caller vouches for ``end``). A header
walk therefore reads a bounded amount per batch however large batches are;
lookups, fetch extents and batch headers use it.

Reads start at ``chunk`` bytes and grow fourfold per read, up to :data:`CHUNK`
(or to the entry that must be read whole): a lookup just after an index entry
reads a few KiB, a walk over a whole segment soon reads 1 MiB at a time. After
a step over a batch larger than that the next read is a header's worth.

While a walk runs, :attr:`SegmentWalk.stop` is the position after the last
whole entry handed out and :attr:`SegmentWalk.status` describes the bytes there
as of the last read (:meth:`SegmentWalk.read` is one read): SCAN_OK (the walk
reached ``end``, or will read on), SCAN_TRUNCATED (an entry cut off by ``end`` or
by the file's end; mid-walk, one the next read will fetch whole),
SCAN_CORRUPT_CRC or SCAN_BAD_HEADER. A consumer that stops early reads them as
they stood after its last read.
"""

import functools
from collections import namedtuple

from .. import _native
from ..format.batch import entry_size
from ..format.constants import BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2
from ..format.header import parse_header
from ..format.legacy import legacy_header

__all__ = ["SegmentWalk", "Chunk", "BatchPosition", "batch_header",
           "CHUNK", "SCAN_OK", "SCAN_TRUNCATED", "SCAN_CORRUPT_CRC",
           "SCAN_BAD_HEADER", "STATUS_TEXT"]

SCAN_OK = _native.SCAN_OK
SCAN_TRUNCATED = _native.SCAN_TRUNCATED
SCAN_CORRUPT_CRC = _native.SCAN_CORRUPT_CRC
SCAN_BAD_HEADER = _native.SCAN_BAD_HEADER
STATUS_TEXT = {SCAN_OK: "ok", SCAN_TRUNCATED: "incomplete batch at the end of the file",
               SCAN_CORRUPT_CRC: "CRC mismatch", SCAN_BAD_HEADER: "invalid batch header"}

CHUNK = 1 << 20
_MIN_ENTRY = 26          # the smallest log entry (a magic 0 message with no key or value)
_HEADER_CHECKED = MAGIC_OFFSET + 1   # bytes of an entry scan_batches needs to judge its header
_V2_MIN_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD   # the smallest legal v2 length field
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

BatchPosition = namedtuple("BatchPosition",
                           "position base_offset last_offset max_timestamp size magic")
BatchPosition.__doc__ = """One log entry of a segment file, as the walker found it: its
file position, first and last offset, largest timestamp, size in bytes (the 12-byte
offset and length prefix included) and magic (0, 1: a legacy message; 2: a batch)."""

Chunk = namedtuple("Chunk", "position data batches")
Chunk.__doc__ = """One read of a walk: ``data`` holds the file bytes from ``position``;
``batches`` are the BatchPositions found in them (absolute positions: the entry starts
at ``data[b.position - position]``). A header walk's data holds at least the header of
each of its batches, a data walk's the whole batch."""

_new = tuple.__new__
_as_position = functools.partial(_new, BatchPosition)


class SegmentWalk:
    """Walk the entries of ``file`` bytes [start, end); see the module docstring.

    :meth:`read` returns the next Chunk (None once the walk has ended); :meth:`chunks`
    yields them; iterating yields their BatchPositions. ``from_offset`` leaves out
    entries whose last offset is below it. ``max_size`` makes a larger entry
    SCAN_BAD_HEADER (recovery's bound on a plausible batch). ``trust_end`` says the
    file is known to hold ``end`` bytes (a segment's size, under the Log's lock): a
    header walk then steps over batches without asking the file for its size."""

    __slots__ = ("file", "end", "verify_crc", "headers_only", "max_size", "from_offset",
                 "stop", "status", "_pos", "_want", "_grow_to", "_file_end", "_done")

    def __init__(self, file, start, end, *, verify_crc=False, headers_only=False,
                 max_size=None, chunk=CHUNK, from_offset=None, trust_end=False):
        if headers_only and verify_crc:
            raise ValueError("a header walk cannot check CRCs: it does not read whole batches")
        self.file = file
        self.end = end
        self.verify_crc = verify_crc
        self.headers_only = headers_only
        self.max_size = max_size
        self.from_offset = from_offset
        self.stop = start
        self.status = SCAN_OK
        self._pos = start
        self._want = max(chunk, BATCH_OVERHEAD)
        self._grow_to = max(self._want, CHUNK)
        # The file's size, learnt at the first step: a step skips bytes it does not read.
        self._file_end = end if trust_end else None
        self._done = False

    def __iter__(self):
        for chunk in self.chunks():
            yield from chunk.batches

    def chunks(self):
        """Yield one Chunk per read (its ``batches`` may be empty) until the walk ends."""
        read = self.read
        chunk = read()
        while chunk is not None:
            yield chunk
            chunk = read()

    def read(self):
        """Read on: the next Chunk, or None when the walk has ended."""
        pos, end = self._pos, self.end
        if self._done or pos >= end:
            self._done = True
            return None
        want = self._want
        asked = min(want, end - pos)
        data = self.file.pread(asked, pos)
        if not data:
            self._done = True
            self.stop, self.status = pos, SCAN_TRUNCATED
            return None
        if self.headers_only and len(data) == asked >= BATCH_OVERHEAD \
                and data[MAGIC_OFFSET] == MAGIC_V2:
            # A batch that cannot fit this read, where the scan could only say "cut off
            # here": step over it at once (the common case among large batches).
            header = parse_header(data)
            size = header.size
            after = pos + size
            last = header.last_offset
            if size > asked and header.batch_length >= _V2_MIN_LENGTH and after <= end \
                    and (self.max_size is None or size <= self.max_size) \
                    and _INT64_MIN <= last <= _INT64_MAX \
                    and after <= (self._file_end or self._learn_file_end()):
                self.stop, self.status = after, SCAN_OK
                self._pos = after
                grown = min(want * 4, self._grow_to)
                self._want = BATCH_OVERHEAD if size > grown else grown
                low = self.from_offset
                if low is not None and last < low:
                    return _new(Chunk, (pos, data, []))
                return _new(Chunk, (pos, data, [_new(BatchPosition, (
                    pos, header.base_offset, last, header.max_timestamp, size, MAGIC_V2))]))
        found, stop, status = _native.scan_batches(
            data, 0, len(data), self.verify_crc, len(data) // _MIN_ENTRY + 1, self.max_size)
        self.stop, self.status = pos + stop, status
        if status == SCAN_OK:
            self._pos = pos + stop
            self._want = min(want * 4, self._grow_to)
            return _new(Chunk, (pos, data, _positions(found, pos, self.from_offset)))
        if status != SCAN_TRUNCATED or len(data) < asked or pos + len(data) >= end:
            self._done = True       # corrupt, or the range or the file ends inside an entry
            return _new(Chunk, (pos, data, _positions(found, pos, self.from_offset)))
        # This read ended inside the entry at ``stop``: step over it by its header (a
        # header walk, a v2 batch that ends within the walk), or read on from it.
        rest = len(data) - stop
        grown = min(want * 4, self._grow_to)
        if self.headers_only and rest >= BATCH_OVERHEAD \
                and data[stop + MAGIC_OFFSET] == MAGIC_V2:
            stepped = self._step(data, stop, pos, parse_header(data, stop), found, grown)
            if stepped is not None:
                return stepped
        self._pos = pos + stop
        if rest >= _HEADER_CHECKED:         # the scan checked magic, length and max_size
            grown = max(grown, entry_size(data, stop))
        self._want = grown
        return _new(Chunk, (pos, data, _positions(found, pos, self.from_offset)))

    def _step(self, data, at, pos, header, found, grown):
        """The Chunk of ``found`` and the v2 batch at ``data[at:]`` (whose BatchHeader is
        ``header``, checked as the scan checks it), stepped over by its header; None when
        it must be read instead (the walk or the file ends inside it)."""
        size = header.size
        last = header.last_offset
        if not _INT64_MIN <= last <= _INT64_MAX:
            self._done = True
            self.stop, self.status = pos + at, SCAN_BAD_HEADER
            return _new(Chunk, (pos, data, _positions(found, pos, self.from_offset)))
        after = pos + at + size
        if after > self.end or after > (self._file_end or self._learn_file_end()):
            return None
        self.stop, self.status = after, SCAN_OK
        self._pos = after
        # Past a batch larger than reads grow, the next is likely large too: read just
        # its header (reads grow again from there if it is not).
        self._want = BATCH_OVERHEAD if size > grown else grown
        low = self.from_offset
        batches = _positions(found, pos, low)
        if low is None or last >= low:
            batches.append(_new(BatchPosition, (pos + at, header.base_offset, last,
                                                header.max_timestamp, size, MAGIC_V2)))
        return _new(Chunk, (pos, data, batches))


    def _learn_file_end(self):
        self._file_end = self.file.size()
        return self._file_end


def _positions(found, pos, low):
    """scan_batches' tuples (positions relative to ``pos``) as BatchPositions, leaving out
    those that end below ``low``."""
    if not found:
        return []
    if low is None:
        if not pos:
            return list(map(_as_position, found))
        return [_new(BatchPosition, (p + pos, b, l, t, s, m)) for p, b, l, t, s, m in found]
    return [_new(BatchPosition, (p + pos, b, l, t, s, m)) for p, b, l, t, s, m in found
            if l >= low]


def batch_header(chunk, b):
    """The :class:`~kqlite.format.BatchHeader` of the entry ``b`` of ``chunk`` (from a walk
    of that segment): a legacy entry's through the same fields (format.legacy)."""
    at = b.position - chunk.position
    if b.magic == MAGIC_V2:
        return parse_header(chunk.data, at)
    return legacy_header(chunk.data, at)
