"""``kqlite ui DATA_DIR``: the web console over a data dir, with no broker.

Read-only and on the loopback address unless told otherwise: ``--allow-writes`` shows
the forms that create and delete topics, produce a test record and reset a group's
offsets; ``--listen HOST:PORT`` binds elsewhere (the console has no login without a
broker: anyone who reaches the port reads the data dir)."""

import asyncio
import signal
import sys

from .serve import _split

__all__ = ["add_parser", "run", "DEFAULT_LISTEN"]

DEFAULT_LISTEN = "127.0.0.1:8090"


def add_parser(sub):
    p = sub.add_parser("ui", help="serve the web console over a data dir (no broker)",
                       description="Serve the web console (topics, messages, consumer groups "
                                   "and lag) over DATA_DIR at http://HOST:PORT/. Read-only "
                                   "unless --allow-writes; loopback unless --listen says "
                                   "otherwise.")
    p.add_argument("data_dir", metavar="DATA_DIR")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve (default {DEFAULT_LISTEN}; port 0: any free port)")
    p.add_argument("--allow-writes", action="store_true",
                   help="allow creating and deleting topics, producing a test record and "
                        "resetting offsets (default: read-only)")
    p.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between two samples of lag for the plots (default 5)")
    p.set_defaults(run=run)


async def _main(args):
    from ..console import serve_data_dir
    try:
        host, port = _split(args.listen)
    except ValueError as exc:
        print(f"kqlite ui: {exc}", file=sys.stderr)
        return 2
    service = await serve_data_dir(args.data_dir, host, port, allow_writes=args.allow_writes,
                                   interval=max(0.5, args.sample_interval))
    bound = service.server.sockets[0].getsockname()
    print(f"kqlite console on http://{host}:{bound[1]}/ "
          f"({'read-write' if args.allow_writes else 'read-only'}), data dir "
          f"{args.data_dir}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await service.stop()
    return 0


def run(args):
    return asyncio.run(_main(args))
