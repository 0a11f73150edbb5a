"""A Produce over many partitions of this broker appends them all in one storage-thread call
(replica_manager.py's ``_append_in_order``), with the rules of one call per partition: each
partition judged on its own in Kafka's order and answered with its own error code beside
the others' offsets -- unknown partition, authorization, a mirror topic's refusal, invalid
records (with KIP-467's record_errors), a batch over max.message.bytes, a duplicate or
out-of-order sequence, a transaction's verification -- offsets in request order, and a
partition named twice appended in its entries' order."""

import pytest
from authorizers import RecordingAuthorizer
from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch
from kqlite.format.record import Record
from kqlite.protocol import ApiKey
from kqlite.protocol import ErrorCode as E
from kqlite.protocol.acl import AclOperation as Op
from kqlite.protocol.acl import ResourceType as R
from kqlite.protocol.mirror_topics import MIRROR_SOURCE

WIDE, GUARDED, COMPACTED, MIRROR, SMALL = "wide", "guarded", "compacted", "mirrored", "small"
DURABLE, FLUSHED = "durable", "flushed"
PARTITIONS = 16
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    authorizer = RecordingAuthorizer()
    broker = BrokerThread(tmp_path_factory.mktemp("gathered") / "data", authorizer=authorizer)
    db = broker.broker.db
    db.create_topic(WIDE, PARTITIONS)
    db.create_topic(GUARDED, 1)
    db.create_topic(COMPACTED, 1, {"cleanup.policy": "compact"})
    db.create_topic(MIRROR, 1, {MIRROR_SOURCE: "source-cluster:topic"})
    db.create_topic(SMALL, 1, {"max.message.bytes": "200"})
    db.create_topic(DURABLE, 2, {"fsync": "always"})
    db.create_topic(FLUSHED, 1, {"flush.messages": "1"})
    calls = []
    io = broker.broker.replicas.io
    run = io.run

    async def counting(fn, *args, **kwargs):
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await run(fn, *args, **kwargs)

    io.run = counting
    client = RawClient(broker)
    yield broker, authorizer, client, calls
    client.close()
    broker.stop()


@pytest.fixture
def client(served):
    served[1].refuse()
    return served[2]


def produce(client, data, *, version=9, acks=-1, transactional_id=None):
    """Produce ``data`` ({topic: [(index, records)]}, in request order); {(topic, index):
    partition answer} (a partition named twice: a list of its answers)."""
    answer = client.call(ApiKey.PRODUCE, version, {
        "transactional_id": transactional_id, "acks": acks, "timeout_ms": 10000,
        "topic_data": [{"name": t, "partition_data": [{"index": i, "records": r}
                                                      for i, r in parts]}
                       for t, parts in data.items()]})
    found = {}
    for t in answer["responses"]:
        for p in t["partition_responses"]:
            key = (t["name"], p["index"])
            if key in found:
                found[key] = (found[key] if isinstance(found[key], list)
                              else [found[key]]) + [p]
            else:
                found[key] = p
    return found


def codes(answers):
    return {k: p["error_code"] for k, p in answers.items()}


def ends(served, topic, indexes):
    broker = served[0]

    async def read():
        found = []
        for i in indexes:
            partition = await broker.broker.replicas.get(topic, i)
            await partition.refresh()
            found.append(partition.log_end_offset)
        return found
    return broker.run(read())


def test_sixteen_partitions_are_appended_in_one_storage_call_in_request_order(served, client):
    calls = served[3]
    before = ends(served, WIDE, range(PARTITIONS))
    order = list(range(PARTITIONS))[::-1]
    calls.clear()
    answers = produce(client, {WIDE: [(i, build_batch([b"a%d" % i] * (i + 1)))
                                      for i in order]})
    assert calls == ["_append_in_order"]
    assert {k: p["base_offset"] for k, p in answers.items()} == \
        {(WIDE, i): before[i] for i in order}
    assert set(codes(answers).values()) == {E.NONE}
    assert ends(served, WIDE, range(PARTITIONS)) == [b + i + 1 for i, b in enumerate(before)]


def test_each_refusal_is_its_partitions_and_the_good_ones_are_appended(served, client):
    authorizer = served[1]
    authorizer.refuse((Op.WRITE, R.TOPIC, GUARDED))
    before = ends(served, WIDE, [0, 1])
    keyless = build_batch([Record(b"v", key=b"k"), Record(b"v", key=None)], timestamp=T0)
    answers = produce(client, {
        WIDE: [(0, build_batch([b"x"])), (99, build_batch([b"x"])),
               (1, build_batch([b"y", b"z"]))],
        GUARDED: [(0, build_batch([b"x"]))],
        COMPACTED: [(0, keyless)],
        MIRROR: [(0, build_batch([b"x"]))],
        SMALL: [(0, build_batch([b"x" * 400]))],
    })
    assert codes(answers) == {
        (WIDE, 0): E.NONE, (WIDE, 99): E.UNKNOWN_TOPIC_OR_PARTITION, (WIDE, 1): E.NONE,
        (GUARDED, 0): E.TOPIC_AUTHORIZATION_FAILED, (COMPACTED, 0): E.INVALID_RECORD,
        (MIRROR, 0): E.INVALID_REQUEST, (SMALL, 0): E.MESSAGE_TOO_LARGE}
    assert [answers[(WIDE, i)]["base_offset"] for i in (0, 1)] == before
    assert ends(served, WIDE, [0, 1]) == [before[0] + 1, before[1] + 2]
    assert [e["batch_index"] for e in answers[(COMPACTED, 0)]["record_errors"]] == [1]
    assert "read-only mirror" in answers[(MIRROR, 0)]["error_message"]
    assert ends(served, COMPACTED, [0]) == ends(served, MIRROR, [0]) == \
        ends(served, SMALL, [0]) == [0]


def test_a_null_and_a_zstd_batch_before_v7_are_refused_beside_a_good_one(served, client):
    zstd = bytearray(build_batch([b"x"]))
    zstd[22] |= 4        # the attributes' codec bits: zstd, which v3-v6 cannot carry
    answers = produce(client, {WIDE: [(2, None), (3, bytes(zstd)), (4, build_batch([b"x"]))]},
                      version=6)
    assert codes(answers) == {(WIDE, 2): E.INVALID_RECORD,
                              (WIDE, 3): E.UNSUPPORTED_COMPRESSION_TYPE, (WIDE, 4): E.NONE}


def _idempotent(client):
    answer = client.call(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1})
    return answer["producer_id"], answer["producer_epoch"]


def _sequenced(pid, epoch, sequence, values):
    return build_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


def test_idempotent_duplicates_and_gaps_are_judged_per_partition(served, client):
    pid, epoch = _idempotent(client)
    first = produce(client, {WIDE: [(5, _sequenced(pid, epoch, 0, [b"a", b"b"])),
                                    (6, _sequenced(pid, epoch, 0, [b"c"]))]})
    assert set(codes(first).values()) == {E.NONE}
    before = ends(served, WIDE, [5, 6, 7])
    again = produce(client, {WIDE: [(5, _sequenced(pid, epoch, 0, [b"a", b"b"])),
                                    (6, _sequenced(pid, epoch, 5, [b"d"])),
                                    (7, _sequenced(pid, epoch, 0, [b"e"]))]})
    assert codes(again) == {(WIDE, 5): E.NONE, (WIDE, 6): E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                            (WIDE, 7): E.NONE}
    # The retry is answered with the offset the first append got, and not written again.
    assert again[(WIDE, 5)]["base_offset"] == first[(WIDE, 5)]["base_offset"]
    assert ends(served, WIDE, [5, 6, 7]) == [before[0], before[1], before[2] + 1]


def test_a_partition_named_twice_is_appended_in_its_entries_order(served, client):
    pid, epoch = _idempotent(client)
    before = ends(served, WIDE, [8])[0]
    answers = produce(client, {WIDE: [(8, _sequenced(pid, epoch, 0, [b"a"])),
                                      (9, _sequenced(pid, epoch, 0, [b"b"])),
                                      (8, _sequenced(pid, epoch, 1, [b"c"]))]})
    assert [(p["error_code"], p["base_offset"]) for p in answers[(WIDE, 8)]] == \
        [(E.NONE, before), (E.NONE, before + 1)]
    assert answers[(WIDE, 9)]["error_code"] == E.NONE


def test_acks_zero_and_one_append_as_acks_all_does(served, client):
    before = ends(served, WIDE, [10, 11])
    assert set(codes(produce(client, {WIDE: [(10, build_batch([b"a"])),
                                             (11, build_batch([b"b"]))]}, acks=1)).values()) \
        == {E.NONE}
    client.send(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": 0, "timeout_ms": 10000, "topic_data": [
            {"name": WIDE, "partition_data": [{"index": 10, "records": build_batch([b"c"])},
                                              {"index": 11, "records": build_batch([b"d"])}]}]})
    # Answered in order on the connection: once this answer is here, the acks=0 one is in.
    produce(client, {WIDE: [(12, build_batch([b"e"]))]})
    assert ends(served, WIDE, [10, 11]) == [before[0] + 2, before[1] + 2]


def _transaction(client, txn_id, partitions):
    answer = client.call(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1})
    pid, epoch = answer["producer_id"], answer["producer_epoch"]
    added = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
            {"name": WIDE, "partitions": partitions}]})
    assert {p["partition_error_code"] for t in added["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]} == {E.NONE}
    return pid, epoch


def test_transactional_batches_across_partitions_verify_each_one(served, client):
    pid, epoch = _transaction(client, "gathered-txn", [13, 14])
    batches = {i: build_batch([b"t%d" % i], producer_id=pid, producer_epoch=epoch,
                              base_sequence=0, transactional=True) for i in (13, 14, 15)}
    before = ends(served, WIDE, [13, 14, 15])
    answers = produce(client, {WIDE: sorted(batches.items())}, version=10,
                      transactional_id="gathered-txn")
    # Partition 15 was never added: verification refuses it, the other two are appended.
    assert codes(answers) == {(WIDE, 13): E.NONE, (WIDE, 14): E.NONE,
                              (WIDE, 15): E.INVALID_TXN_STATE}
    assert answers[(WIDE, 15)]["error_message"] == "Partition was not added to the transaction"
    assert ends(served, WIDE, [13, 14, 15]) == [before[0] + 1, before[1] + 1, before[2]]
    ended = client.call(ApiKey.END_TXN, 3, {"transactional_id": "gathered-txn",
                                            "producer_id": pid, "producer_epoch": epoch,
                                            "committed": True})
    assert ended["error_code"] == E.NONE


def test_partitions_that_fsync_every_append_are_appended_by_their_own_calls(served, client):
    """Their fsyncs then run at once on the storage threads, not one after another in
    the gathered call; which policy a log has, its first append tells."""
    calls = served[3]
    data = {WIDE: [(0, build_batch([b"w"])), (1, build_batch([b"w"]))],
            DURABLE: [(0, build_batch([b"d"])), (1, build_batch([b"d"]))],
            FLUSHED: [(0, build_batch([b"f"]))]}
    assert set(codes(produce(client, data)).values()) == {E.NONE}
    before = ends(served, DURABLE, [0, 1]) + ends(served, FLUSHED, [0])
    calls.clear()
    assert set(codes(produce(client, data)).values()) == {E.NONE}
    assert sorted(calls) == ["_append_as_leader"] * 3 + ["_append_in_order"]
    assert ends(served, DURABLE, [0, 1]) + ends(served, FLUSHED, [0]) == \
        [end + 1 for end in before]
