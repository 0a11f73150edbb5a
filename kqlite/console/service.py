"""The console running: served by a broker's HTTP listener, or by ``kqlite ui``.

Theory of operation. A :class:`ConsoleService` owns one Console (app.py) and the task
that feeds its sampler every ``interval`` seconds with the monotonic clock; it hands
each request the same clock. :func:`attach_to_broker` plugs the console into a running
broker (``Broker.http_app``: the listener of ``--metrics-listen`` then serves it beside
``/metrics``); :func:`serve_data_dir` opens a data dir and serves the console on its own
listener, with no broker. Stopping cancels the sampler and, for ``kqlite ui``, closes the
listener and the Database.
"""

import asyncio
import contextlib
import logging
import time
from typing import Any, Callable, Optional

from ..server.http_listener import HttpRequest, HttpResponse, start_http
from .app import Console
from .auth import BrokerLogin
from .sources import BrokerSource, EmbeddedSource

__all__ = ["ConsoleService", "attach_to_broker", "serve_data_dir", "SAMPLE_INTERVAL"]

log = logging.getLogger("kqlite.console")

SAMPLE_INTERVAL = 5.0


class ConsoleService:
    def __init__(self, console: Console, interval: float = SAMPLE_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.interval = interval
        self.clock = clock
        self._task: "Optional[asyncio.Task[None]]" = None
        self.server: Any = None

    async def app(self, request: HttpRequest) -> HttpResponse:
        return await self.console.handle(request, self.clock())

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample_forever())

    async def _sample_forever(self) -> None:
        while True:
            try:
                await self.console.sample(self.clock())
            except asyncio.CancelledError:
                raise
            except Exception:       # a failed sample leaves a gap in the plot, no more
                log.exception("console sample failed")
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None


def attach_to_broker(broker: Any, node: Any = None, *, allow_writes: bool = False,
                     interval: float = SAMPLE_INTERVAL) -> ConsoleService:
    """Serve the console on ``broker``'s HTTP listener (call after the broker started:
    the login reads its bound listeners); ``node`` is its ClusterNode in a cluster."""
    source = BrokerSource(broker, node, allow_writes=allow_writes, login=BrokerLogin(broker))
    service = ConsoleService(Console(source), interval)
    broker.http_app = service.app
    service.start()
    return service


async def serve_data_dir(path: str, host: str = "127.0.0.1", port: int = 0, *,
                         allow_writes: bool = False,
                         interval: float = SAMPLE_INTERVAL) -> ConsoleService:
    """Open the data dir at ``path`` and serve the console on ``host:port`` (0: any free
    port; ``service.server.sockets[0]`` tells which)."""
    from ..db.database import Database
    loop = asyncio.get_running_loop()
    db = await loop.run_in_executor(None, lambda: Database(path,
                                                           retention_check_interval_ms=0))
    source = EmbeddedSource(db, allow_writes=allow_writes)
    service = _EmbeddedService(Console(source), interval)

    def routes(request: HttpRequest) -> Any:
        return service.app
    service.server = await start_http(host, port, routes, name="console")
    service.start()
    return service


class _EmbeddedService(ConsoleService):
    async def stop(self) -> None:
        await super().stop()
        source = self.console.source
        await asyncio.get_running_loop().run_in_executor(None, source.close)
        await asyncio.get_running_loop().run_in_executor(None, source.db.close)
