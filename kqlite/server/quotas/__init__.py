"""Client quotas: produce and fetch byte rates and request time, per user and client id,
with Kafka's precedence, windows and throttling (KIP-13, KIP-55, KIP-124, KIP-219).

- ``entities``: who a quota applies to, and which configured quota a request is held to;
- ``rate``: Kafka's sampled rate, and the throttle time of a rate over its bound (pure);
- ``manager``: one kind of quota, its rates per group of clients sharing it (pure);
- ``request_cost``: a request's time on the event loop and in storage threads;
- ``client_quotas``: :class:`ClientQuotas`, the broker's: what each request is charged and
  the throttle it earns;
- ``admin_rules``: DescribeClientQuotas' and AlterClientQuotas' rules (pure);
- ``store``: where quotas are kept (the interface; a single broker's data-dir file).

The broker holds one ``ClientQuotas`` (``broker.quotas``); the connection mutes a
throttled client (broker.py); docs/security.md, "Quotas", is the operator's view.
"""

from .client_quotas import DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_SECONDS, ClientQuotas

__all__ = ["ClientQuotas", "DEFAULT_WINDOW_NUM", "DEFAULT_WINDOW_SIZE_SECONDS"]
