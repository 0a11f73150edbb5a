"""ListOffsets v0: offsets by segment, as Kafka 0.8-0.9 answered and Kafka 3.9 still does.

Before record timestamps (magic 1), a log knew time only through its segment files' last
modification times. Kafka's ``UnifiedLog.legacyFetchOffsetsBefore`` keeps that answer for
ListOffsets v0: one candidate per segment, ``(max(base offset, log start), mtime)``, plus
``(log end, now)`` when the active segment holds records. ``-1`` (latest) starts from the
last candidate, ``-2`` (earliest) from the first, a timestamp from the last candidate
modified at or before it; up to ``max_num_offsets`` offsets are returned from there
backwards, largest first. A consumer (``Partition.legacyFetchOffsetsForTimestamp``) never
sees an offset past the high watermark: such offsets are replaced by the high watermark.
"""

import os

from .segment import segment_name

__all__ = ["legacy_offsets_before", "LATEST", "EARLIEST"]

LATEST = -1       # WIRE: ListOffsets' special timestamps
EARLIEST = -2


def legacy_offsets_before(log, timestamp, max_num_offsets, *, now_ms, from_consumer):
    """The offsets ListOffsets v0 answers for ``timestamp`` (-1, -2 or ms), largest first.
    Raises ValueError for a negative ``max_num_offsets``, as Kafka fails such a request."""
    if max_num_offsets < 0:
        raise ValueError(f"max_num_offsets {max_num_offsets} is negative")
    bases = log.segments
    start, end, hw = log.start_offset, log.end_offset, log.high_watermark
    candidates = [(max(base, start), _mtime_ms(log.path, base)) for base in bases]
    if end > bases[-1]:
        candidates.append((end, now_ms))
    if timestamp == LATEST:
        first = len(candidates) - 1
    elif timestamp == EARLIEST:
        first = 0
    else:
        first = next((i for i in range(len(candidates) - 1, -1, -1)
                      if candidates[i][1] <= timestamp), -1)
    offsets = [candidates[i][0] for i in range(first, first - min(max_num_offsets, first + 1), -1)]
    offsets.sort(reverse=True)
    if from_consumer and any(o > hw for o in offsets):
        offsets = [hw] + [o for o in offsets if o <= hw]
    return offsets


def _mtime_ms(directory, base):
    """A segment file's modification time in ms; 0 when retention deleted it meanwhile (as
    Java's File.lastModified answers for a missing file)."""
    try:
        return os.stat(os.path.join(directory, segment_name(base))).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return 0
