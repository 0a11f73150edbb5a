"""One kind of client quota (produce bytes, fetch bytes, request time): the rates measured
per group of clients that share a quota, and how long a client that went over waits.
Pure: the time is passed in.

Theory of operation (Kafka's ``ClientQuotaManager``). For each request the configured
quotas (entities.py) say which bound applies and who shares it (the metric tags); the
rate of those tags (rate.py) records the request's value and, if it is now above the
bound, the client is throttled for :func:`~.rate.throttle_ms`. Nothing is measured for a
request without a bound, nor at all while no entity has this kind's key. Measuring
follows the configuration at each call: a changed quota applies to the next request, the
rate measured so far kept.

A rate no request has touched for an hour is dropped (Kafka's inactive sensors expire
after one hour), so a broker that has seen many client ids keeps only the live ones.
:attr:`QuotaManager.throttled` counts, per tags, the responses throttled and their total
throttle time: the broker's metrics publish them.
"""

from .rate import Rate, throttle_ms

__all__ = ["QuotaManager", "INACTIVE_MS"]

INACTIVE_MS = 3600 * 1000      # Kafka's InactiveSensorExpirationTimeSeconds


class _Sensor:
    __slots__ = ("rate", "last_ms")

    def __init__(self, rate, now_ms):
        self.rate = rate
        self.last_ms = now_ms


class QuotaManager:
    """The quotas of config key ``key`` (see the module docstring). ``cap_ms`` caps a
    throttle (the request quota's: one window)."""

    def __init__(self, name, key, configs, *, samples, window_ms, cap_ms=None):
        self.name = name
        self.key = key
        self.configs = configs
        self.samples = samples
        self.window_ms = window_ms
        self.cap_ms = cap_ms
        self._sensors = {}           # Tags -> _Sensor
        self.throttled = {}          # Tags -> [responses throttled, total throttle ms]
        self._last_expiry_ms = None

    @property
    def enabled(self):
        return self.configs.has(self.key)

    def record(self, user, client_id, value, now_ms):
        """Record ``value`` for a request of ``user`` with ``client_id``; the throttle time
        (ms) it earns, 0 if none."""
        tags, bound = self.configs.resolve(self.key, user, client_id)
        if bound is None:
            return 0
        sensor = self._sensor(tags, now_ms)
        sensor.rate.record(value, now_ms)
        return throttle_ms(sensor.rate, bound, now_ms, cap_ms=self.cap_ms)

    def unrecord(self, user, client_id, value, now_ms):
        """Take back a recorded ``value`` (a fetch answered empty because it was
        throttled: Kafka's ``unrecordQuotaSensor``)."""
        tags, bound = self.configs.resolve(self.key, user, client_id)
        if bound is not None:
            self._sensor(tags, now_ms).rate.record(-value, now_ms)

    def max_value_in_window(self, user, client_id):
        """The most one request may take: the bound over all but one sample window
        (Kafka's ``getMaxValueInQuotaWindow``); None without a bound."""
        _tags, bound = self.configs.resolve(self.key, user, client_id)
        if bound is None:
            return None
        return bound * (self.samples - 1) * self.window_ms / 1000.0

    def note_throttled(self, user, client_id, ms):
        """Count a response throttled by this kind of quota for ``ms``."""
        tags, _bound = self.configs.resolve(self.key, user, client_id)
        entry = self.throttled.setdefault(tags, [0, 0])
        entry[0] += 1
        entry[1] += ms

    def _sensor(self, tags, now_ms):
        self._expire(now_ms)
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = _Sensor(Rate(self.samples, self.window_ms), now_ms)
        sensor.last_ms = now_ms
        return sensor

    def _expire(self, now_ms):
        if self._last_expiry_ms is not None and now_ms - self._last_expiry_ms < 60_000:
            return
        self._last_expiry_ms = now_ms
        for tags in [t for t, s in self._sensors.items() if now_ms - s.last_ms > INACTIVE_MS]:
            del self._sensors[tags]
            self.throttled.pop(tags, None)

    def measured(self, now_ms):
        """``{Tags: rate}`` of every rate measured now (for metrics and tests)."""
        return {tags: s.rate.measure(now_ms) for tags, s in self._sensors.items()}
