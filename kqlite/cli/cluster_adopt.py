"""``kqlite cluster adopt`` and ``kqlite cluster detach``: an embedded data dir into a
cluster without starting its broker, and a stopped broker's data dir (or one partition)
back out as an embedded one (kqlite/cluster/adoption)."""

import sys

from .kazoo_logging import quiet_kazoo

__all__ = ["add_parser", "run_adopt", "run_detach"]

DEFAULT_TIMEOUT = 10.0


def add_parser(commands):
    a = commands.add_parser(
        "adopt", help="register an embedded data dir's topics in the cluster",
        description="Adopt a data dir written by the embedded API (or a single `kqlite "
                    "serve`) into a ZooKeeper-mode cluster, as broker BROKER_ID, which "
                    "must not be running: each topic is registered under its own topic id "
                    "with this broker first and alone in the ISR, records keep their "
                    "offsets. The committed offsets are carried into the cluster when the "
                    "broker starts on the data dir (`kqlite serve --zookeeper`, which also "
                    "adopts by itself). Nothing is changed when a check fails.")
    a.add_argument("--data-dir", required=True)
    a.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]")
    a.add_argument("--broker-id", required=True, type=int)
    a.add_argument("--replication-factor", type=int, default=1,
                   help="replicas of each adopted partition, this broker's first "
                        "(default 1)")
    a.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"give up reaching ZooKeeper after this long (default "
                        f"{DEFAULT_TIMEOUT:g})")
    a.set_defaults(run=run_adopt)

    d = commands.add_parser(
        "detach", help="turn a stopped broker's data dir into an embedded one",
        description="Detach a stopped cluster broker's data dir: each partition keeps its "
                    "records up to its high watermark, at their offsets, and the dir is "
                    "readable and writable by kqlite.open() again. With --topic and "
                    "--partition, copy that one partition into the new embedded data dir "
                    "--to instead (the broker's dir is not changed). ZooKeeper is not "
                    "told: reassign or delete the broker's topics in the cluster.")
    d.add_argument("--data-dir", required=True)
    d.add_argument("--topic")
    d.add_argument("--partition", type=int)
    d.add_argument("--to", metavar="DIR", help="the new data dir of a detached partition")
    d.set_defaults(run=run_detach)


def run_adopt(args, out=None):
    out = out or sys.stdout
    from ..cluster.adoption.plan import AdoptionRefusedError
    from ..cluster.adoption.steps import Adoption
    from ..cluster.zookeeper.snapshot import connect
    from ..cluster.zookeeper.store import ZkStore
    from ..storage.fs import DEFAULT_FS
    quiet_kazoo(args)
    client = connect(args.zookeeper, args.timeout)
    try:
        store = ZkStore(client)
        store.ensure_paths()
        if args.broker_id in store.brokers():
            raise AdoptionRefusedError(
                "broker-running", f"broker {args.broker_id} is running: stop it, or start "
                                  f"it on {args.data_dir} to adopt it. Nothing was changed")
        journal = Adoption(DEFAULT_FS, args.data_dir, store, broker_id=args.broker_id,
                           replication_factor=args.replication_factor,
                           cluster_id=store.cluster_id()).run()
    finally:
        client.stop()
        client.close()
    topics = [t["name"] for t in journal["topics"]] if journal else []
    print(f"adopted {args.data_dir} as broker {args.broker_id}"
          + (f": topics {', '.join(topics)}" if topics else ""), file=out)
    if journal:
        print(f"the committed offsets of {len(journal['offsets'])} group(s) are carried "
              f"into the cluster when broker {args.broker_id} starts on this data dir",
              file=out)
    return 0


def run_detach(args, out=None):
    out = out or sys.stdout
    from ..cluster.adoption.detach import DetachError, detach_data_dir, detach_partition
    from ..storage.fs import DEFAULT_FS
    one = (args.topic, args.partition, args.to)
    if any(x is not None for x in one) and not all(x is not None for x in one):
        raise DetachError("detaching one partition takes --topic, --partition and --to")
    if args.topic is not None:
        kept = detach_partition(DEFAULT_FS, args.data_dir, args.topic, args.partition,
                                args.to)
        print(f"{args.topic}-{args.partition} detached into {args.to}: records below "
              f"offset {kept} kept", file=out)
        return 0
    kept = detach_data_dir(DEFAULT_FS, args.data_dir)
    for (topic, p), hw in sorted(kept.items()):
        print(f"{topic}-{p}: records below offset {hw} kept", file=out)
    print(f"{args.data_dir} is an embedded data dir again", file=out)
    return 0
