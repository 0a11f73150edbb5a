"""Where ``kqlite transactions`` reads transactions and producers, and writes an abort:
through brokers (:class:`BrokerTransactions`) or straight from a data dir with no broker
(:class:`DataDirTransactions`). Both answer the same calls with the same values, so the
command (transactions.py) and the hanging rule (hanging_transactions.py) do not know which
one they have.

Through brokers, each call goes where Kafka's admin client sends it:

  call                 request                  to
  list                 ListTransactions         every broker of the Metadata answer
  describe ID          FindCoordinator (type 1), then DescribeTransactions
                                                the id's coordinator
  describe_producers,  DescribeProducers        each partition's leader (Metadata), or the
  producers_of                                  broker named
  abort                WriteTxnMarkers (ABORT)  the partition's leader
  partitions           Metadata                 the bootstrap broker

An error code in an answer is raised as :class:`TxnAdminError` with Kafka's error name,
except those after which Kafka's admin client asks again (its handlers' retriable errors:
a coordinator loading, moved or not available yet, a leader that moved): the call is
made again, from the lookup, every ``RETRY_BACKOFF`` seconds until the client's timeout
has passed, and only the last answer's error is raised.

From a data dir: ``list`` and ``describe`` read the latest ``__transaction_state`` record
of every id (``Database.transaction_state``, the store a broker on the same dir reads and
writes): what is durable, so a transaction a running broker holds in memory only for an
instant (Kafka's PrepareEpochFence is never logged) shows as its last logged state.
``describe_producers`` reads a partition's producer state (``Log.active_producers``,
including other processes' appends) and ``abort`` appends the ABORT marker to the
partition's log as a partition leader appends WriteTxnMarkers' (``Log.append_marker``),
refused as the leader refuses it. The coordinator id shown is the data dir's
``broker.id`` (meta.properties).
"""

import os
import time
from typing import NamedTuple

from ..protocol import ApiKey, ErrorCode
from .hanging_transactions import ProducerState

__all__ = ["TxnAdminError", "Listing", "Description", "BrokerTransactions",
           "DataDirTransactions"]

E = ErrorCode
_TRANSACTION_KEY = 1          # WIRE: FindCoordinator key type of a transactional id
_DURATION_FILTER = 1          # WIRE: ListTransactions v1+ carries DurationFilter (KIP-994)
RETRY_BACKOFF = 0.1           # seconds; Kafka's retry.backoff.ms is 100
# Answers after which Kafka's admin handlers look the broker up again and retry.
RETRIABLE = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                       E.NOT_COORDINATOR, E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE})
_VERSIONS = {ApiKey.METADATA: (1, 12), ApiKey.FIND_COORDINATOR: (1, 6),
             ApiKey.LIST_TRANSACTIONS: (0, 1), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
             ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.WRITE_TXN_MARKERS: (0, 1)}


class TxnAdminError(Exception):
    """A refusal: ``code`` (an ErrorCode) and the broker's message, if any."""

    def __init__(self, code, message=None):
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(self.code.name + (f": {message}" if message else ""))


class Listing(NamedTuple):
    """One row of ListTransactions."""
    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


class Description(NamedTuple):
    """DescribeTransactions of one id. ``start_ms`` -1: no transaction started;
    ``partitions``: sorted (topic, partition) pairs."""
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int
    partitions: tuple


def _check(code, message=None):
    if code:
        raise TxnAdminError(code, message)


# -- Through brokers ----------------------------------------------------------------------------

class BrokerTransactions:
    """The calls over an :class:`~kqlite.cli.admin_client.AdminClient`; see the module
    docstring."""

    def __init__(self, client, clock=time.time, sleep=time.sleep):
        self.client = client
        self._clock = clock
        self._sleep = sleep

    def now_ms(self):
        return int(self._clock() * 1000)

    def _retrying(self, call, *args):
        """``call(*args)``, made again while it answers a RETRIABLE error and the client's
        timeout has not passed."""
        deadline = self._clock() + self.client.timeout
        while True:
            try:
                return call(*args)
            except TxnAdminError as exc:
                if exc.code not in RETRIABLE or self._clock() + RETRY_BACKOFF > deadline:
                    raise
            self._sleep(RETRY_BACKOFF)

    def _call(self, api_key, body, node=None):
        return self.client.call(api_key, body, versions=_VERSIONS[api_key], node=node)

    def _metadata(self, topics=None):
        answer = self._call(ApiKey.METADATA, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False})
        nodes = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        return nodes, answer["topics"]

    def list(self, producer_ids=(), duration_ms=-1):
        """ListTransactions of every broker: ``producer_ids`` only those (empty: all);
        ``duration_ms`` >= 0 only those running longer (KIP-994, ListTransactions v1)."""
        return self._retrying(self._list, producer_ids, duration_ms)

    def _list(self, producer_ids, duration_ms):
        nodes, _ = self._metadata([])
        low = _VERSIONS[ApiKey.LIST_TRANSACTIONS][0] if duration_ms < 0 else _DURATION_FILTER
        out = []
        for node_id, address in sorted(nodes.items()):
            answer = self.client.call(ApiKey.LIST_TRANSACTIONS, {
                "state_filters": [], "producer_id_filters": list(producer_ids),
                "duration_filter": duration_ms},
                versions=(low, _VERSIONS[ApiKey.LIST_TRANSACTIONS][1]), node=address)
            _check(answer["error_code"])
            out += [Listing(t["transactional_id"], node_id, t["producer_id"],
                            t["transaction_state"]) for t in answer["transaction_states"]]
        return out

    def _coordinator(self, transactional_id):
        """``(node id, (host, port))`` of the id's coordinator."""
        body = {"key": transactional_id, "key_type": _TRANSACTION_KEY,
                "coordinator_keys": [transactional_id]}
        answer = self._call(ApiKey.FIND_COORDINATOR, body)
        if "coordinators" in answer and answer["coordinators"] is not None \
                and "node_id" not in answer:
            (answer,) = answer["coordinators"]
        _check(answer["error_code"], answer.get("error_message"))
        return answer["node_id"], (answer["host"], answer["port"])

    def describe(self, transactional_id):
        return self._retrying(self._describe, transactional_id)

    def _describe(self, transactional_id):
        node_id, address = self._coordinator(transactional_id)
        answer = self._call(ApiKey.DESCRIBE_TRANSACTIONS,
                            {"transactional_ids": [transactional_id]}, address)
        (state,) = answer["transaction_states"]
        _check(state["error_code"])
        return Description(node_id, transactional_id, state["producer_id"],
                           state["producer_epoch"], state["transaction_state"],
                           state["transaction_timeout_ms"], state["transaction_start_time_ms"],
                           tuple(sorted((t["topic"], p) for t in state["topics"]
                                        for p in t["partitions"])))

    def _leaders(self, partitions):
        """``{(topic, partition): (host, port) of its leader}``, from one Metadata."""
        nodes, topics = self._metadata(sorted({t for t, _ in partitions}))
        by_topic = {t["name"]: t for t in topics}
        out = {}
        for topic, partition in partitions:
            entry = by_topic.get(topic)
            if entry is None:
                raise TxnAdminError(E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
            _check(entry["error_code"])
            found = [p for p in entry["partitions"] if p["partition_index"] == partition]
            if not found:
                raise TxnAdminError(E.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"topic {topic!r} has no partition {partition}")
            _check(found[0]["error_code"])
            if found[0]["leader_id"] not in nodes:
                raise TxnAdminError(E.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
            out[(topic, partition)] = nodes[found[0]["leader_id"]]
        return out

    def describe_producers(self, topic, partition, broker_id=None):
        """The partition's active producers, asked of its leader or of ``broker_id``."""
        return self.producers_of([(topic, partition)], broker_id)[(topic, partition)]

    def producers_of(self, partitions, broker_id=None):
        """``{(topic, partition): [ProducerState]}``: one DescribeProducers per broker asked
        (each partition's leader, or ``broker_id``); any partition's error fails the call,
        as the admin client's ``all()`` does."""
        return self._retrying(self._producers_of, sorted(set(partitions)), broker_id)

    def _producers_of(self, partitions, broker_id):
        if broker_id is None:
            where = self._leaders(partitions)
        else:
            nodes, _ = self._metadata([])
            if broker_id not in nodes:
                raise TxnAdminError(E.BROKER_NOT_AVAILABLE, f"no broker {broker_id}")
            where = dict.fromkeys(partitions, nodes[broker_id])
        by_node = {}
        for (topic, partition), node in where.items():
            by_node.setdefault(node, {}).setdefault(topic, []).append(partition)
        out = {}
        for node, topics in by_node.items():
            answer = self._call(ApiKey.DESCRIBE_PRODUCERS, {"topics": [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}, node)
            for t in answer["topics"]:
                for p in t["partitions"]:
                    _check(p["error_code"], p["error_message"])
                    out[(t["name"], p["partition_index"])] = [
                        ProducerState(a["producer_id"], a["producer_epoch"],
                                      a["coordinator_epoch"], a["last_sequence"],
                                      a["last_timestamp"], a["current_txn_start_offset"])
                        for a in p["active_producers"]]
        return out

    def partitions(self, topic=None, broker_id=None):
        """``[(topic, partition)]`` of ``topic`` (None: every topic, the internal ones
        too, as Kafka's tool lists them), only those with a replica on ``broker_id`` when
        given."""
        _, topics = self._metadata(None if topic is None else [topic])
        out = []
        for t in topics:
            _check(t["error_code"])
            out += [(t["name"], p["partition_index"]) for p in t["partitions"]
                    if broker_id is None or broker_id in p["replica_nodes"]]
        return sorted(out)

    def abort(self, topic, partition, producer_id, producer_epoch, coordinator_epoch):
        self._retrying(self._abort, topic, partition, producer_id, producer_epoch,
                       coordinator_epoch)

    def _abort(self, topic, partition, producer_id, producer_epoch, coordinator_epoch):
        answer = self._call(ApiKey.WRITE_TXN_MARKERS, {"markers": [
            {"producer_id": producer_id, "producer_epoch": producer_epoch,
             "transaction_result": False, "coordinator_epoch": coordinator_epoch,
             "topics": [{"name": topic, "partition_indexes": [partition]}]}]},
            self._leaders([(topic, partition)])[(topic, partition)])
        (p,) = answer["markers"][0]["topics"][0]["partitions"]
        _check(p["error_code"])

    def close(self):
        self.client.close()


# -- From a data dir ------------------------------------------------------------------------------

def _broker_id(path):
    from .server_properties import read_properties
    try:
        with open(os.path.join(path, "meta.properties"), encoding="utf-8") as f:
            return int(read_properties(f.read()).get("broker.id", 0))
    except (OSError, ValueError):
        return 0


class DataDirTransactions:
    """The calls on the data dir ``path`` (which must exist); see the module docstring."""

    def __init__(self, path, clock=time.time):
        from ..db import open_database
        from ..storage.data_dir import is_data_dir
        from ..storage.fs import OsFileSystem
        if not is_data_dir(OsFileSystem(), path):
            raise FileNotFoundError(f"no data dir at {path}")
        self.db = open_database(path, retention_check_interval_ms=0)
        self.node_id = _broker_id(path)
        self._clock = clock

    def now_ms(self):
        return int(self._clock() * 1000)

    def _states(self):
        """``{transactional id: TransactionLogValue}`` of every id not expired."""
        from ..format.internal_topics import TRANSACTIONS_TOPIC
        from ..format.transaction_records import TransactionStatus
        if TRANSACTIONS_TOPIC not in self.db.list_topics(internal=True):
            return {}
        out = {}
        store = self.db.transaction_state
        for index in range(self.db.partitions_for(TRANSACTIONS_TOPIC)):
            for tid, stored in store.partition_states(index).items():
                if stored.value is not None and stored.value.status != TransactionStatus.DEAD:
                    out[tid] = stored.value
        return out

    def list(self, producer_ids=(), duration_ms=-1):
        """As the coordinator's ListTransactions filters: ``duration_ms`` >= 0 keeps the ids
        whose transaction started more than that long ago."""
        wanted = set(producer_ids)
        now = self.now_ms()
        return [Listing(tid, self.node_id, v.producer_id, v.status.state_name)
                for tid, v in sorted(self._states().items())
                if (not wanted or v.producer_id in wanted)
                and not (duration_ms >= 0 and now - v.start_ms <= duration_ms)]

    def describe(self, transactional_id):
        value = self._states().get(transactional_id)
        if value is None:
            raise TxnAdminError(E.TRANSACTIONAL_ID_NOT_FOUND)
        partitions = tuple(sorted((t, p) for t, ps in value.partitions or () for p in ps))
        return Description(self.node_id, transactional_id, value.producer_id,
                           value.producer_epoch, value.status.state_name, value.timeout_ms,
                           value.start_ms, partitions)

    def _check_partition(self, topic, partition):
        from ..errors import UnknownTopicError
        from ..db.topic_names import InvalidTopicError
        try:
            count = self.db.partitions_for(topic, refresh=True)
        except InvalidTopicError as exc:
            raise TxnAdminError(E.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        except UnknownTopicError:
            raise TxnAdminError(E.UNKNOWN_TOPIC_OR_PARTITION,
                                f"no topic {topic!r} in {self.db.path}") from None
        if not 0 <= partition < count:
            raise TxnAdminError(E.UNKNOWN_TOPIC_OR_PARTITION,
                                f"topic {topic!r} has no partition {partition}")

    def describe_producers(self, topic, partition, broker_id=None):
        if broker_id is not None and broker_id != self.node_id:
            raise TxnAdminError(E.BROKER_NOT_AVAILABLE,
                                f"the data dir is broker {self.node_id}'s, not {broker_id}'s")
        self._check_partition(topic, partition)
        with self.db.leased_log(topic, partition) as lg:
            producers = lg.active_producers()
        return [ProducerState(p.producer_id, p.producer_epoch, p.coordinator_epoch,
                              p.last_sequence, p.last_timestamp, p.current_txn_start_offset)
                for p in producers]

    def producers_of(self, partitions, broker_id=None):
        return {tp: self.describe_producers(*tp, broker_id) for tp in sorted(set(partitions))}

    def partitions(self, topic=None, broker_id=None):
        if broker_id is not None and broker_id != self.node_id:
            return []
        if topic is not None:
            self._check_partition(topic, 0)
        names = [topic] if topic is not None else self.db.list_topics(internal=True)
        return sorted((t, p) for t in names for p in range(self.db.partitions_for(t)))

    def abort(self, topic, partition, producer_id, producer_epoch, coordinator_epoch):
        from ..errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
        self._check_partition(topic, partition)
        self.db.check_writable_topic(topic, "write a marker into")
        try:
            with self.db.leased_log(topic, partition) as lg:
                lg.append_marker(producer_id, producer_epoch, coordinator_epoch, False)
        except InvalidProducerEpochError as exc:
            raise TxnAdminError(E.INVALID_PRODUCER_EPOCH, str(exc)) from None
        except TransactionCoordinatorFencedError as exc:
            raise TxnAdminError(E.TRANSACTION_COORDINATOR_FENCED, str(exc)) from None

    def close(self):
        self.db.close()
