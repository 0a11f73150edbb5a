"""The transaction coordinator's APIs on the wire, with raw requests against a broker in
a thread: InitProducerId with a transactional id in its versions, AddPartitionsToTxn
(v0-3 from producers, v4+ batched and VerifyOnly from leaders), AddOffsetsToTxn,
DescribeTransactions, ListTransactions, and what hostile input gets: every field checked
before anything is stored, answered with Kafka's codes. Then through a transaction: the
last stable offset held by undecided data (Fetch and ListOffsets under read_committed),
the aborted-transaction list, DescribeProducers' open transaction, KIP-890's
verification of a produce, transactional offsets pending until their marker (OffsetFetch
require_stable), and WriteTxnMarkers ending a hanging transaction."""

import asyncio
import time

import pytest

from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.errors import UnknownTopicError
from kqlite.format.batch import build_batch
from kqlite.format.internal_topics import OFFSETS_TOPIC, TRANSACTIONS_TOPIC
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.mirror_topics import MIRROR_SOURCE
from kqlite.server.mirror_guard import transaction_refusals
from kqlite.server.partition import PartitionError

E = ErrorCode
TOPIC = "txn-apis"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = BrokerThread(tmp_path_factory.mktemp("txn-apis") / "data")
    broker.broker.db.create_topic(TOPIC, 3)
    client = RawClient(broker)
    yield broker, client
    client.close()
    broker.stop()


@pytest.fixture
def client(served):
    return served[1]


_ids = iter(range(1_000_000))


def fresh():
    return f"txn-apis-{next(_ids)}"


def init(client, txn_id, version=4, timeout=60000, producer=(-1, -1)):
    answer = client.call(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": txn_id, "transaction_timeout_ms": timeout,
        "producer_id": producer[0], "producer_epoch": producer[1]})
    return answer["error_code"], answer["producer_id"], answer["producer_epoch"]


def add(client, txn_id, pid, epoch, topics, version=3):
    answer = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in answer["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def describe(client, txn_id):
    (entry,) = client.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})[
        "transaction_states"]
    return entry


def test_init_producer_id_bumps_the_epoch_and_checks_its_input(client):
    txn = fresh()
    code, pid, epoch = init(client, txn)
    assert code == E.NONE and epoch == 0
    assert init(client, txn) == (E.NONE, pid, 1)
    # KIP-360: the current producer expected; only one of its two fields is invalid.
    assert init(client, txn, producer=(pid, 1)) == (E.NONE, pid, 2)
    assert init(client, txn, producer=(pid, -1)) == (E.INVALID_REQUEST, -1, -1)
    assert init(client, txn, producer=(-1, 3)) == (E.INVALID_REQUEST, -1, -1)
    # A stale expected epoch is fenced: PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH
    # for the clients of v3 that do not know it.
    assert init(client, txn, producer=(pid, 0)) == (E.PRODUCER_FENCED, -1, -1)
    assert init(client, txn, version=3, producer=(pid, 0)) == (E.INVALID_PRODUCER_EPOCH, -1, -1)
    for timeout in (0, -5, 900001):
        assert init(client, txn, timeout=timeout)[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert init(client, "")[0] == E.INVALID_REQUEST
    assert describe(client, txn)["producer_epoch"] == 2      # nothing refused was stored


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_init_producer_id_in_every_version(client, version):
    code, pid, epoch = init(client, fresh(), version=version)
    assert code == E.NONE and pid >= 0 and epoch == 0


def test_add_partitions_fails_the_whole_transaction_for_one_bad_partition(client):
    txn = fresh()
    _, pid, epoch = init(client, txn)
    answer = add(client, txn, pid, epoch, {TOPIC: [0, 7], "txn-apis-absent": [0]})
    assert answer == {(TOPIC, 0): E.OPERATION_NOT_ATTEMPTED,
                      (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("txn-apis-absent", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    # An internal topic is never writable this way.
    answer = add(client, txn, pid, epoch, {TOPIC: [1], OFFSETS_TOPIC: [0],
                                           TRANSACTIONS_TOPIC: [0]})
    assert answer == {(TOPIC, 1): E.OPERATION_NOT_ATTEMPTED,
                      (OFFSETS_TOPIC, 0): E.TOPIC_AUTHORIZATION_FAILED,
                      (TRANSACTIONS_TOPIC, 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert describe(client, txn)["transaction_state"] == "Empty"
    assert add(client, txn, pid, epoch, {TOPIC: [0, 1]}) == {(TOPIC, 0): E.NONE,
                                                            (TOPIC, 1): E.NONE}
    entry = describe(client, txn)
    assert entry["transaction_state"] == "Ongoing"
    assert entry["topics"] == [{"topic": TOPIC, "partitions": [0, 1]}]


def test_add_partitions_refusals_by_version(client):
    txn = fresh()
    _, pid, epoch = init(client, txn)
    assert add(client, txn, pid + 1000, epoch, {TOPIC: [0]}) == \
        {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert add(client, txn, pid, epoch + 1, {TOPIC: [0]}, version=2) == \
        {(TOPIC, 0): E.PRODUCER_FENCED}
    assert add(client, txn, pid, epoch + 1, {TOPIC: [0]}, version=1) == \
        {(TOPIC, 0): E.INVALID_PRODUCER_EPOCH}
    assert add(client, fresh(), 0, 0, {TOPIC: [0]}) == \
        {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert add(client, "", 0, 0, {TOPIC: [0]}) == {(TOPIC, 0): E.INVALID_REQUEST}


def test_verify_only_answers_per_transaction_and_logs_nothing(client):
    txn, other = fresh(), fresh()
    _, pid, epoch = init(client, txn)
    add(client, txn, pid, epoch, {TOPIC: [0]})
    answer = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [
        {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
         "verify_only": True, "topics": [{"name": TOPIC, "partitions": [0, 1]}]},
        {"transactional_id": other, "producer_id": 5, "producer_epoch": 0,
         "verify_only": True, "topics": [{"name": TOPIC, "partitions": [2]}]}]})
    assert answer["error_code"] == E.NONE
    results = {r["transactional_id"]: {(t["name"], p["partition_index"]): p["partition_error_code"]
                                       for t in r["topic_results"]
                                       for p in t["results_by_partition"]}
               for r in answer["results_by_transaction"]}
    assert results == {txn: {(TOPIC, 0): E.NONE, (TOPIC, 1): E.TRANSACTION_ABORTABLE},
                       other: {(TOPIC, 2): E.INVALID_PRODUCER_ID_MAPPING}}
    assert describe(client, txn)["topics"] == [{"topic": TOPIC, "partitions": [0]}]


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_add_partitions_refuses_a_mirror_topic_in_every_version(served, client, version):
    """A mirror topic takes no transaction (kqlite/server/mirror_guard.py): its partitions
    answer INVALID_REQUEST, the producer refusal's code, the others
    OPERATION_NOT_ATTEMPTED, from a producer (v0-3) and from a partition leader adding or
    verifying (v4+); nothing joins the transaction."""
    broker, _ = served
    mirror = f"txn-apis-mirror-{version}"
    broker.broker.db.create_topic(mirror, 1, config={MIRROR_SOURCE: "source-a"})
    txn = fresh()
    _, pid, epoch = init(client, txn)
    topics = {TOPIC: [0], mirror: [0]}
    expected = {(TOPIC, 0): E.OPERATION_NOT_ATTEMPTED, (mirror, 0): E.INVALID_REQUEST}
    if version < 4:
        assert add(client, txn, pid, epoch, topics, version=version) == expected
    else:
        for verify_only in (False, True):
            answer = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [
                {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                 "verify_only": verify_only, "topics": [
                     {"name": t, "partitions": ps} for t, ps in topics.items()]}]})
            (result,) = answer["results_by_transaction"]
            assert {(t["name"], p["partition_index"]): p["partition_error_code"]
                    for t in result["topic_results"]
                    for p in t["results_by_partition"]} == expected
    assert describe(client, txn)["transaction_state"] == "Empty"


def test_a_topic_config_out_of_reach_is_retried_not_fatal():
    """A cluster's coordinator reads a topic's config from ZooKeeper to refuse mirror
    topics: while ZooKeeper is out of reach the partitions answer COORDINATOR_NOT_AVAILABLE,
    which every client retries (UNKNOWN_SERVER_ERROR, the lookup's own code, is fatal to
    the Java producer's AddPartitionsToTxn); a topic that is gone is left to the
    request's own check, and a readable one is judged by its mark."""
    class Replicas:
        async def topic_config(self, name):
            if name == "unreachable":
                raise PartitionError(E.UNKNOWN_SERVER_ERROR, "ZooKeeper connection lost")
            if name == "gone":
                raise UnknownTopicError(name)
            return {}, {MIRROR_SOURCE: "a"} if name == "mirror" else {}
    refused = asyncio.run(transaction_refusals(
        Replicas(), ["plain", "unreachable", "gone", "mirror", "unreachable"]))
    assert refused == {"unreachable": E.COORDINATOR_NOT_AVAILABLE,
                       "mirror": E.INVALID_REQUEST}


def test_add_offsets_adds_the_groups_offsets_partition(served, client):
    broker = served[0].broker
    txn = fresh()
    _, pid, epoch = init(client, txn)
    answer = client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
        "group_id": "txn-apis-group"})
    assert answer["error_code"] == E.NONE
    index = broker.coordinator.runtime.partition_for("txn-apis-group")
    assert describe(client, txn)["topics"] == [{"topic": OFFSETS_TOPIC, "partitions": [index]}]
    answer = client.call(ApiKey.ADD_OFFSETS_TO_TXN, 1, {
        "transactional_id": txn, "producer_id": pid, "producer_epoch": epoch + 1,
        "group_id": "txn-apis-group"})
    assert answer["error_code"] == E.INVALID_PRODUCER_EPOCH


def test_end_txn_without_a_transaction_and_fenced(client):
    txn = fresh()
    _, pid, epoch = init(client, txn)
    body = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
            "committed": True}
    assert client.call(ApiKey.END_TXN, 3, body)["error_code"] == E.INVALID_TXN_STATE
    fenced = dict(body, producer_epoch=epoch + 1)
    assert client.call(ApiKey.END_TXN, 2, fenced)["error_code"] == E.PRODUCER_FENCED
    assert client.call(ApiKey.END_TXN, 1, fenced)["error_code"] == E.INVALID_PRODUCER_EPOCH
    assert client.call(ApiKey.END_TXN, 0, dict(body, transactional_id=fresh()))[
        "error_code"] == E.INVALID_PRODUCER_ID_MAPPING


def test_describe_and_list_transactions(client):
    txn = fresh()
    _, pid, epoch = init(client, txn, timeout=123456)
    add(client, txn, pid, epoch, {TOPIC: [2]})
    entry = describe(client, txn)
    assert (entry["error_code"], entry["transaction_state"], entry["transaction_timeout_ms"],
            entry["producer_id"], entry["producer_epoch"]) == (E.NONE, "Ongoing", 123456,
                                                               pid, epoch)
    assert entry["transaction_start_time_ms"] > 0
    missing = describe(client, fresh())
    assert (missing["error_code"], missing["transaction_state"], missing["producer_id"]) == \
        (E.TRANSACTIONAL_ID_NOT_FOUND, "", 0)
    assert describe(client, "")["error_code"] == E.INVALID_REQUEST
    listed = client.call(ApiKey.LIST_TRANSACTIONS, 1, {
        "state_filters": ["Ongoing", "Nonsense"], "producer_id_filters": [pid],
        "duration_filter": -1})
    assert listed["error_code"] == E.NONE and listed["unknown_state_filters"] == ["Nonsense"]
    assert listed["transaction_states"] == [
        {"transactional_id": txn, "producer_id": pid, "transaction_state": "Ongoing"}]
    listed = client.call(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": ["Empty"],
                                                       "producer_id_filters": [pid]})
    assert listed["transaction_states"] == []


def test_a_huge_partition_list_is_answered_and_stores_nothing(client):
    txn = fresh()
    _, pid, epoch = init(client, txn)
    answer = add(client, txn, pid, epoch, {TOPIC: list(range(-50_000, 50_000))})
    assert len(answer) == 100_000
    assert answer[(TOPIC, -1)] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert answer[(TOPIC, 0)] == E.OPERATION_NOT_ATTEMPTED
    assert describe(client, txn)["transaction_state"] == "Empty"


# -- Data, markers and offsets through the transaction -------------------------------------------


def produce(client, txn_id, pid, epoch, partition, values, sequence=0, version=9):
    batch = build_batch([v.encode() for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=sequence, transactional=True)
    answer = client.call(ApiKey.PRODUCE, version, {
        "transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition,
                                                           "records": batch}]}]})
    part = answer["responses"][0]["partition_responses"][0]
    return part["error_code"], part["base_offset"]


def fetch(client, partition, isolation, offset=0):
    answer = client.call(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": TOPIC, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return answer["responses"][0]["partitions"][0]


def latest(client, partition, isolation):
    answer = client.call(ApiKey.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": partition,
                                            "timestamp": -1}]}]})
    return answer["topics"][0]["partitions"][0]["offset"]


def end(client, txn_id, pid, epoch, commit):
    return client.call(ApiKey.END_TXN, 3, {"transactional_id": txn_id, "producer_id": pid,
                                           "producer_epoch": epoch,
                                           "committed": commit})["error_code"]


def settled(served, txn_id):
    """Wait until the transaction's markers are written (EndTxn answers before them)."""
    coordinator = served[0].broker.transactions
    for _ in range(200):
        meta = served[0].run(_metadata(coordinator, txn_id))
        if meta.pending is None:
            return
        time.sleep(0.01)
    raise AssertionError("the markers were not written")


async def _metadata(coordinator, txn_id):
    return coordinator.metadata(txn_id)


def test_an_open_transaction_holds_the_last_stable_offset_until_its_marker(served, client):
    txn = fresh()
    _, pid, epoch = init(client, txn)
    start = latest(client, 1, 0)
    assert add(client, txn, pid, epoch, {TOPIC: [1]}) == {(TOPIC, 1): E.NONE}
    assert produce(client, txn, pid, epoch, 1, ["a", "b"]) == (E.NONE, start)
    # Undecided: read_committed stops before it, read_uncommitted reads it.
    assert latest(client, 1, 1) == start and latest(client, 1, 0) == start + 2
    part = fetch(client, 1, 1, start)
    assert (part["last_stable_offset"], part["high_watermark"], part["records"]) == \
        (start, start + 2, b"")
    assert part["aborted_transactions"] == []
    assert fetch(client, 1, 0, start)["aborted_transactions"] is None
    producers = client.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": TOPIC, "partition_indexes": [1]}]})["topics"][0]["partitions"][0]
    (mine,) = [p for p in producers["active_producers"] if p["producer_id"] == pid]
    assert (mine["producer_epoch"], mine["last_sequence"], mine["current_txn_start_offset"]) \
        == (epoch, 1, start)
    assert end(client, txn, pid, epoch, False) == E.NONE
    settled(served, txn)
    # Aborted: the marker follows the data; read_committed reads to the end, with the
    # aborted transaction listed for the consumer to skip.
    assert latest(client, 1, 1) == start + 3 == latest(client, 1, 0)
    part = fetch(client, 1, 1, start)
    assert part["last_stable_offset"] == start + 3
    assert part["aborted_transactions"] == [{"producer_id": pid, "first_offset": start}]


def test_produce_outside_the_transaction_is_refused_by_verification(client):
    txn = fresh()
    _, pid, epoch = init(client, txn)
    add(client, txn, pid, epoch, {TOPIC: [0]})
    # Partition 2 was never added: Kafka's leader answers INVALID_TXN_STATE below v11 and
    # TRANSACTION_ABORTABLE from v11.
    assert produce(client, txn, pid, epoch, 2, ["x"], version=10)[0] == E.INVALID_TXN_STATE
    assert produce(client, txn, pid, epoch, 2, ["x"], version=11)[0] == \
        E.TRANSACTION_ABORTABLE
    # A fenced epoch: INVALID_PRODUCER_EPOCH, as a leader answers a verification's
    # PRODUCER_FENCED.
    assert produce(client, txn, pid, epoch + 1, 0, ["x"])[0] == E.INVALID_PRODUCER_EPOCH
    # Two producers in one request: INVALID_PRODUCER_ID_MAPPING for the whole request.
    batches = [build_batch([b"m"], producer_id=p, producer_epoch=0, base_sequence=0,
                           transactional=True) for p in (pid, pid + 1)]
    answer = client.call(ApiKey.PRODUCE, 9, {
        "transactional_id": txn, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": i, "records": b}
                                               for i, b in enumerate(batches)]}]})
    assert [p["error_code"] for p in answer["responses"][0]["partition_responses"]] == \
        [E.INVALID_PRODUCER_ID_MAPPING] * 2
    assert produce(client, txn, pid, epoch, 0, ["ok"])[0] == E.NONE


def txn_commit(client, txn_id, pid, epoch, group, offset, version=3, generation=-1,
               member=""):
    answer = client.call(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": txn_id, "group_id": group, "producer_id": pid,
        "producer_epoch": epoch, "generation_id": generation, "member_id": member,
        "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": "m"}]}]})
    return answer["topics"][0]["partitions"][0]["error_code"]


def fetch_offset(client, group, stable):
    answer = client.call(ApiKey.OFFSET_FETCH, 8, {"require_stable": stable, "groups": [
        {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]})
    part = answer["groups"][0]["topics"][0]["partitions"][0]
    return part["error_code"], part["committed_offset"]


@pytest.mark.parametrize("commit", [True, False])
def test_transactional_offsets_are_pending_until_the_marker(served, client, commit):
    txn, group = fresh(), fresh()
    _, pid, epoch = init(client, txn)
    # Without AddOffsetsToTxn the offsets partition is not in the transaction.
    assert txn_commit(client, txn, pid, epoch, group, 5) == E.INVALID_TXN_STATE
    assert txn_commit(client, txn, pid, epoch, group, 5, version=4) == E.TRANSACTION_ABORTABLE
    assert client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
        "group_id": group})["error_code"] == E.NONE
    # KIP-447: a generation or member the group does not have is refused.
    assert txn_commit(client, txn, pid, epoch, group, 5, generation=3, member="m") == \
        E.UNKNOWN_MEMBER_ID
    assert txn_commit(client, txn, pid, epoch, group, 5) == E.NONE
    assert fetch_offset(client, group, True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
    assert fetch_offset(client, group, False) == (E.NONE, -1)
    assert end(client, txn, pid, epoch, commit) == E.NONE
    settled(served, txn)
    assert fetch_offset(client, group, True) == (E.NONE, 5 if commit else -1)


def test_write_txn_markers_ends_a_transaction_left_hanging(served, client):
    """What kafka-transactions.sh abort does: an ABORT marker written with the producer's
    epoch and coordinator epoch, which frees the last stable offset."""
    txn = fresh()
    init(client, txn)
    _, pid, epoch = init(client, txn)
    assert epoch == 1
    add(client, txn, pid, epoch, {TOPIC: [2]})
    start = latest(client, 2, 0)
    produce(client, txn, pid, epoch, 2, ["h"])
    assert latest(client, 2, 1) == start
    answer = client.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
         "topics": [{"name": TOPIC, "partition_indexes": [2, 99]}], "coordinator_epoch": 0}]})
    assert answer["markers"][0]["topics"][0]["partitions"] == [
        {"partition_index": 2, "error_code": E.NONE},
        {"partition_index": 99, "error_code": E.UNKNOWN_TOPIC_OR_PARTITION}]
    assert latest(client, 2, 1) == start + 2
    # An older epoch is refused by the partition's producer state.
    answer = client.call(ApiKey.WRITE_TXN_MARKERS, 0, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch - 1, "transaction_result": True,
         "topics": [{"name": TOPIC, "partition_indexes": [2]}], "coordinator_epoch": 0}]})
    assert answer["markers"][0]["topics"][0]["partitions"][0]["error_code"] == \
        E.INVALID_PRODUCER_EPOCH
