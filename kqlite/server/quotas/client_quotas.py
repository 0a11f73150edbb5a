"""A broker's client quotas: the configured quotas, the three kinds measured, and how a
request is charged and throttled (Kafka's ``QuotaFactory`` and the throttling in
``KafkaApis`` and ``RequestChannel``).

Theory of operation. The broker holds one :class:`ClientQuotas`. Its table of configured
quotas (entities.py) follows a store (store.py: the data dir's file, or ZooKeeper in a
cluster). Three managers (manager.py) measure, per group of clients sharing a quota:

    kind      key                  measures                              throttle capped at
    produce   producer_byte_rate   each Produce request's size           -
    fetch     consumer_byte_rate   each Fetch response's record bytes    -
    request   request_percentage   each request's time, 1 s = 100 %      one window

The user is the principal's name (``ANONYMOUS`` on PLAINTEXT), as Kafka's. Every request
goes through :meth:`ClientQuotas.serve`, which runs the handler and then, as Kafka's
``sendResponseMaybeThrottle``:

- records the Produce size (``acks=0`` included) and the request's time (not for
  ``acks=0``, inter-broker requests and a follower's fetches, which Kafka exempts);
- answers with ``throttle_time_ms`` the larger of the throttles earned, and the connection
  then stops reading from the client until that time has passed, counted from the answer
  (KIP-219: the response goes out at once and the channel is muted; clients from Produce
  v6, Fetch v8, ... also wait on their side);
- counts the throttle against the kind that earned the larger one (metrics).

A Fetch decides for itself before its answer is built (:meth:`fetch_throttle`, called by
the Fetch handler): it records its records' bytes and its time so far, and if either
quota is exceeded it takes the bytes back and answers an empty response, as Kafka does.
Its largest read is also capped so that one answer cannot exceed what the quota lets
through in all but one window (:meth:`fetch_max_bytes`).
"""

import logging
import time

from ...protocol import ApiKey
from .admin_rules import describe
from .entities import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
                       QuotaConfigs)
from .manager import QuotaManager
from .request_cost import CURRENT, RequestCost, timed

__all__ = ["ClientQuotas", "DEFAULT_WINDOW_NUM", "DEFAULT_WINDOW_SIZE_SECONDS"]

log = logging.getLogger("kqlite.server")

DEFAULT_WINDOW_NUM = 11            # Kafka's quota.window.num
DEFAULT_WINDOW_SIZE_SECONDS = 1    # Kafka's quota.window.size.seconds

# Requests the request quota never charges: the cluster-action APIs kqlite serves
# (Kafka's ApiKeys with clusterAction), besides a follower's Fetch.
_EXEMPT = frozenset((ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                     ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION))


def _now_ms():
    return time.monotonic() * 1000.0


class ClientQuotas:
    """The broker's client quotas (see the module docstring)."""

    def __init__(self, *, window_num=DEFAULT_WINDOW_NUM,
                 window_size_seconds=DEFAULT_WINDOW_SIZE_SECONDS, clock=_now_ms):
        if window_num < 1 or window_size_seconds < 1:
            raise ValueError("quota.window.num and quota.window.size.seconds must be at "
                             "least 1")
        self.configs = QuotaConfigs()
        window_ms = window_size_seconds * 1000
        options = {"samples": window_num, "window_ms": window_ms}
        self.produce = QuotaManager("produce", PRODUCER_BYTE_RATE, self.configs, **options)
        self.fetch = QuotaManager("fetch", CONSUMER_BYTE_RATE, self.configs, **options)
        self.request = QuotaManager("request", REQUEST_PERCENTAGE, self.configs,
                                    cap_ms=window_ms, **options)
        self.clock = clock
        self.store = None

    # -- Lifecycle and the configured quotas ------------------------------------------------

    async def start(self, store):
        self.store = store
        for entity, quotas in (await store.start(self._changed)).items():
            self.configs.set(entity, quotas)
        configured = self.configs.items()
        if configured:
            log.info("client quotas: %d entities configured", len(configured))

    async def stop(self):
        if self.store is not None:
            await self.store.stop()

    def _changed(self, changes):
        for entity, quotas in changes.items():
            self.configs.set(entity, quotas)
            log.info("client quotas of %s now: %s", entity.describe(),
                     ", ".join(f"{k}={v:g}" for k, v in sorted(quotas.items())) or "none")

    async def alter(self, ops):
        """Store ``{entity: {key: value or None}}``; ``{entity: None or an exception}``."""
        stored = await self.store.alter(ops)
        out = {}
        for entity, outcome in stored.items():
            if isinstance(outcome, BaseException):
                out[entity] = outcome
            else:
                self._changed({entity: outcome})
                out[entity] = None
        return out

    def describe(self, quota_filter):
        return describe(self.configs.items(), quota_filter)

    # -- The request path -------------------------------------------------------------------

    async def serve(self, context, request, call):
        """Await ``call`` (the handler's coroutine) charging ``request`` its cost; returns
        ``(response, throttle ms)`` with the response's ``throttle_time_ms`` set."""
        api_key = request.api_key
        exempt = api_key in _EXEMPT or (api_key == ApiKey.FETCH and _from_follower(request))
        cost = None
        if not exempt and (self.request.enabled or self.fetch.enabled):
            cost = RequestCost()
            token = CURRENT.set(cost)
            try:
                response = await (timed(call, cost) if self.request.enabled else call)
            finally:
                CURRENT.reset(token)
        else:
            response = await call
        if exempt or not (self.produce.enabled or self.request.enabled
                          or (cost is not None and cost.throttle_ms)):
            return response, 0
        user, client_id = context.principal.name, context.client_id
        now = self.clock()
        earned = []
        if cost is not None and cost.throttle_ms:
            earned.append((cost.throttle_ms, cost.throttled_by))
        if api_key == ApiKey.PRODUCE and self.produce.enabled:
            earned.append((self.produce.record(user, client_id, request.size, now), self.produce))
        acks_zero = api_key == ApiKey.PRODUCE and request.body.get("acks") == 0
        if cost is not None and not cost.request_recorded and not acks_zero \
                and self.request.enabled:
            earned.append((self.request.record(user, client_id, cost.seconds * 100.0, now),
                           self.request))
        throttle, manager = max(earned, key=lambda e: e[0], default=(0, None))
        if throttle > 0:
            manager.note_throttled(user, client_id, throttle)
            if isinstance(response, dict):
                response["throttle_time_ms"] = max(response.get("throttle_time_ms") or 0,
                                                   throttle)
        return response, throttle

    def fetch_max_bytes(self, context):
        """What one consumer fetch may read at most under its quota (None: no cap)."""
        if not self.fetch.enabled:
            return None
        cap = self.fetch.max_value_in_window(context.principal.name, context.client_id)
        return None if cap is None else int(cap)

    def fetch_throttle(self, context, response_bytes):
        """Called by a consumer Fetch once its records are read: record their bytes and
        the request's time so far; the throttle earned, 0 when the response may be sent
        as read (else it goes out empty, its bytes taken back)."""
        cost = CURRENT.get()
        user, client_id = context.principal.name, context.client_id
        now = self.clock()
        earned = [(0, None)]
        if cost is not None and self.request.enabled:
            cost.request_recorded = True
            earned.append((self.request.record(user, client_id, cost.seconds * 100.0, now),
                           self.request))
        if self.fetch.enabled:
            earned.append((self.fetch.record(user, client_id, response_bytes, now), self.fetch))
        throttle, manager = max(earned, key=lambda e: e[0])
        if throttle > 0:
            if self.fetch.enabled:
                self.fetch.unrecord(user, client_id, response_bytes, now)
            if cost is not None:
                cost.throttle_ms, cost.throttled_by = throttle, manager
        return throttle

    # -- Metrics ----------------------------------------------------------------------------

    def metrics(self):
        """The metrics source (``Metrics.add_source``): throttled responses and time per
        user and client id, and each measured rate."""
        now = self.clock()
        counts, times, rates = [], [], []
        for manager in (self.produce, self.fetch, self.request):
            for tags, (count, ms) in sorted(manager.throttled.items()):
                labels = {"quota": manager.name, "user": tags.user, "client_id": tags.client_id}
                counts.append((labels, count))
                times.append((labels, ms))
            for tags, rate in sorted(manager.measured(now).items()):
                rates.append(({"quota": manager.name, "user": tags.user,
                               "client_id": tags.client_id}, round(rate, 3)))
        return [
            ("kqlite_quota_throttled_responses_total", "counter",
             "Responses throttled by a client quota, by the kind that throttled them.", counts),
            ("kqlite_quota_throttle_time_ms_total", "counter",
             "Milliseconds clients were throttled for, by quota kind, user and client id.",
             times),
            ("kqlite_quota_rate", "gauge",
             "The measured rate of each quota (bytes/s, or percent of a thread).", rates),
        ]


def _from_follower(request):
    body = request.body
    state = body.get("replica_state")
    replica_id = state["replica_id"] if state is not None else body.get("replica_id", -1)
    return replica_id >= 0
