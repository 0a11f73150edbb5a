"""``kqlite serve``: serve a data dir over the Kafka protocol until SIGTERM/SIGINT."""

import argparse
import asyncio
import logging
import signal
import sys

log = logging.getLogger("kqlite.server")


def add_parser(sub):
    p = sub.add_parser("serve", help="run a Kafka-protocol broker over a data dir",
                       description="Serve DIR to unmodified Kafka clients. SIGTERM or Ctrl-C "
                                   "finishes in-flight requests, flushes every log and writes "
                                   "the clean-shutdown marker.")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT")
    p.add_argument("--advertised-host", help="host name given to clients (default: listen host)")
    p.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics")
    p.add_argument("--broker-id", type=int, default=0)
    p.add_argument("--num-partitions", type=int, default=1,
                   help="partitions of auto-created topics")
    p.add_argument("--no-auto-create-topics", action="store_true")
    p.add_argument("--max-request-bytes", type=int, default=104857600,
                   help="socket.request.max.bytes: larger requests close the connection")
    p.add_argument("--io-threads", type=positive_int, metavar="N",
                   help="num.io.threads: threads that do the storage work of requests "
                        "(reads, appends, fsyncs, topic changes); default 8, as Kafka's")
    p.add_argument("--connections-max-idle-ms", type=_idle_ms, default=600000, metavar="MS",
                   help="connections.max.idle.ms: close a connection that sent no request "
                        "for this long (-1: never); default 600000 (10 minutes), as Kafka's")
    p.add_argument("--max-connections", type=positive_int, metavar="N",
                   help="max.connections: at this many open connections stop accepting "
                        "until one closes; default a quarter of the descriptor limit "
                        "(ulimit -n), at least 64")
    p.add_argument("--max-connections-per-ip", type=_non_negative, metavar="N",
                   help="max.connections.per.ip: close at once a new connection from an "
                        "address that already has N; default three quarters of "
                        "--max-connections")
    p.add_argument("--max-connections-per-ip-overrides", type=_overrides,
                   metavar="HOST:N[,HOST:N...]",
                   help="max.connections.per.ip.overrides: caps for particular addresses "
                        "or host names")
    p.add_argument("--queued-max-request-bytes", type=positive_int, metavar="BYTES",
                   help="queued.max.request.bytes: bytes of requests read and not yet "
                        "answered; over it the broker stops reading from sockets until "
                        "memory is released. Default 268435456 (256 MiB), or "
                        "--max-request-bytes if larger; never below --max-request-bytes")
    cluster = p.add_argument_group(
        "cluster (ZooKeeper mode)",
        "With --zookeeper the broker joins a cluster of brokers coordinated through "
        "ZooKeeper, as Kafka's ZooKeeper mode; without it, it is a single broker.")
    cluster.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                         help="zookeeper.connect: the ZooKeeper ensemble (and chroot) of the "
                              "cluster to join; --broker-id must be unique in it")
    cluster.add_argument("--zookeeper-session-timeout-ms", type=positive_int, default=6000,
                         metavar="MS", help="zookeeper.session.timeout.ms (default 6000)")
    cluster.add_argument("--default-replication-factor", type=positive_int, default=1,
                         metavar="N", help="default.replication.factor of created topics "
                                           "(auto-created ones get at most the live broker "
                                           "count); default 1, as Kafka's")
    cluster.add_argument("--replica-lag-time-max-ms", type=positive_int, default=30000,
                         metavar="MS", help="replica.lag.time.max.ms: a follower this far "
                                            "behind leaves the ISR (default 30000)")
    cluster.add_argument("--replica-high-watermark-checkpoint-interval-ms", type=positive_int,
                         default=5000, metavar="MS",
                         help="replica.high.watermark.checkpoint.interval.ms: how often the "
                              "partitions' high watermarks are written to "
                              "replication-offset-checkpoint (default 5000)")
    cluster.add_argument("--controlled-shutdown-retry-backoff-ms", type=_non_negative,
                         default=5000, metavar="MS",
                         help="controlled.shutdown.retry.backoff.ms (default 5000)")
    cluster.add_argument("--offsets-topic-replication-factor", type=positive_int, default=3,
                         metavar="N",
                         help="offsets.topic.replication.factor: replicas of __consumer_offsets, "
                              "created on the first FindCoordinator; with fewer live brokers "
                              "its creation waits and groups get COORDINATOR_NOT_AVAILABLE "
                              "(default 3, as Kafka's)")
    cluster.add_argument("--offsets-topic-num-partitions", type=positive_int, default=50,
                         metavar="N",
                         help="offsets.topic.num.partitions: partitions of __consumer_offsets "
                              "(default 50, as Kafka's); a group is coordinated by the leader "
                              "of its partition")
    cluster.add_argument("--auto-leader-rebalance-enable", type=_boolean, default=True,
                         metavar="true|false",
                         help="auto.leader.rebalance.enable: the controller moves leadership "
                              "back to preferred replicas by itself (default true)")
    cluster.add_argument("--leader-imbalance-check-interval-seconds", type=positive_int,
                         default=300, metavar="S",
                         help="leader.imbalance.check.interval.seconds: how often the "
                              "controller checks the leader balance (default 300)")
    cluster.add_argument("--leader-imbalance-per-broker-percentage", type=_non_negative,
                         default=10, metavar="PCT",
                         help="leader.imbalance.per.broker.percentage: the share of a "
                              "broker's preferred partitions led elsewhere above which they "
                              "are moved back (default 10)")
    p.set_defaults(run=run)


def _boolean(text):
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return value == "true"


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _non_negative(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, not {text!r}")
    return value


def _idle_ms(text):
    if text.strip() == "-1":
        return -1
    return positive_int(text)


def _overrides(text):
    from ..server.connection_limits import parse_overrides
    try:
        return parse_overrides(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _split(address):
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, not {address!r}")
    return host or "127.0.0.1", int(port)


async def _main(args):
    from ..server import Broker
    host, port = _split(args.listen)
    metrics_port = None
    if args.metrics_listen:
        _mhost, metrics_port = _split(args.metrics_listen)
    options = {"io_threads": args.io_threads} if args.io_threads else {}
    if args.queued_max_request_bytes is not None and \
            args.queued_max_request_bytes < args.max_request_bytes:
        print(f"kqlite serve: --queued-max-request-bytes ({args.queued_max_request_bytes}) "
              f"must be at least --max-request-bytes ({args.max_request_bytes})",
              file=sys.stderr)
        return 2
    options.update(advertised_host=args.advertised_host, metrics_port=metrics_port,
                   max_request_size=args.max_request_bytes,
                   auto_create_topics=not args.no_auto_create_topics,
                   default_partitions=args.num_partitions,
                   connections_max_idle_ms=args.connections_max_idle_ms,
                   max_connections=args.max_connections,
                   max_connections_per_ip=args.max_connections_per_ip,
                   max_connections_per_ip_overrides=args.max_connections_per_ip_overrides,
                   queued_max_request_bytes=args.queued_max_request_bytes)
    if args.zookeeper:
        from ..cluster.node import ClusterNode
        node = ClusterNode(
            args.data_dir, host, port, broker_id=args.broker_id, zookeeper=args.zookeeper,
            session_timeout_ms=args.zookeeper_session_timeout_ms,
            default_replication_factor=args.default_replication_factor,
            replica_lag_time_max_ms=args.replica_lag_time_max_ms,
            replica_high_watermark_checkpoint_interval_ms=(
                args.replica_high_watermark_checkpoint_interval_ms),
            controlled_shutdown_retry_backoff_ms=args.controlled_shutdown_retry_backoff_ms,
            offsets_topic_replication_factor=args.offsets_topic_replication_factor,
            offsets_topic_num_partitions=args.offsets_topic_num_partitions,
            auto_leader_rebalance_enable=args.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds=args.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
            **options)
        broker = node.broker
        await node.start()
    else:
        node = None
        broker = Broker(args.data_dir, host, port, broker_id=args.broker_id, **options)
        await broker.start()
    print(f"kqlite broker {args.broker_id} listening on {host}:{broker.port}, "
          f"data dir {broker.db.path}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("kqlite broker shutting down", file=sys.stderr, flush=True)
    if node is not None:
        await node.stop()       # controlled shutdown first
    else:
        await broker.stop()
    return 0


def run(args, out=sys.stdout):
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(_main(args))
