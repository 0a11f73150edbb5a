"""LogSegments: the segments of one partition directory, oldest first (Kafka's LogSegments).

The last segment is the *active* one: appends go there, and it is never deleted
by retention or compaction. Segments hold disjoint, rising offset ranges; a
segment may hold nothing at or after its base offset (compaction leaves holes,
Kafka's cleaner may leave empty segments), so looking an offset up steps over
segments that end before it.

Not thread-safe: the owning Log serialises access (its ``_lock``). How a process
learns of segments other processes rolled, deleted or replaced is sharing.py's
business; it rebuilds the list with :meth:`LogSegments.reset`.
"""

from bisect import bisect_right

from ..errors import CorruptRecordError
from .segment import LOG_SUFFIX, Segment, parse_segment_name

__all__ = ["LogSegments", "list_segment_bases", "NO_LIMIT"]

NO_LIMIT = 1 << 63      # the active segment's limit: other processes may be extending it


def _base_offset(seg):
    return seg.base_offset


def list_segment_bases(fs, directory):
    """Base offsets of the ``.log`` files in ``directory``, sorted."""
    bases = []
    for name in fs.listdir(directory):
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            bases.append(parsed[0])
    return sorted(bases)


class LogSegments(list["Segment"]):
    """The ordered Segments of one log: a list (the hot paths index it at C speed), plus
    lookups and the changes a log makes to its segment set."""

    __slots__ = ("fs", "dir", "config")

    def __init__(self, fs, directory, config, segments=()):
        super().__init__(segments)
        self.fs = fs
        self.dir = directory
        self.config = config

    @classmethod
    def open_all(cls, fs, directory, config):
        """Open every segment in ``directory``."""
        return cls(fs, directory, config,
                   [Segment.open(fs, directory, base, config)
                    for base in list_segment_bases(fs, directory)])

    @property
    def active(self):
        return self[-1]

    def bases(self) -> list[int]:
        return [seg.base_offset for seg in self]

    def size_in_bytes(self) -> int:
        return sum(seg.size for seg in self)

    def reset(self, segments):
        """Replace the whole list (a reload, recovery)."""
        self[:] = segments

    # -- Lookup ------------------------------------------------------------------------------

    def for_offset(self, offset):
        """The segment holding ``offset`` or, past a hole, the first one after it; None at
        the log end. CorruptRecordError if a closed segment that ends in invalid bytes
        would be stepped over: the offset may be in them."""
        last = len(self) - 1
        if self[last].next_offset == offset:
            return None
        i = max(bisect_right(self, offset, key=_base_offset) - 1, 0)
        seg = self[i]
        while max(offset, seg.base_offset) >= seg.next_offset:
            if not seg.tail_valid and i < last:
                raise CorruptRecordError(
                    f"closed segment ends in invalid bytes ({seg.invalid_reason}) before "
                    f"offset {offset}; run `kqlite check`", path=seg.path(),
                    position=seg.invalid_position)
            i += 1
            if i > last:
                return None
            seg = self[i]
        return seg

    def limit_of(self, seg):
        """One past the highest offset ``seg`` may hold: the next segment's base offset
        (NO_LIMIT for the active segment)."""
        i = bisect_right(self, seg.base_offset, key=_base_offset)
        return self[i].base_offset if i < len(self) else NO_LIMIT

    def max_timestamp(self):
        """(segment, its max timestamp) of the segment holding the largest timestamp, the
        oldest such segment on a tie; (None, -1) when no segment has a timestamp."""
        best, best_ts = None, -1
        for seg in self:
            if seg.max_timestamp > best_ts:
                best, best_ts = seg, seg.max_timestamp
        return best, best_ts

    # -- Change ------------------------------------------------------------------------------

    def roll(self, base_offset):
        """Make a new empty segment at ``base_offset`` the active one (the old active one
        gets its final time index entry, Kafka's onBecomeInactiveSegment)."""
        self[-1].on_roll()
        new = Segment.create(self.fs, self.dir, base_offset, self.config)
        self.append(new)
        return new

    def drop(self, doomed):
        """Take ``doomed`` out of the list; the caller deletes their files (after making the
        new log start durable, Kafka's order)."""
        gone = {id(s) for s in doomed}
        self[:] = [s for s in self if id(s) not in gone]

    def replace(self, new_for):
        """Put new segments in place of old ones: ``new_for`` maps id(old segment) to its
        replacement; a run of old segments with one replacement becomes that one."""
        segments = []
        for seg in self:
            seg = new_for.get(id(seg), seg)
            if not segments or segments[-1] is not seg:
                segments.append(seg)
        self[:] = segments

    def delete_from(self, offset):
        """Delete whole segments from the end while they start at or after ``offset``,
        never the first one. Returns how many went."""
        count = 0
        while len(self) > 1 and self[-1].base_offset >= offset:
            self.pop().delete()
            count += 1
        return count

    def close_all(self):
        for seg in self:
            seg.close()
