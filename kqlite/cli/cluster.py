"""``kqlite cluster describe|partitions|up|adopt|detach`` (and ``elect-leaders`` when
installed): operating a ZooKeeper-mode cluster.

``describe`` and ``partitions`` read ZooKeeper directly, as Kafka's ZooKeeper-era tools
do, so they work with any broker down, the controller included; ``up`` runs a local
development cluster (cluster_up.py); ``adopt`` and ``detach`` bring an embedded data dir
in and a broker's data dir out (cluster_adopt.py).
"""

import importlib
import json
import sys

from . import cluster_adopt, cluster_up
from .kazoo_logging import quiet_kazoo

try:
    cluster_elect = importlib.import_module(f"{__package__}.cluster_elect")
except ModuleNotFoundError as exc:     # written separately; absent means not offered
    if exc.name != f"{__package__}.cluster_elect":
        raise
    cluster_elect = None

DEFAULT_TIMEOUT = 10.0


def add_parser(sub):
    p = sub.add_parser("cluster", help="inspect or run a ZooKeeper-mode cluster",
                       description="Inspect a cluster of `kqlite serve --zookeeper` brokers "
                                   "(or Kafka brokers in ZooKeeper mode) through ZooKeeper, "
                                   "or run a local one for development.")
    p.set_defaults(run=lambda _args: _usage(p))
    commands = p.add_subparsers(dest="cluster_command", metavar="COMMAND")

    d = commands.add_parser("describe", help="cluster id, controller, live brokers, counts")
    _zookeeper_options(d)
    d.set_defaults(run=run_describe)

    s = commands.add_parser(
        "partitions", help="leader, epoch, replicas and ISR of each partition",
        description="Every partition's leader, leader epoch, replicas and ISR, flagged "
                    "UNDER-REPLICATED (ISR smaller than the replicas), OFFLINE (no live "
                    "leader) or UNDER-MIN-ISR (ISR below min.insync.replicas), as "
                    "kafka-topics.sh --describe reports them. The filters select the "
                    "partitions with any of the chosen flags. The exit status is 0 "
                    "whatever is found.")
    _zookeeper_options(s)
    s.add_argument("--topic", action="append", metavar="TOPIC",
                   help="only this topic (repeatable)")
    s.add_argument("--under-replicated", action="store_true",
                   help="only partitions whose ISR is smaller than their replica set")
    s.add_argument("--offline", action="store_true",
                   help="only partitions without a live leader")
    s.add_argument("--under-min-isr", action="store_true",
                   help="only partitions whose ISR is below min.insync.replicas")
    s.set_defaults(run=run_partitions)

    if cluster_elect is not None:
        cluster_elect.add_parser(commands)
    cluster_up.add_parser(commands)
    cluster_adopt.add_parser(commands)


def _usage(parser):
    parser.print_help(sys.stderr)
    return 2


def _zookeeper_options(p):
    p.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]",
                   help="the cluster's zookeeper.connect")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"give up reaching ZooKeeper after this long (default "
                        f"{DEFAULT_TIMEOUT:g})")
    p.add_argument("--json", action="store_true", help="print JSON, for scripts")


def _snapshot(args, topics=None):
    from ..cluster.zookeeper.snapshot import connect, read_cluster
    quiet_kazoo(args)
    client = connect(args.zookeeper, args.timeout)
    try:
        return read_cluster(client, topics)
    finally:
        client.stop()
        client.close()


def run_describe(args, out=sys.stdout):
    snap = _snapshot(args)
    if args.json:
        doc = snap.as_dict()
        doc["under_replicated_partitions"] = sum(p.under_replicated for p in snap.partitions)
        doc["offline_partitions"] = sum(p.offline for p in snap.partitions)
        print(json.dumps(doc, indent=2), file=out)
        return 0
    print(f"Cluster id:  {snap.cluster_id or '(none: no broker has started)'}", file=out)
    if snap.controller_id >= 0:
        print(f"Controller:  broker {snap.controller_id} (controller epoch "
              f"{snap.controller_epoch})", file=out)
    else:
        print(f"Controller:  none (last controller epoch {snap.controller_epoch})", file=out)
    print(f"Brokers:     {len(snap.brokers)} live", file=out)
    for broker_id, b in sorted(snap.brokers.items()):
        rack = f"  rack {b.rack}" if b.rack else ""
        endpoints = " ".join(str(e) for e in b.endpoints)
        print(f"  {broker_id:>5}  {endpoints}  broker epoch {b.epoch}{rack}", file=out)
    under = sum(p.under_replicated for p in snap.partitions)
    offline = sum(p.offline for p in snap.partitions)
    print(f"Topics:      {len(snap.topics)}", file=out)
    print(f"Partitions:  {len(snap.partitions)} ({under} under-replicated, "
          f"{offline} offline)", file=out)
    return 0


def run_partitions(args, out=sys.stdout):
    snap = _snapshot(args, args.topic)
    wanted = [(args.under_replicated, "under_replicated"), (args.offline, "offline"),
              (args.under_min_isr, "under_min_isr")]
    flags = [attr for on, attr in wanted if on]
    rows = [p for p in snap.partitions if not flags or any(getattr(p, f) for f in flags)]
    if args.json:
        print(json.dumps([dict(p.as_dict(), flags=p.flags) for p in rows], indent=2),
              file=out)
        return 0
    table = [("TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "FLAGS")]
    for p in rows:
        table.append((p.topic, str(p.partition), str(p.leader) if p.leader >= 0 else "none",
                      str(p.leader_epoch), ",".join(map(str, p.replicas)),
                      ",".join(map(str, p.isr)), " ".join(p.flags)))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    return 0
