"""Time series the console plots: the last hour of samples, in memory, bounded.

Theory of operation. A :class:`Series` keeps ``(time, value)`` pairs no older than
WINDOW seconds before its newest, and at most MAX_POINTS of them (a sample every second
for an hour), so a series never grows past a fixed size however often it is fed.
:class:`Samples` holds the series by name, at most MAX_SERIES of them (the oldest-fed
name is dropped first), so neither a flood of groups nor of topics grows memory without
bound. Times are passed in (seconds, any monotonic clock): nothing here reads a clock.

:class:`Rates` turns counters (records in, bytes in, bytes out) into per-second rates
between two consecutive samples.
"""

from collections import OrderedDict, deque
from typing import Any, Optional

__all__ = ["Series", "Samples", "Rates", "WINDOW", "MAX_POINTS", "MAX_SERIES"]

WINDOW = 3600.0
MAX_POINTS = 3600
MAX_SERIES = 2000


class Series:
    def __init__(self) -> None:
        self.points: "deque[tuple[float, float]]" = deque(maxlen=MAX_POINTS)

    def add(self, now: float, value: float) -> None:
        self.points.append((now, value))
        while self.points and self.points[0][0] < now - WINDOW:
            self.points.popleft()

    def last(self) -> Optional[float]:
        return self.points[-1][1] if self.points else None


class Samples:
    def __init__(self) -> None:
        self._series: "OrderedDict[str, Series]" = OrderedDict()

    def add(self, name: str, now: float, value: float) -> None:
        series = self._series.pop(name, None) or Series()
        series.add(now, value)
        self._series[name] = series
        while len(self._series) > MAX_SERIES:
            self._series.popitem(last=False)

    def get(self, name: str) -> list[Any]:
        series = self._series.get(name)
        return list(series.points) if series is not None else []

    def names(self, prefix: str = "") -> list[Any]:
        return sorted(n for n in self._series if n.startswith(prefix))


class Rates:
    """Per-second rates of counters between consecutive calls of :meth:`feed`."""

    def __init__(self) -> None:
        self._last: Optional[tuple[float, dict[Any, Any]]] = None

    def feed(self, now: float, counters: dict[Any, Any]) -> dict[Any, Any]:
        """``{name: rate}`` since the previous feed ({} on the first, or when the
        clock did not move)."""
        last, self._last = self._last, (now, dict(counters))
        if last is None or now <= last[0]:
            return {}
        elapsed = now - last[0]
        return {name: max(0.0, (value - last[1].get(name, value)) / elapsed)
                for name, value in counters.items()}
