"""``kqlite mirror --source ... --target ... --topics REGEX``: run a mirror until SIGTERM;
``kqlite mirror promote TOPIC --target ... [--source ...] [--force]``: make a mirror topic
writable (after the copy caught up with the source, or at once with ``--force``).

``--mode`` unset: preserve when the target can hold mirror topics (a kqlite broker), else
mm2 (kqlite/mirror/preserve.py, ``chosen_mode``); mm2 with ``--exactly-once``.

The progress line goes to stderr every ``--progress-interval`` seconds; ``--metrics-port``
serves the mirror's Prometheus metrics. SIGTERM or SIGINT stops it after the current copy
round (its positions written), and the command exits 0; a restart resumes there. A mirror
fenced by a newer one with the same transactional id, or whose target refuses
transactions, exits 1 with the reason.
"""

import asyncio
import signal
import sys

from ..mirror import Mirror, MirrorSettings, PreservingMirror, mode_of, promote
from ..mirror.client import ClusterClient, MirrorClientError
from ..mirror.metrics import MirrorMetrics
from ..mirror.selection import MirrorConfigError
from ..mirror.transactions import MirrorFatalError


def add_parser(sub):
    p = sub.add_parser("mirror", help="mirror topics from one cluster to another "
                                      "(offsets preserved, or MM2 formats)")
    p.add_argument("action", nargs="*", metavar="promote TOPIC",
                   help="promote TOPIC: make a mirror topic writable")
    p.add_argument("--force", action="store_true",
                   help="promote at once, without waiting for the copy to catch up")
    p.add_argument("--source", help="the source cluster's HOST:PORT[,...]")
    p.add_argument("--target", required=True, help="the target cluster's HOST:PORT[,...]")
    p.add_argument("--topics", default=".*", help="topics to mirror (a regex, full match)")
    p.add_argument("--exclude", help="topics never mirrored (a regex, besides MM2's)")
    p.add_argument("--groups", default=".*", help="groups whose offsets are checkpointed")
    p.add_argument("--groups-exclude", help="groups never checkpointed (besides MM2's)")
    p.add_argument("--mode", default="", choices=("", "preserve", "mm2"),
                   help="preserve (offsets kept; the default into a kqlite broker) or mm2")
    p.add_argument("--policy", default="default", choices=("default", "identity"),
                   help="MM2's replication policy: source.topic (default) or same names")
    p.add_argument("--source-alias", default="source")
    p.add_argument("--target-alias", default="target")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="of the topics created on the target (-1: the broker's default)")
    p.add_argument("--offset-lag-max", type=int, default=100, help="MM2's offset.lag.max")
    p.add_argument("--offset-syncs-location", choices=("source", "target"), default="source")
    p.add_argument("--sync-group-offsets", action="store_true",
                   help="commit translated offsets to the target's idle groups (KIP-545)")
    p.add_argument("--exactly-once", action="store_true",
                   help="mm2 mode: each round's records and positions in one target "
                        "transaction (a target with transactions)")
    p.add_argument("--mirror-id", default="mirror",
                   help="this mirror's name in its transactional id: a mirror started with "
                        "the same aliases and id fences the one before it")
    p.add_argument("--no-heartbeats", action="store_true")
    p.add_argument("--no-checkpoints", action="store_true")
    p.add_argument("--refresh-interval", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--checkpoint-interval", type=float, default=5.0, metavar="SECONDS")
    p.add_argument("--heartbeat-interval", type=float, default=1.0, metavar="SECONDS")
    p.add_argument("--progress-interval", type=float, default=5.0, metavar="SECONDS")
    p.add_argument("--metrics-port", type=int, help="serve /metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1")
    p.set_defaults(run=run)


def settings_of(args):
    return MirrorSettings(
        source=args.source, target=args.target, topics=args.topics, exclude=args.exclude,
        groups=args.groups, groups_exclude=args.groups_exclude, mode=args.mode,
        policy=args.policy, source_alias=args.source_alias, target_alias=args.target_alias,
        replication_factor=args.replication_factor, offset_lag_max=args.offset_lag_max,
        offset_syncs_location=args.offset_syncs_location,
        sync_group_offsets=args.sync_group_offsets, emit_heartbeats=not args.no_heartbeats,
        emit_checkpoints=not args.no_checkpoints, refresh_interval=args.refresh_interval,
        checkpoint_interval=args.checkpoint_interval,
        heartbeat_interval=args.heartbeat_interval, exactly_once=args.exactly_once,
        mirror_id=args.mirror_id)


def run(args, err=sys.stderr):
    if args.action:
        return run_promote(args, err)
    if not args.source:
        print("kqlite mirror: --source is required", file=err)
        return 2
    try:
        settings = settings_of(args).validate()
    except MirrorConfigError as exc:
        print(f"kqlite mirror: {exc}", file=err)
        return 2
    metrics = MirrorMetrics()
    if args.metrics_port is not None:
        port = metrics.serve(args.metrics_port, args.metrics_host)
        print(f"kqlite mirror: metrics on http://{args.metrics_host}:{port}/metrics",
              file=err, flush=True)

    def show(line):
        print(f"kqlite mirror: {line}", file=err, flush=True)

    async def main():
        mode = await mode_of(settings)
        show(f"mode {mode}")
        kind = PreservingMirror if mode == "preserve" else Mirror
        mirror = kind(settings, metrics=metrics, on_progress=show,
                      progress_interval=args.progress_interval)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, mirror.stop)
        await mirror.run()
        show(mirror.progress.line(mirror.clock()) + " (stopped)")

    try:
        asyncio.run(main())
    except MirrorFatalError as exc:
        # Fenced by a newer mirror, or a target that refuses transactions.
        print(f"kqlite mirror: stopped: {exc}", file=err, flush=True)
        return 1
    finally:
        metrics.close()
    return 0


def run_promote(args, err):
    if len(args.action) != 2 or args.action[0] != "promote":
        print("kqlite mirror: the only action is: promote TOPIC", file=err)
        return 2
    topic = args.action[1]
    if not args.source and not args.force:
        print("kqlite mirror promote: --source (to wait for the copy) or --force", file=err)
        return 2

    async def main():
        target = ClusterClient(args.target, name="target")
        source = ClusterClient(args.source, name="source") if args.source else None
        try:
            await promote(target, topic, source=source, force=args.force)
        finally:
            await target.close()
            if source is not None:
                await source.close()

    try:
        asyncio.run(main())
    except MirrorClientError as exc:
        print(f"kqlite mirror promote: {exc}", file=err)
        return 1
    print(f"kqlite mirror: {topic} promoted: it takes producers now", file=err)
    return 0
