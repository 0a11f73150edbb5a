"""``kqlite serve``: serve a data dir over the Kafka protocol until SIGTERM/SIGINT.

Its settings (flags, Kafka's names, defaults, what they do) are serve_settings.py's table;
serve_config.py merges the flags with a ``server.properties`` (``--config``) and
``--override`` s and builds the listeners; this module turns the result into a Broker, or a
ClusterNode with --zookeeper."""

import asyncio
import gc
import logging
import signal
import sys

from .serve_config import ServeConfigError, resolve
from .serve_settings import add_arguments, positive_int

__all__ = ["add_parser", "run", "positive_int"]

log = logging.getLogger("kqlite.server")


def add_parser(sub):
    p = sub.add_parser("serve", help="run a Kafka-protocol broker over a data dir",
                       description="Serve DIR to unmodified Kafka clients. SIGTERM or Ctrl-C "
                                   "finishes in-flight requests, flushes every log and writes "
                                   "the clean-shutdown marker.")
    cluster = p.add_argument_group(
        "cluster (ZooKeeper mode)",
        "With --zookeeper the broker joins a cluster of brokers coordinated through "
        "ZooKeeper, as Kafka's ZooKeeper mode; without it, it is a single broker.")
    add_arguments(p, cluster)
    p.set_defaults(run=run)


def _split(address):
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, not {address!r}")
    return host or "127.0.0.1", int(port)


def _transaction_config(args):
    from ..server.coordinator.txn.config import TransactionConfig
    return TransactionConfig(
        max_timeout_ms=args.transaction_max_timeout_ms,
        id_expiration_ms=args.transactional_id_expiration_ms,
        abort_timed_out_interval_ms=(
            args.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        remove_expired_interval_ms=(
            args.transaction_remove_expired_transaction_cleanup_interval_ms),
        partition_verification=args.transaction_partition_verification_enable)


async def _main(args):
    from ..server import Broker
    try:
        properties, listeners = resolve(args)
        authentication = _authentication_options(properties)
    except ServeConfigError as exc:
        print(f"kqlite serve: {exc}", file=sys.stderr)
        return 2
    host, port = _split(args.listen)
    metrics_host = metrics_port = None
    if args.metrics_listen:
        metrics_host, metrics_port = _split(args.metrics_listen)
    options = {"io_threads": args.io_threads} if args.io_threads else {}
    if args.queued_max_request_bytes is not None and \
            args.queued_max_request_bytes < args.max_request_bytes:
        print(f"kqlite serve: --queued-max-request-bytes ({args.queued_max_request_bytes}) "
              f"must be at least --max-request-bytes ({args.max_request_bytes})",
              file=sys.stderr)
        return 2
    options.update(listeners=listeners, metrics_port=metrics_port, metrics_host=metrics_host,
                   max_request_size=args.max_request_bytes,
                   auto_create_topics=not args.no_auto_create_topics,
                   default_partitions=args.num_partitions,
                   connections_max_idle_ms=args.connections_max_idle_ms,
                   max_connections=args.max_connections,
                   max_connections_per_ip=args.max_connections_per_ip,
                   max_connections_per_ip_overrides=args.max_connections_per_ip_overrides,
                   queued_max_request_bytes=args.queued_max_request_bytes,
                   quota_window_num=args.quota_window_num,
                   quota_window_size_seconds=args.quota_window_size_seconds,
                   **authentication)
    if args.authorizer_class_name:
        from ..server.authorization import AclAuthorizer
        options["authorizer"] = AclAuthorizer(
            super_users=args.super_users,
            allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found)
    if args.zookeeper:
        from ..cluster.network.inter_broker import from_properties
        from ..cluster.node import ClusterNode
        from ..server.authentication.listener_security import SecurityConfigError
        try:
            inter_broker = from_properties(properties, listeners)
        except SecurityConfigError as exc:
            print(f"kqlite serve: {exc}", file=sys.stderr)
            return 2
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
            transaction_state_log_num_partitions=args.transaction_state_log_num_partitions,
            transaction_state_log_replication_factor=(
                args.transaction_state_log_replication_factor),
            transaction_state_log_min_isr=args.transaction_state_log_min_isr,
            transaction_config=_transaction_config(args),
            auto_leader_rebalance_enable=args.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds=args.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
            inter_broker=inter_broker, **options)
        broker = node.broker
        from ..cluster.adoption.journal import JournalError
        from ..cluster.adoption.plan import AdoptionRefusedError
        try:
            await node.start()
        except (AdoptionRefusedError, JournalError) as exc:
            print(f"kqlite serve: cannot adopt {args.data_dir} into the cluster: {exc}",
                  file=sys.stderr, flush=True)
            await node.stop(controlled=False)
            return 1
    else:
        node = None
        broker = Broker(args.data_dir, host, port, broker_id=args.broker_id,
                        transaction_config=_transaction_config(args), **options)
        await broker.start()
    # Stopping is asked for from here on, before the line below tells anyone the broker
    # is there to be stopped.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # The line below says the broker is ready: clients connecting before the coordinators
    # have loaded what they keep are answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka's are.
    await broker.loaded()
    _freeze_start_up_objects()
    print(f"kqlite broker {args.broker_id} listening on {host}:{broker.port}, "
          f"data dir {broker.db.path}", file=sys.stderr, flush=True)
    if len(broker.listeners) > 1 or broker.listeners[0].name != "PLAINTEXT":
        print("kqlite broker listeners: " + ", ".join(
            f"{listener.name}://{listener.endpoint.host}:{listener.endpoint.port}"
            for listener in broker.listeners), file=sys.stderr, flush=True)
    console = None
    if args.console and metrics_port is not None:
        from ..console import attach_to_broker
        console = attach_to_broker(broker, node, allow_writes=args.console_allow_writes,
                                   interval=max(0.2, args.console_sample_interval))
        print(f"kqlite console on http://{args.metrics_listen}/ "
              f"({'read-write' if args.console_allow_writes else 'read-only'})",
              file=sys.stderr, flush=True)
    elif args.console:
        print("kqlite serve: --console is served by --metrics-listen, which is not set",
              file=sys.stderr, flush=True)
    await stop.wait()
    print("kqlite broker shutting down", file=sys.stderr, flush=True)
    # The shutdown runs once, as Kafka's shutdown hook does: a second SIGTERM (a process
    # manager asking again) is ignored, also after the loop closes, whose clean-up would
    # otherwise restore the default action and let it kill a broker that is exiting
    # cleanly. SIGKILL still stops it at once; Ctrl-C keeps asyncio's handling.
    loop.remove_signal_handler(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if console is not None:
        await console.stop()
    if node is not None:
        await node.stop()       # controlled shutdown first
    else:
        await broker.stop()
    return 0


def _freeze_start_up_objects():
    """What start-up built (modules, the protocol's schemas, the ZooKeeper client, the
    coordinators' loaded state) lives as long as the broker: it is moved out of the
    cyclic collector's reach (``gc.freeze``), whose full passes pause the whole process
    for as long as they take to walk every tracked object. A started cluster broker's
    full pass took 20-35 ms, the cause of the cluster's p99.9 at 20,000 msgs/s
    (docs/benchmarks.md); what the broker allocates later is still collected."""
    gc.collect()
    gc.freeze()


def _authentication_options(properties):
    setting = properties.get("zookeeper.set.acl", "false").strip().lower()
    if setting != "false":
        raise ServeConfigError(
            f"zookeeper.set.acl: {setting!r} cannot be served: kqlite does not authenticate "
            f"to ZooKeeper, so it cannot set ZooKeeper ACLs; leave it false and protect "
            f"ZooKeeper by the network (docs/security.md, \"ZooKeeper\")")
    options = {}
    for key, name in (("connection.failed.authentication.delay.ms",
                       "failed_authentication_delay_ms"),):
        if key in properties:
            try:
                options[name] = int(properties[key])
            except ValueError:
                raise ServeConfigError(f"{key}: expected an integer, not "
                                       f"{properties[key]!r}") from None
    return options


def run(args, out=sys.stdout):
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(_main(args))
