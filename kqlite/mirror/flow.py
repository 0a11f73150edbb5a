"""What every mirror mode shares: one flow from a source cluster to a target cluster, its
periodic loops, and its stop.

Theory of operation. A flow runs on one asyncio loop: :meth:`Flow.run` prepares the mode
(:meth:`Flow._start`), then runs the mode's loops (:meth:`Flow._loops`: the copy loop and
the steps it repeats at an interval) and the progress line until :meth:`Flow.stop`. A
step that fails on a cluster (a lost connection, a broker's error) is logged and tried
again at its next interval, so one unreachable broker never ends the mirror; the
connections to both clusters close whatever ends the run. ``clock`` is monotonic seconds,
passed in so that progress and pacing are a function of it.
"""

import abc
import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from .client import ClusterClient, MirrorClientError
from .metrics import MirrorMetrics
from .progress import Progress
from .selection import group_filter, topic_filter
from .settings import MirrorSettings

__all__ = ["Flow", "TP"]

log = logging.getLogger("kqlite.mirror")

TP = Tuple[str, int]


class Flow(abc.ABC):
    """One flow, source -> target; :meth:`run` until :meth:`stop` (see the module
    docstring)."""

    def __init__(self, settings: MirrorSettings, *, metrics: Optional[MirrorMetrics] = None,
                 on_progress: Optional[Callable[[str], None]] = None,
                 progress_interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings.validate()
        s = settings
        self.source = ClusterClient(s.source, name=f"source {s.source_alias}", timeout=s.timeout)
        self.target = ClusterClient(s.target, name=f"target {s.target_alias}", timeout=s.timeout)
        self.chosen = topic_filter(s.topics, s.exclude)
        self.groups = group_filter(s.groups, s.groups_exclude)
        self.metrics = metrics or MirrorMetrics()
        self.on_progress = on_progress
        self.progress_interval = progress_interval
        self.clock = clock
        self.progress = Progress()
        # Where each partition's copy stands: what the target acknowledged (MM2 mode),
        # the target's log end (offset-preserving mode).
        self.positions: Dict[TP, int] = {}
        self.delayed: Dict[TP, float] = {}          # tp -> clock time it may be fetched
        self._stopping = asyncio.Event()
        self.started = asyncio.Event()
        self.rounds = 0

    def stop(self) -> None:
        """Finish the current round, then end :meth:`run`."""
        self._stopping.set()

    async def run(self) -> None:
        try:
            await self._start()
            self.started.set()
            loops = self._loops()
            if self.on_progress is not None:
                loops.append(self._every(self.progress_interval, self._report, first=False))
            await asyncio.gather(*loops)
        finally:
            await self.source.close()
            await self.target.close()

    @abc.abstractmethod
    async def _start(self) -> None:
        """What the mode does before its loops start."""

    @abc.abstractmethod
    def _loops(self) -> List[Awaitable[None]]:
        """The mode's copy loop and the steps it repeats (:meth:`_every`)."""

    async def _every(self, interval: float, step: Callable[[], Any], first: bool = True) -> None:
        if not first:
            await self._sleep(interval)
        while not self._stopping.is_set():
            try:
                await step()
            except (MirrorClientError, OSError) as exc:
                log.warning("mirror: %s", exc)
            await self._sleep(interval)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _report(self) -> None:
        assert self.on_progress is not None
        self.on_progress(self.progress.line(self.clock()))
