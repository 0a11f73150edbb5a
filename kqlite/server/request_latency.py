"""Request latency per API as a Prometheus histogram, under Kafka's metric name.

Kafka measures each request's total time in ``kafka.network:type=RequestMetrics,
name=TotalTimeMs,request=<name>`` (a histogram in milliseconds; ``request`` is the API's
name, ``Produce``, ``Fetch``, ``Metadata``...). Prometheus' JMX exporter turns that into
``kafka_network_requestmetrics_totaltimems`` with a ``request`` label, the name kept
here, so dashboards written for Kafka read it. As Kafka's ``RequestChannel`` does, a
Fetch is counted twice (:func:`request_names`): under ``Fetch``, and under
``FetchFollower`` when a replica sent it (replica id >= 0), else ``FetchConsumer``.

The histogram is the ``prometheus_client`` library's, in a registry of its own per broker
(two brokers in one process keep their own counts); :meth:`RequestLatency.exposition`
is its text, which the broker's scrape appends to the families it writes itself.
:func:`quantile` estimates a quantile from the cumulative bucket counts as Prometheus'
``histogram_quantile`` does: linear within the bucket the rank falls in.
"""

from typing import Any, Sequence

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

__all__ = ["RequestLatency", "quantile", "request_names", "BUCKETS_MS", "METRIC"]

METRIC = "kafka_network_requestmetrics_totaltimems"
BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
              5000.0, 10000.0, 30000.0)


_FIRST_REPLICA_STATE_VERSION = 15    # Fetch v15 moved replica_id into replica_state


def request_names(name: str, version: int, body: Any) -> tuple[str, ...]:
    """The ``request`` labels one request counts under (see the module docstring)."""
    if name != "Fetch":
        return (name,)
    if version >= _FIRST_REPLICA_STATE_VERSION:
        replica_id = (body.get("replica_state") or {}).get("replica_id", -1)
    else:
        replica_id = body.get("replica_id", -1)
    return ("FetchFollower" if replica_id >= 0 else "FetchConsumer", name)


def quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float:
    """The ``q`` quantile (0-1) of a histogram: ``bounds`` the finite upper bounds,
    ``cumulative`` the counts at each bound and then the total (+Inf). 0.0 when empty;
    the largest finite bound when the rank falls in the +Inf bucket (as Prometheus)."""
    total = cumulative[-1] if cumulative else 0
    if total <= 0:
        return 0.0
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, cumulative):
        if count >= rank:
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return float(bounds[-1])


class RequestLatency:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.histogram = Histogram(
            METRIC, "Total time of a request, from read to response sent (ms), by request "
                    "(Kafka's kafka.network RequestMetrics TotalTimeMs).",
            ["request"], buckets=BUCKETS_MS, registry=self.registry)
        self._children: dict[str, Any] = {}

    def observe(self, names: Sequence[str], seconds: float) -> None:
        """One request of total time ``seconds``, under each of ``names``."""
        for name in names:
            child = self._children.get(name)
            if child is None:    # labels() costs a lock and a lookup: once per name
                child = self._children[name] = self.histogram.labels(request=name)
            child.observe(seconds * 1000.0)

    def exposition(self) -> str:
        return generate_latest(self.registry).decode()

    def quantiles(self) -> dict[Any, Any]:
        """``{request: (count, p50 ms, p99 ms)}``."""
        buckets: dict[Any, Any] = {}
        for family in self.histogram.collect():
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets.setdefault(sample.labels["request"], []).append(
                        (float(sample.labels["le"]), sample.value))
        out = {}
        for request, pairs in buckets.items():
            pairs.sort()
            bounds = [b for b, _ in pairs if b != float("inf")]
            cumulative = [c for _, c in pairs]
            out[request] = (int(cumulative[-1]), quantile(0.5, bounds, cumulative),
                            quantile(0.99, bounds, cumulative))
        return out
