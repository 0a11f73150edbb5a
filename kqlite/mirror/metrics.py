"""The mirror's Prometheus metrics, on ``prometheus-client``.

Theory of operation. Each :class:`MirrorMetrics` has a registry of its own (two mirrors
in one process never share counters), and :meth:`MirrorMetrics.serve` exposes it on
``/metrics`` with the library's HTTP server (a thread of its own: scraping never waits
on the mirror's event loop). The names:

=========================================  =================================================
``kqlite_mirror_records_total``            records copied, by source topic
``kqlite_mirror_bytes_total``              source batch bytes copied, by source topic
``kqlite_mirror_lag_records``              source high watermark minus position, by
                                           source topic and partition
``kqlite_mirror_replication_latency_seconds``  a copied batch's last record timestamp to
                                           the target's acknowledgement (histogram)
``kqlite_mirror_errors_total``             errors by kind (fetch, produce, source-batch)
``kqlite_mirror_transactions_total``       ``--exactly-once`` rounds by outcome (committed,
                                           aborted)
=========================================  =================================================
"""

from typing import Any, Optional, Tuple

__all__ = ["MirrorMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0)


class MirrorMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = CollectorRegistry()
        self.records = Counter("kqlite_mirror_records", "Records copied", ["topic"],
                               registry=self.registry)
        self.bytes = Counter("kqlite_mirror_bytes", "Source batch bytes copied", ["topic"],
                             registry=self.registry)
        self.lag = Gauge("kqlite_mirror_lag_records", "Source high watermark minus position",
                         ["topic", "partition"], registry=self.registry)
        self.latency = Histogram("kqlite_mirror_replication_latency_seconds",
                                 "Record timestamp to target acknowledgement",
                                 buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.errors = Counter("kqlite_mirror_errors", "Errors by kind", ["kind"],
                              registry=self.registry)
        self.transactions = Counter("kqlite_mirror_transactions",
                                    "Exactly-once rounds by outcome", ["outcome"],
                                    registry=self.registry)
        self._server: Optional[Tuple[Any, Any]] = None

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` (0: any free port); the port."""
        from prometheus_client import start_http_server
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = (server, thread)
        return int(server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            server, thread = self._server
            server.shutdown()
            server.server_close()
            thread.join(5)
            self._server = None

    def text(self) -> str:
        from prometheus_client import generate_latest
        return generate_latest(self.registry).decode()
