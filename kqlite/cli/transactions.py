"""``kqlite transactions list | describe | describe-producers | abort | find-hanging``:
Kafka's kafka-transactions.sh, through brokers or on a data dir with no broker.

Where (one of, before or after the command's name): ``--bootstrap-server
HOST:PORT[,...]`` (with ``--command-config FILE`` for TLS and SASL, as Kafka's tools take
an admin client's properties; admin_client.py), or ``--data-dir DIR`` (transaction_admin.py
says what is read and written there).

The commands and their options are kafka-transactions.sh's:

  list                 every transactional id the coordinators hold (not Dead);
                       --duration-filter MS: only those whose transaction started more
                       than MS ago (KIP-994)
  describe             --transactional-id ID: its state, producer, timeout, start and
                       the partitions of its transaction
  describe-producers   --topic T --partition P [--broker-id N]: the partition's active
                       producers and the first offset of each one's open transaction
  abort                --topic T --partition P, and --start-offset O (the producer is
                       looked up with describe-producers) or --producer-id,
                       --producer-epoch and --coordinator-epoch: write the ABORT marker
                       that ends a hanging transaction (a coordinator epoch below 0 is
                       sent as 0, as Kafka's tool does: it is at most any real one)
  find-hanging         --topic T [--partition P] or --broker-id N (every partition it
                       hosts, the internal topics' too, as Kafka's tool lists them), and
                       --max-transaction-timeout MINUTES (default 15): open transactions
                       older than that which no coordinator will end
                       (hanging_transactions.py)

Output is Kafka's: a header row and one row per item, each cell padded to its column's
width and followed by a tab; ``None`` for an absent start offset or start time; nothing
for a successful abort. A refusal is printed as Kafka's tool prints it, ``Failed to
<what>: <ERROR_NAME>[: message]``, on stderr.

Exit status: 0 done, 1 refused or unreachable (Kafka's tool: 1), 2 bad arguments
(Kafka's tool exits 1 for those too; every kqlite command exits 2).
"""

import argparse
import sys

__all__ = ["add_parser", "run"]

_DEFAULT_TIMEOUT = 30.0
_DEFAULT_MAX_TIMEOUT_MINUTES = 15     # Kafka's transaction.max.timeout.ms, in minutes
_MS_PER_MINUTE = 60_000

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs",
                    "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")


def add_parser(sub):
    p = sub.add_parser(
        "transactions", help="list, describe and abort transactions (kafka-transactions.sh)",
        description="Analyze the transactional state of producers, and find and abort "
                    "hanging transactions: through brokers or on a data dir.")
    _where(p, None)
    p.set_defaults(run=lambda _args: _usage(p))
    commands = p.add_subparsers(dest="transactions_command", metavar="COMMAND")
    for name, text, options in (
            ("list", "list transactions", _list_options),
            ("describe", "describe the state of a transactional id", _describe_options),
            ("describe-producers", "describe the active producers of a partition",
             _producers_options),
            ("abort", "abort a hanging transaction (writes an ABORT marker)",
             _abort_options),
            ("find-hanging", "find hanging transactions", _hanging_options)):
        c = commands.add_parser(name, help=text, description=text + ".")
        _where(c, argparse.SUPPRESS)
        options(c)
        c.set_defaults(run=run, transactions_command=name)


def _usage(parser):
    parser.print_help(sys.stderr)
    return 2


def _where(p, default):
    """The connection options, on ``transactions`` and on each command (``default``
    SUPPRESS there, so that a value given before the command's name is kept)."""
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", default=default,
                   help="brokers to connect to (comma-separated)")
    p.add_argument("--data-dir", metavar="DIR", default=default,
                   help="a data dir, read and written with no broker")
    p.add_argument("--command-config", metavar="FILE", default=default,
                   help="admin client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--timeout", type=float, default=default, metavar="SECONDS",
                   help=f"give up on a broker after this long (default {_DEFAULT_TIMEOUT:g})")


def _list_options(p):
    p.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="only transactions running longer than this (below 0: all, the "
                        "default)")


def _describe_options(p):
    p.add_argument("--transactional-id", required=True, help="transactional id")


def _topic_partition(p, required):
    p.add_argument("--topic", required=required, help="topic name")
    p.add_argument("--partition", type=int, required=required, help="partition number")


def _producers_options(p):
    _topic_partition(p, True)
    p.add_argument("--broker-id", type=int,
                   help="the replica to ask (default: the partition's leader)")


def _abort_options(p):
    _topic_partition(p, True)
    p.add_argument("--start-offset", type=int,
                   help="start offset of the transaction to abort")
    p.add_argument("--producer-id", type=int, help="producer id")
    p.add_argument("--producer-epoch", type=int, help="producer epoch")
    p.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")


def _hanging_options(p):
    _topic_partition(p, False)
    p.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    p.add_argument("--max-transaction-timeout", type=int,
                   default=_DEFAULT_MAX_TIMEOUT_MINUTES, metavar="MINUTES",
                   help="maximum transaction timeout in minutes to limit the scope of the "
                        "search (default %(default)s)")


class _Usage(ValueError):
    """Arguments that make no request."""


class _Failed(Exception):
    """A refusal or an unreachable broker, already worded as Kafka's tool words it."""


# -- Running ------------------------------------------------------------------------------------

def run(args, out=None):
    out = out or sys.stdout
    name = args.transactions_command
    try:
        _check_arguments(args)
        source = _source(args)
    except _Usage as exc:
        print(f"kqlite transactions {name}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:    # noqa: BLE001 -- unreachable or unusable: reported, status 1
        print(f"kqlite transactions {name}: {exc}", file=sys.stderr)
        return 1
    try:
        _COMMANDS[name](source, args, out)
        return 0
    except _Failed as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        source.close()


# WIRE: the field each option is sent in (DescribeProducers, WriteTxnMarkers), so a value
# its field cannot hold is refused here, not by the codec.
_INT32 = (0, 2**31 - 1)
_RANGES = {"duration_filter": (-2**63, 2**63 - 1), "partition": _INT32, "broker_id": _INT32, "start_offset": (0, 2**63 - 1),
           "producer_id": (0, 2**63 - 1), "producer_epoch": (0, 2**15 - 1),
           "coordinator_epoch": (-2**31, 2**31 - 1)}


def _check_arguments(args):
    for name, (low, high) in _RANGES.items():
        value = getattr(args, name, None)
        if value is not None and not low <= value <= high:
            raise _Usage(f"--{name.replace('_', '-')} must be between {low} and {high}")
    if (args.bootstrap_server is None) == (args.data_dir is None):
        raise _Usage("give either --bootstrap-server or --data-dir")
    if args.data_dir is not None and args.command_config is not None:
        raise _Usage("--command-config goes with --bootstrap-server")
    if args.transactions_command == "abort" and args.start_offset is None:
        if args.producer_id is None:
            raise _Usage("The transaction to abort must be identified either with "
                         "--start-offset or with --producer-id, --producer-epoch, and "
                         "--coordinator-epoch")
        for flag in ("producer_epoch", "coordinator_epoch"):
            if getattr(args, flag) is None:
                raise _Usage(f"Missing required argument --{flag.replace('_', '-')}")
    if args.transactions_command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise _Usage("The `find-hanging` command requires either --topic or "
                         "--broker-id to limit the scope of the search")
        if args.partition is not None and args.topic is None:
            raise _Usage("The --partition argument requires --topic to be provided")
        if args.max_transaction_timeout < 0:
            raise _Usage("--max-transaction-timeout cannot be negative")


def _source(args):
    from .admin_client import AdminClient, AdminConfigError, read_command_config
    from .transaction_admin import BrokerTransactions, DataDirTransactions
    if args.data_dir is not None:
        return DataDirTransactions(args.data_dir)
    try:
        security = read_command_config(args.command_config)
        client = AdminClient(args.bootstrap_server, security=security,
                             timeout=args.timeout or _DEFAULT_TIMEOUT,
                             client_id="kqlite-transactions")
    except AdminConfigError as exc:
        raise _Usage(str(exc)) from None
    return BrokerTransactions(client)


def _asking(what, call, *call_args):
    """``call(*call_args)``, its refusal or unreachable broker raised as _Failed with
    ``what`` (Kafka's "Failed to <what>: ...")."""
    from ..errors import KqliteError
    from .transaction_admin import TxnAdminError
    try:
        return call(*call_args)
    except (TxnAdminError, KqliteError, OSError) as exc:
        raise _Failed(f"Failed to {what}: {exc}") from None


# -- Output -------------------------------------------------------------------------------------

def table(headers, rows):
    """Kafka's prettyPrintTable: every cell padded to its column's width, then a tab."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return "".join("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)) + "\n"
                   for row in [list(headers)] + rows)


def _absent(value):
    return "None" if value < 0 else value


# -- The commands -------------------------------------------------------------------------------

def _list(source, args, out):
    listings = _asking("list transactions", source.list, (), args.duration_filter)
    out.write(table(LIST_HEADERS, [(t.transactional_id, t.coordinator_id, t.producer_id,
                                    t.state) for t in listings]))


def _describe(source, args, out):
    tid = args.transactional_id
    d = _asking(f"describe transaction state of transactional-id `{tid}`",
                source.describe, tid)
    duration = source.now_ms() - d.start_ms if d.start_ms >= 0 else -1
    out.write(table(DESCRIBE_HEADERS, [(
        d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state,
        d.timeout_ms, _absent(d.start_ms), _absent(duration),
        ",".join(f"{t}-{p}" for t, p in d.partitions))]))


def _describe_producers(source, args, out):
    where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
    producers = _asking(f"describe producers for partition {args.topic}-{args.partition} on "
                        f"{where}", source.describe_producers, args.topic, args.partition,
                        args.broker_id)
    out.write(table(PRODUCERS_HEADERS, [(
        p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
        p.last_timestamp, _absent(p.current_txn_start_offset)) for p in producers]))


def _abort(source, args, out):
    tp = f"{args.topic}-{args.partition}"
    if args.start_offset is None:
        spec = (args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0))
    else:
        producers = _asking(f"validate producer state for partition {tp}",
                            source.describe_producers, args.topic, args.partition)
        found = [p for p in producers if p.current_txn_start_offset == args.start_offset]
        if not found:
            raise _Failed(f"Could not find any open transactions starting at offset "
                          f"{args.start_offset} on partition {tp}")
        p = found[0]
        spec = (p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0))
    _asking(f"abort transaction of producer {spec[0]} (epoch {spec[1]}, coordinator epoch "
            f"{spec[2]}) on partition {tp}", source.abort, args.topic, args.partition, *spec)


def _find_hanging(source, args, out):
    from .hanging_transactions import candidates, hanging
    if args.topic is not None and args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        what = f"describe topic {args.topic}" if args.topic else "list topics"
        partitions = _asking(what, source.partitions, args.topic, args.broker_id)
    where = "their leaders" if args.broker_id is None else f"broker {args.broker_id}"
    producers = _asking(f"describe producers for {len(partitions)} partitions on {where}",
                        source.producers_of, partitions, args.broker_id)
    now = source.now_ms()
    found = candidates(producers, now, args.max_transaction_timeout * _MS_PER_MINUTE)
    if found:
        pids = sorted({t.producer.producer_id for t in found})
        listings = _asking(f"list transactions for {len(pids)} producers", source.list, pids)
        ids = {t.producer_id: t.transactional_id for t in listings if t.producer_id in pids}
        found = hanging(found, ids, _partitions_of(source, sorted(set(ids.values()))))
    out.write(table(HANGING_HEADERS, [(
        t.topic, t.partition, t.producer.producer_id, t.producer.producer_epoch,
        t.producer.coordinator_epoch, t.producer.current_txn_start_offset,
        t.producer.last_timestamp, (now - t.producer.last_timestamp) // _MS_PER_MINUTE)
        for t in found]))


def _partitions_of(source, transactional_ids):
    """``{id: set of its transaction's partitions, or None when the coordinator does not
    know it}``."""
    out = {}
    what = f"describe {len(transactional_ids)} transactions"
    for tid in transactional_ids:
        try:
            out[tid] = set(_asking(what, _known, source, tid))
        except _NotFound:
            out[tid] = None
    return out


class _NotFound(Exception):
    pass


def _known(source, transactional_id):
    """The partitions of the id's transaction; _NotFound when its coordinator answers
    TRANSACTIONAL_ID_NOT_FOUND (the one refusal find-hanging expects)."""
    from ..protocol import ErrorCode
    from .transaction_admin import TxnAdminError
    try:
        return source.describe(transactional_id).partitions
    except TxnAdminError as exc:
        if exc.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            raise _NotFound() from None
        raise


_COMMANDS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
             "abort": _abort, "find-hanging": _find_hanging}
