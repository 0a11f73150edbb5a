"""A rate over a sliding window of samples, as Kafka's metrics measure a quota: its
``SampledStat`` with a ``WindowedSum`` under a ``Rate``. Pure: the time (in ms) is passed
in to every call.

Theory of operation. ``samples`` samples of ``window_ms`` each (Kafka's quota.window.num,
11, and quota.window.size.seconds, 1 s). A recorded value goes to the current sample; a
sample is complete ``window_ms`` after it began, and the next record then starts the next
sample, reusing the oldest slot (the ring). Before measuring, every sample that began
``samples * window_ms`` or more ago is reset to start now (Kafka's
``purgeObsoleteSamples``). The rate is the sum of the samples over the window they span:

    window = now - start of the oldest sample, but at least (samples - 1) windows
             (fewer full windows than that are padded up), and at least 1 ms

so a client that starts sending is measured as if it had been idle for ten seconds
before, and a burst cannot pass the bound by being measured over a short window (Kafka's
``Rate.windowSize``).

A quota's bound is a value of this rate (bytes, or percent of a thread, per second).
Kafka records first and checks after, so the request that crosses the bound is served and
the next ones wait (:func:`throttle_ms`: Kafka's ``QuotaUtils.throttleTime``, how long
until the rate is back at the bound if nothing more is recorded).
"""

__all__ = ["Rate", "throttle_ms"]


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms):
        self.start_ms = start_ms
        self.value = 0.0

    def reset(self, now_ms):
        self.start_ms = now_ms
        self.value = 0.0


class Rate:
    """Kafka's sampled Rate (see the module docstring)."""

    __slots__ = ("samples", "window_ms", "_ring", "_current")

    def __init__(self, samples, window_ms):
        if samples < 1 or window_ms < 1:
            raise ValueError("a rate needs at least one sample of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._ring = []
        self._current = 0

    def record(self, value, now_ms):
        """Add ``value`` at ``now_ms`` (a negative value takes back what was recorded)."""
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        sample = self._ring[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._ring):
                sample = _Sample(now_ms)
                self._ring.append(sample)
            else:
                sample = self._ring[self._current]
                sample.reset(now_ms)
        sample.value += value

    def window_size_ms(self, now_ms):
        """The window the rate is measured over at ``now_ms`` (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        oldest = min(s.start_ms for s in self._ring) if self._ring else now_ms
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms):
        """The rate at ``now_ms``, per second."""
        window = self.window_size_ms(now_ms)
        return sum(s.value for s in self._ring) / (window / 1000.0)

    def _purge(self, now_ms):
        expire = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.start_ms >= expire:
                sample.reset(now_ms)


def throttle_ms(rate, bound, now_ms, *, cap_ms=None):
    """How long (ms) a client whose ``rate`` is above ``bound`` waits before the rate is
    back at the bound (Kafka's ``QuotaUtils.throttleTime``): the excess as a share of the
    bound, times the window the rate is measured over; 0 at or under the bound. ``cap_ms``
    bounds it (the request quota caps it at one window: ``boundedThrottleTime``). A bound
    of 0 allows nothing: the wait is the whole measured window."""
    value = rate.measure(now_ms)
    if value <= bound:
        return 0
    window = rate.window_size_ms(now_ms)
    # Java's Math.round: half up.
    wait = window if bound <= 0 else int((value - bound) / bound * window + 0.5)
    return wait if cap_ms is None else min(wait, cap_ms)
