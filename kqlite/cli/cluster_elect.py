"""``kqlite cluster elect-leaders``: Kafka's kafka-leader-election.sh, for a cluster of
``kqlite serve --zookeeper`` brokers (or Kafka brokers).

The command asks a bootstrap broker for Metadata to find the controller (and, with
``--topic``, the topic's partitions), then sends ElectLeaders to the controller with
kqlite's own client (kqlite/cluster/network/broker_client.py). Without ``--topic`` every partition
is asked for (a null topic list), and the controller answers only for partitions that
needed an election. A controller that moved meanwhile (NOT_CONTROLLER) is looked up
again, a few times.

Output: one line per partition: elected, ``already led by its preferred replica`` /
``has a leader`` (ELECTION_NOT_NEEDED, not an error, as in Kafka's tool), or the error.
Exit status 0 when no partition failed, 1 otherwise, 2 for bad arguments.
"""

import asyncio
import json
import sys
import uuid

from ..cluster.network.broker_client import BrokerClientError, BrokerConnection
from ..protocol import ApiKey, ErrorCode

__all__ = ["add_parser", "run"]

_ELECTION_TYPES = {"preferred": 0, "unclean": 1}   # WIRE: Kafka's ElectionType ids
_CONTROLLER_ATTEMPTS = 3
_ZERO_UUID = uuid.UUID(int=0)    # WIRE: Metadata v10+ names topics, not ids, with it


def add_parser(subparsers):
    p = subparsers.add_parser(
        "elect-leaders", help="elect preferred (or unclean) leaders through the controller",
        description="Ask the cluster's controller to elect leaders (the ElectLeaders API, "
                    "as kafka-leader-election.sh): 'preferred' moves leadership back to "
                    "each partition's first assigned replica when it is live and in sync; "
                    "'unclean' gives a leader to partitions that have none, from any live "
                    "replica if no in-sync one is left (records may be lost). Without "
                    "--topic, every partition. Exit status 1 when a partition failed.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="any broker of the cluster")
    p.add_argument("--topic", metavar="TOPIC", help="only this topic's partitions")
    p.add_argument("--partition", type=int, metavar="P",
                   help="only this partition of --topic")
    p.add_argument("--election-type", choices=sorted(_ELECTION_TYPES), default="preferred",
                   help="default preferred")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long the controller may take (default 60)")
    p.add_argument("--json", action="store_true", help="print JSON, for scripts")
    p.set_defaults(run=run)


def run(args):
    if args.partition is not None and args.topic is None:
        print("kqlite cluster elect-leaders: --partition needs --topic", file=sys.stderr)
        return 2
    try:
        host, port = _address(args.bootstrap_server)
    except ValueError as exc:
        print(f"kqlite cluster elect-leaders: {exc}", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(_elect(host, port, args))
    except (BrokerClientError, OSError, LookupError) as exc:
        print(f"kqlite cluster elect-leaders: {exc}", file=sys.stderr)
        return 1
    return _report(results, args)


def _address(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--bootstrap-server takes HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)


async def _connect(host, port, timeout):
    conn = await BrokerConnection.connect(host, port, client_id="kqlite-elect-leaders",
                                          request_timeout=timeout)
    try:
        await conn.negotiate_versions()
    except BaseException:
        await conn.close()
        raise
    return conn


async def _metadata(host, port, topic, timeout):
    """(controller (host, port), the topic's partition indexes or None)."""
    conn = await _connect(host, port, timeout)
    try:
        version = conn.version_for(ApiKey.METADATA, (1, 12))
        body = await conn.request(ApiKey.METADATA, version, {
            "topics": None if topic is None else [{"topic_id": _ZERO_UUID, "name": topic}],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
    finally:
        await conn.close()
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
    if body["controller_id"] not in brokers:
        raise LookupError(f"{host}:{port} knows no live controller yet; try again")
    partitions = None
    if topic is not None:
        found = [t for t in body["topics"] if t["name"] == topic]
        if not found or found[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise LookupError(f"unknown topic {topic!r}")
        partitions = sorted(p["partition_index"] for p in found[0]["partitions"])
    return brokers[body["controller_id"]], partitions


async def _elect(host, port, args):
    """{(topic, partition): (error code, message)} from the controller."""
    election_type = _ELECTION_TYPES[args.election_type]
    timeout_ms = int(args.timeout * 1000)
    for attempt in range(_CONTROLLER_ATTEMPTS):
        controller, partitions = await _metadata(host, port, args.topic, args.timeout + 10)
        if args.topic is None:
            asked = None
        else:
            if args.partition is not None:
                if args.partition not in partitions:
                    raise LookupError(f"topic {args.topic!r} has no partition {args.partition}")
                partitions = [args.partition]
            asked = [{"topic": args.topic, "partitions": partitions}]
        conn = await _connect(*controller, args.timeout + 10)
        try:
            version = conn.version_for(ApiKey.ELECT_LEADERS, (0 if election_type == 0 else 1, 2))
            body = await conn.request(ApiKey.ELECT_LEADERS, version, {
                "election_type": election_type, "topic_partitions": asked,
                "timeout_ms": timeout_ms})
        finally:
            await conn.close()
        results = {(t["topic"], p["partition_id"]): (p["error_code"], p["error_message"])
                   for t in body["replica_election_results"] for p in t["partition_result"]}
        if body.get("error_code"):
            code = body["error_code"]
            raise LookupError(f"the controller refused the request: {_name(code)}")
        moved = any(code == ErrorCode.NOT_CONTROLLER for code, _ in results.values())
        if not moved or attempt == _CONTROLLER_ATTEMPTS - 1:
            return results
        await asyncio.sleep(1.0)   # the controller moved: its successor is in Metadata soon
    return results


def _name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _failed(code):
    return code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)


def _report(results, args):
    rows = sorted(results.items())
    if args.json:
        print(json.dumps([{"topic": t, "partition": p, "error": None if not c else _name(c),
                           "message": m} for (t, p), (c, m) in rows], indent=1))
    elif not rows:
        print("no partition needed an election")
    else:
        not_needed = ("already led by its preferred replica" if args.election_type == "preferred"
                      else "has a live leader")
        for (t, p), (code, message) in rows:
            if code == ErrorCode.NONE:
                outcome = f"{args.election_type} leader elected"
            elif code == ErrorCode.ELECTION_NOT_NEEDED:
                outcome = not_needed
            else:
                outcome = f"FAILED {_name(code)}" + (f": {message}" if message else "")
            print(f"{t}-{p}: {outcome}")
    failures = sum(1 for code, _ in results.values() if _failed(code))
    if failures:
        print(f"kqlite cluster elect-leaders: {failures} partition(s) could not be elected",
              file=sys.stderr)
        return 1
    return 0
