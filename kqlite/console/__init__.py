"""The web console: topics, messages, consumer groups and cluster health in a browser.

Theory of operation. One console serves two places: ``kqlite ui DATA_DIR`` (a data dir
opened read-only by default, no broker) and a broker's HTTP listener
(``kqlite serve --metrics-listen HOST:PORT --console``, single broker or cluster), beside
``/metrics``. The modules, lowest first:

- limits.py: every bound, and the checks that turn request text into bounded values;
- values.py, assignment.py: bytes shown as text, JSON or hex; a member's assignment;
- reads.py: what a page reads from a data dir, in a storage thread, never every log;
- sampler.py: the last hour of lag and throughput samples, bounded;
- charts.py: line charts as inline SVG; static/console.js refreshes them;
- pages.py: the HTML pages;
- auth.py: HTTP Basic checked against the broker's own SASL listener;
- sources.py: a data dir or a broker as the pages' source (reads, memory, writes);
- app.py: the router, request in and response out, the clock passed in;
- service.py: the console running, on a broker or on its own listener.

It sits above the server and the cluster (it reads a broker's memory and talks to it
as a Kafka client for writes); the server knows it only as ``Broker.http_app``.
"""

from .service import ConsoleService, attach_to_broker, serve_data_dir

__all__ = ["ConsoleService", "attach_to_broker", "serve_data_dir"]
