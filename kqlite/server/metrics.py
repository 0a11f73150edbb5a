"""Prometheus ``/metrics`` for the broker, in the text exposition format.

Counters: messages and bytes in, bytes out, requests and summed latency per API,
protocol errors, connections refused over their address's cap, connections closed
idle, failed accepts, operations failed for lack of disk space or descriptors;
a histogram of request time per API under Kafka's name (request_latency.py, through the
prometheus_client library); gauges: open connections and their cap, request bytes held
(queued.max.request.bytes) now and at most, connections waiting for that memory, open
logs and their limit, log size/segments/end offset per open partition, committed-offset
lag per consumer group and open partition. A scrape never opens a log: partitions whose logs are
closed (idle, see kqlite/db/log_manager.py) have no per-partition samples.

Theory of operation: a scrape (:meth:`Metrics.scrape`) reads everything that lives in
storage -- the open logs' sizes, segments and end offsets, which may wait for a log's
lock or read its shared state, and the groups' committed offsets -- in one storage-thread
call (:func:`read_storage`, through storage_io.py), so the event loop never waits on a
log for it; the counters, the gauges kept in memory and the sources added by
:meth:`Metrics.add_source` are read on the event loop, where they live.
"""

import logging
from typing import NamedTuple

from .http_listener import HttpResponse, start_http
from .request_latency import RequestLatency

__all__ = ["Metrics", "StorageSamples", "read_storage"]

log = logging.getLogger("kqlite.server")


class StorageSamples(NamedTuple):
    """What a scrape reads from storage: ``[(labels, value)]`` per family, and the
    number of logs open and their limit."""
    open_logs: int
    max_open_logs: int
    sizes: list
    segments: list
    ends: list
    lag: list


def read_storage(db):
    """The StorageSamples of Database ``db``, in a storage thread. Only the logs open now:
    opening every partition of a big data dir for a scrape would evict the logs in use
    (see kqlite/db/log_manager.py)."""
    sizes, segments, ends = [], [], []
    end_of = {}
    for topic, p in sorted(db.logs.open_keys()):
        with db.logs.lease_if_open((topic, p)) as lg:
            if lg is None:
                continue
            labels = {"topic": topic, "partition": p}
            sizes.append((labels, lg.size))
            segments.append((labels, len(lg.segments)))
            end_of[(topic, p)] = lg.end_offset
            ends.append((labels, end_of[(topic, p)]))
    lag = []
    for (group, topic, p), offset in sorted(db.offsets.known_commits().items()):
        if (topic, p) in end_of:
            lag.append(({"group": group, "topic": topic, "partition": p},
                        max(0, end_of[(topic, p)] - offset)))
    return StorageSamples(len(end_of), db.logs.max_open, sizes, segments, ends, lag)


class Metrics:
    def __init__(self, broker):
        self.broker = broker
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.connections = 0
        self.protocol_errors = 0
        self.idle_closed = 0
        self.accept_errors = 0
        self.failed_authentications = 0
        self.expired_sessions_closed = 0
        self.requests = {}     # api name -> [count, total seconds, request bytes]
        self.sources = []      # callables adding samples the server does not know of
        self.latency = RequestLatency()   # Kafka's RequestMetrics TotalTimeMs, per request

    def add_source(self, source):
        """Add ``source()`` to every scrape: it runs on the event loop (no I/O) and
        returns ``(name, kind, help, [(labels dict, value), ...])`` tuples. This is how
        a layer above the server (the cluster) publishes its own metrics."""
        self.sources.append(source)

    def observe(self, api, seconds, size, names=None):
        """A request of ``api`` answered in ``seconds``; ``names``: the labels of its
        latency (request_latency.request_names; default the api alone)."""
        entry = self.requests.setdefault(api, [0, 0.0, 0])
        entry[0] += 1
        entry[1] += seconds
        entry[2] += size
        self.latency.observe(names or (api,), seconds)

    def latency_quantiles(self):
        """``{api: (count, p50 ms, p99 ms)}`` of the request-time histogram."""
        return self.latency.quantiles()

    async def scrape(self):
        """The text of one scrape: storage read in a storage thread, the rest here."""
        storage = await self.broker.io.run(read_storage, self.broker.db)
        return self.render(storage)

    def render(self, storage):
        """The text of a scrape, given what it read from storage (StorageSamples); reads
        only memory."""
        lines = []

        def metric(name, kind, help_text, samples):
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                label = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{name}{{{label}}} {value}" if label else f"{name} {value}")

        metric("kqlite_messages_in_total", "counter", "Records appended by Produce requests.",
               [({}, self.messages_in)])
        metric("kqlite_bytes_in_total", "counter", "Record bytes received by Produce.",
               [({}, self.bytes_in)])
        metric("kqlite_bytes_out_total", "counter", "Response bytes sent.", [({}, self.bytes_out)])
        metric("kqlite_connections", "gauge", "Open client connections.",
               [({}, self.connections)])
        metric("kqlite_protocol_errors_total", "counter", "Connections closed on bad frames.",
               [({}, self.protocol_errors)])
        broker = self.broker
        metric("kqlite_max_connections", "gauge", "max.connections: the acceptor waits there.",
               [({}, broker.limits.max_connections)])
        metric("kqlite_connections_refused_total", "counter",
               "Connections closed at once: their address was at max.connections.per.ip.",
               [({}, broker.limits.refused)])
        metric("kqlite_idle_connections_closed_total", "counter",
               "Connections closed after connections.max.idle.ms without a request.",
               [({}, self.idle_closed)])
        metric("kqlite_accept_errors_total", "counter",
               "Failed accepts (out of descriptors: each waits for a close or 1 s).",
               [({}, self.accept_errors)])
        metric("kqlite_failed_authentications_total", "counter",
               "Connections whose TLS handshake or SASL authentication failed.",
               [({}, self.failed_authentications)])
        metric("kqlite_expired_sessions_closed_total", "counter",
               "Connections closed at a request after their session expired (KIP-368).",
               [({}, self.expired_sessions_closed)])
        memory = broker.request_memory
        metric("kqlite_queued_request_bytes", "gauge",
               "Bytes of requests read and not yet answered.", [({}, memory.in_use)])
        metric("kqlite_queued_request_bytes_max", "gauge",
               "The most bytes of requests ever held at once.", [({}, memory.peak)])
        metric("kqlite_queued_max_request_bytes", "gauge",
               "queued.max.request.bytes: over it connections stop reading.",
               [({}, memory.capacity)])
        metric("kqlite_connections_waiting_for_memory", "gauge",
               "Connections not reading until request memory is released.",
               [({}, memory.waiting)])
        metric("kqlite_resource_exhausted_total", "counter",
               "Operations failed for lack of disk space or file descriptors.",
               [({"resource": r}, n) for r, n in sorted(broker.io.alarms.failures.items())])
        metric("kqlite_requests_total", "counter", "Requests handled, per API.",
               [({"api": api}, v[0]) for api, v in sorted(self.requests.items())])
        metric("kqlite_request_seconds_total", "counter", "Time spent handling requests, per API.",
               [({"api": api}, round(v[1], 6)) for api, v in sorted(self.requests.items())])
        metric("kqlite_open_logs", "gauge", "Partition logs open now.",
               [({}, storage.open_logs)])
        metric("kqlite_max_open_logs", "gauge", "Idle logs beyond this many are closed.",
               [({}, storage.max_open_logs)])
        metric("kqlite_log_size_bytes", "gauge", "Bytes on disk per open partition.",
               storage.sizes)
        metric("kqlite_log_segments", "gauge", "Segments per open partition.", storage.segments)
        metric("kqlite_log_end_offset", "gauge", "Log end offset per open partition.",
               storage.ends)
        metric("kqlite_consumer_group_lag", "gauge",
               "Log end minus committed offset, for open partitions.", storage.lag)
        for source in self.sources:
            try:
                families = list(source())
            except Exception:   # a broken source must not take the whole scrape down
                log.exception("metrics source %r failed", source)
                continue
            for name, kind, help_text, samples in families:
                metric(name, kind, help_text, samples)
        return "\n".join(lines) + "\n" + self.latency.exposition()

    async def start(self, host, port):
        """Serve ``/metrics`` and, through ``broker.http_app`` when the layer above set
        one (the console), every other path; see http_listener.py."""
        async def metrics(_request):
            body = (await self.scrape()).encode()
            return HttpResponse(200, "text/plain; version=0.0.4", body)

        def routes(request):
            if request.path == "/metrics":
                return metrics
            return getattr(self.broker, "http_app", None)
        server = await start_http(host, port, routes, name="metrics")
        log.info("metrics on http://%s:%d/metrics", host, server.sockets[0].getsockname()[1])
        return server
