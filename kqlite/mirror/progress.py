"""A mirror's progress per partition: what was copied, how far behind the source it is,
and the line it prints while it runs. Pure: the caller passes the clock.

Theory of operation. For each mirrored source partition the table holds the next source
offset to copy (the *position*) and the source's high watermark as its last Fetch answer
gave it; the **lag** is their difference (never negative: a watermark can be older than a
position just advanced). Records and bytes copied are counted, and the **replication
latency** of a copied batch is the time from its last record's timestamp (the source's
CreateTime or LogAppendTime) to the target's acknowledgement.

:meth:`Progress.line` is the progress line: totals, the records per second since the last
line (``now`` from the caller's monotonic clock), and the lag.
"""

from typing import Dict, NamedTuple, Optional, Tuple

__all__ = ["Progress", "PartitionProgress"]


class PartitionProgress(NamedTuple):
    position: int
    high_watermark: int
    records: int
    bytes: int

    @property
    def lag(self) -> int:
        return max(0, self.high_watermark - self.position)


class Progress:
    """The table; see the module docstring."""

    def __init__(self) -> None:
        self.partitions: Dict[Tuple[str, int], PartitionProgress] = {}
        self.records = 0
        self.bytes = 0
        self._last_line: Optional[Tuple[float, int]] = None      # (when, records)

    def start(self, tp: Tuple[str, int], position: int) -> None:
        old = self.partitions.get(tp)
        self.partitions[tp] = PartitionProgress(
            position, max(position, old.high_watermark if old else 0),
            old.records if old else 0, old.bytes if old else 0)

    def fetched(self, tp: Tuple[str, int], high_watermark: int) -> None:
        p = self.partitions[tp]
        self.partitions[tp] = p._replace(high_watermark=high_watermark)

    def copied(self, tp: Tuple[str, int], position: int, records: int, size: int) -> None:
        p = self.partitions[tp]
        self.partitions[tp] = p._replace(position=position, records=p.records + records,
                                         bytes=p.bytes + size)
        self.records += records
        self.bytes += size

    def moved(self, tp: Tuple[str, int], position: int) -> None:
        """The position moved without copying (markers, aborted records, a reset)."""
        self.partitions[tp] = self.partitions[tp]._replace(position=position)

    def lag(self) -> int:
        return sum(p.lag for p in self.partitions.values())

    def line(self, now: float) -> str:
        rate = ""
        if self._last_line is not None and now > self._last_line[0]:
            per_second = (self.records - self._last_line[1]) / (now - self._last_line[0])
            rate = f", {per_second:,.0f} records/s"
        self._last_line = (now, self.records)
        return (f"mirrored {self.records:,} records ({self.bytes:,} bytes){rate}; "
                f"{len(self.partitions)} partitions, lag {self.lag():,}")
