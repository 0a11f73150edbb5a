"""The target side of offset-preserving mirrors (kqlite/server/mirror_append.py), against a
broker in a thread with Kafka's ACL authorizer: a mirror append with CLUSTER_ACTION keeps
the source's batches byte for byte at their offsets (gaps and the log start included);
each hostile input -- a batch below the log end, offsets going backwards, a bad CRC, a
topic that is no mirror, a principal without CLUSTER_ACTION -- is answered with Kafka's
code and nothing is stored; producers are refused INVALID_REQUEST until the mark is
removed, and the mark survives a restart; DeleteRecords, CreatePartitions and config
changes other than the promotion are refused POLICY_VIOLATION unless the mirror asks
(kqlite/server/mirror_guard.py)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))

from broker_thread import BrokerThread  # noqa: E402
from principals import PrincipalClient, Principals  # noqa: E402

from kqlite.format.batch import build_batch, parse_header  # noqa: E402
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402
from kqlite.protocol.acl import AclOperation as Op  # noqa: E402
from kqlite.protocol.acl import AclPermissionType as Perm  # noqa: E402
from kqlite.protocol.acl import PatternType as P  # noqa: E402
from kqlite.protocol.acl import ResourceType as R  # noqa: E402
from kqlite.server.authorization import AclAuthorizer, parse_super_users  # noqa: E402
from kqlite.protocol.connection import encode_request  # noqa: E402
from kqlite.protocol.mirror_topics import MIRROR_CLIENT_ID  # noqa: E402
from kqlite.server.mirror_append import MIRROR_APPEND_ID, MIRROR_SOURCE  # noqa: E402
from kqlite.server.mirror_guard import config_change_refusal  # noqa: E402

ADMIN, MIRROR, ALICE = "User:admin", "User:mirror", "User:alice"
T0 = 1_700_000_000_000


def batch(base, n, epoch=3):
    return build_batch([b"r%d" % (base + i) for i in range(n)], base_offset=base,
                       timestamp=T0, partition_leader_epoch=epoch)


def grant(client, principal, operation, resource_type, name):
    answer = client.call(ApiKey.CREATE_ACLS, 3, {"creations": [{
        "resource_type": resource_type, "resource_name": name,
        "resource_pattern_type": P.LITERAL, "principal": principal, "host": "*",
        "operation": operation, "permission_type": Perm.ALLOW}]})
    assert answer["results"][0]["error_code"] == ErrorCode.NONE


def produce(client, topic, records, transactional_id=None):
    answer = client.call(ApiKey.PRODUCE, 9, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    p = answer["responses"][0]["partition_responses"][0]
    return p["error_code"], p["base_offset"], p["error_message"]


def mirror_append(client, topic, records):
    return produce(client, topic, records, MIRROR_APPEND_ID)


def create(client, topic, mirror_of="source-a"):
    configs = [{"name": MIRROR_SOURCE, "value": mirror_of}] if mirror_of else []
    answer = client.call(ApiKey.CREATE_TOPICS, 5, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": configs}], "timeout_ms": 5000, "validate_only": False})
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE, answer


def log_bytes(broker, topic):
    """The partition's segment bytes and (log start, log end) as storage has them."""
    db = broker.broker.replicas.db
    with db.leased_log(topic, 0) as lg:
        lg.flush()
        data = b"".join(open(os.path.join(lg.path, name), "rb").read()
                        for name in sorted(os.listdir(lg.path)) if name.endswith(".log"))
        return data, (lg.start_offset, lg.end_offset)


@pytest.fixture
def principals():
    return Principals()


@pytest.fixture
def served(tmp_path, principals):
    with principals.installed():
        broker = BrokerThread(tmp_path / "data", authorizer=AclAuthorizer(
            super_users=parse_super_users(ADMIN)))
        admin = principals.client(broker, ADMIN)
        grant(admin, MIRROR, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster")
        for who in (MIRROR, ALICE):
            grant(admin, who, Op.WRITE, R.TOPIC, "m")
            grant(admin, who, Op.WRITE, R.TOPIC, "plain")
        create(admin, "m")
        clients = {who: principals.client(broker, who) for who in (MIRROR, ALICE)}
        yield broker, admin, clients
        for c in (admin, *clients.values()):
            c.close()
        if not broker.loop.is_closed():       # a test may have stopped it to restart
            broker.stop()


def test_mirror_append_keeps_batches_at_their_offsets_gaps_and_log_start(served):
    broker, _admin, clients = served
    first, second, third = batch(40, 3), batch(43, 2, epoch=4), batch(50, 1, epoch=4)
    assert mirror_append(clients[MIRROR], "m", first + second)[:2] == (ErrorCode.NONE, 40)
    # A gap forward, as a compacted source leaves one.
    assert mirror_append(clients[MIRROR], "m", third)[:2] == (ErrorCode.NONE, 50)
    data, positions = log_bytes(broker, "m")
    assert data == first + second + third
    assert positions == (40, 51)


@pytest.mark.parametrize("case", ["below-log-end", "gap-backwards", "bad-crc", "not-mirror",
                                  "no-cluster-action"])
def test_hostile_mirror_appends_are_refused_and_nothing_is_stored(served, case):
    broker, admin, clients = served
    assert mirror_append(clients[MIRROR], "m", batch(0, 5))[0] == ErrorCode.NONE
    before = log_bytes(broker, "m")
    client, topic = clients[MIRROR], "m"
    if case == "below-log-end":
        records, code = batch(4, 2), ErrorCode.OFFSET_OUT_OF_RANGE
    elif case == "gap-backwards":
        records, code = batch(8, 2) + batch(6, 1), ErrorCode.INVALID_RECORD
    elif case == "bad-crc":
        records = bytearray(batch(5, 2))
        records[-1] ^= 0xFF
        records, code = bytes(records), ErrorCode.CORRUPT_MESSAGE
    elif case == "not-mirror":
        create(admin, "plain", mirror_of=None)
        records, code, topic = batch(0, 1), ErrorCode.INVALID_REQUEST, "plain"
    else:
        client, records, code = clients[ALICE], batch(5, 1), \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert mirror_append(client, topic, records)[0] == code
    assert log_bytes(broker, "m") == before
    if topic == "plain":
        assert log_bytes(broker, "plain")[1] == (0, 0)


def test_producers_are_refused_until_the_mark_is_removed_and_the_mark_survives_restart(
        served, tmp_path):
    broker, admin, clients = served
    assert mirror_append(clients[MIRROR], "m", batch(0, 2))[0] == ErrorCode.NONE
    code, _, message = produce(clients[ALICE], "m", build_batch([b"x"], timestamp=T0))
    assert code == ErrorCode.INVALID_REQUEST and "read-only mirror of source-a" in message
    broker.stop()
    principals = Principals()
    with principals.installed():
        again = BrokerThread(tmp_path / "data", authorizer=AclAuthorizer(
            super_users=parse_super_users(ADMIN)))
        alice, admin2 = principals.client(again, ALICE), principals.client(again, ADMIN)
        try:
            assert produce(alice, "m", build_batch([b"x"], timestamp=T0))[0] == \
                ErrorCode.INVALID_REQUEST
            # Promotion: the mark removed, the topic takes producers after the mirrored end.
            answer = admin2.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 2, "resource_name": "m", "configs": [
                    {"name": MIRROR_SOURCE, "config_operation": 1, "value": None}]}],
                "validate_only": False})
            assert answer["responses"][0]["error_code"] == ErrorCode.NONE, answer
            assert produce(alice, "m", build_batch([b"x"], timestamp=T0))[:2] == \
                (ErrorCode.NONE, 2)
            assert mirror_append(admin2, "m", batch(3, 1))[0] == ErrorCode.INVALID_REQUEST
        finally:
            alice.close()
            admin2.close()
            again.stop()


def test_the_mark_is_spelt_the_same_by_storage_and_the_wire():
    from kqlite.protocol import mirror_topics
    from kqlite.storage import config_rules
    assert config_rules.MIRROR_SOURCE == mirror_topics.MIRROR_SOURCE
    assert set(config_rules.MIRROR_RULES) == {mirror_topics.MIRROR_SOURCE}


def _promote(admin, topic):
    answer = admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": topic, "configs": [
            {"name": MIRROR_SOURCE, "config_operation": 1, "value": None}]}],
        "validate_only": False})
    assert answer["responses"][0]["error_code"] == ErrorCode.NONE, answer


def _epoch_end(client, topic, epoch):
    answer = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": epoch,
                                         "current_leader_epoch": -1}]}]})
    p = answer["topics"][0]["partitions"][0]
    return p["error_code"], p["leader_epoch"], p["end_offset"]


def _batch_epochs(broker, topic):
    data, _ = log_bytes(broker, topic)
    epochs, pos = [], 0
    while pos < len(data):
        header = parse_header(data, pos)
        epochs.append(header.partition_leader_epoch)
        pos += header.size
    return epochs


def test_a_promoted_single_broker_mirror_never_stamps_an_epoch_below_the_copied_ones(served):
    """KIP-1279's invariant on one broker: the mirrored batches keep the source's epochs
    (3, then 4), and after the promotion a producer's batch carries the largest one, not
    the broker's own 0; the leader-epoch cache only grows, and OffsetForLeaderEpoch gives
    Kafka's LeaderEpochFileCache.endOffsetFor over it: the requested epoch below the first
    known with that first epoch's start, a known one with the start of the next (the log
    end for the latest), a later one UNDEFINED (-1, -1)."""
    broker, admin, clients = served
    assert mirror_append(clients[MIRROR], "m", batch(0, 3) + batch(3, 2, epoch=4))[0] == 0
    _promote(admin, "m")
    assert produce(clients[ALICE], "m", build_batch([b"x"], timestamp=T0))[:2] == \
        (ErrorCode.NONE, 5)
    epochs = _batch_epochs(broker, "m")
    assert epochs == [3, 4, 4]
    with broker.broker.replicas.db.leased_log("m", 0) as lg:
        assert list(lg.epochs.entries) == [(3, 0), (4, 3)]
    answers = {e: _epoch_end(clients[ALICE], "m", e) for e in (2, 3, 4, 5)}
    assert answers == {2: (0, 2, 0), 3: (0, 3, 3), 4: (0, 4, 6), 5: (0, -1, -1)}


def test_a_producer_id_copied_is_never_handed_out_after_promotion(served):
    _broker, admin, clients = served
    mirrored = build_batch([b"p"], base_offset=0, timestamp=T0, producer_id=5000,
                           producer_epoch=0, base_sequence=0)
    assert mirror_append(clients[MIRROR], "m", mirrored)[0] == ErrorCode.NONE
    answer = admin.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                     "transaction_timeout_ms": 60000})
    assert answer["error_code"] == ErrorCode.NONE and answer["producer_id"] > 5000


def test_reserve_above_moves_every_later_id_past_the_copied_one(tmp_path):
    from kqlite.db.producer_ids import ProducerIdAllocator
    ids = ProducerIdAllocator(str(tmp_path))
    assert ids.allocate() == 0
    ids.reserve_above(0)                  # below the next id: nothing to do
    assert ids.allocate() == 1
    ids.reserve_above(10)                 # inside the block in hand: skip to after it
    assert ids.allocate() == 11
    ids.reserve_above(5000)               # past the block: the counter on disk moves
    assert ids.allocate() == 5001
    ids.close()
    again = ProducerIdAllocator(str(tmp_path))      # durable: a restart allocates above
    assert again.allocate() > 5001
    again.close()


class _AsTheMirror(PrincipalClient):
    """A client of ``who`` whose requests carry the mirror's client id."""

    def send(self, api_key, version, body):
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation,
                                         MIRROR_CLIENT_ID, body))


def _delete_records(client, offset=1):
    answer = client.call(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "m", "partitions": [
        {"partition_index": 0, "offset": offset}]}], "timeout_ms": 5000})
    return answer["topics"][0]["partitions"][0]["error_code"]


def _grow(client):
    answer = client.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "m", "count": 2, "assignments": None}], "timeout_ms": 5000,
        "validate_only": False})
    return answer["results"][0]["error_code"]


def _incremental(client, name, value, operation=0):
    answer = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": "m", "configs": [
            {"name": name, "config_operation": operation, "value": value}]}],
        "validate_only": False})
    return answer["responses"][0]["error_code"]


def _legacy(client, configs):
    answer = client.call(ApiKey.ALTER_CONFIGS, 2, {"resources": [{
        "resource_type": 2, "resource_name": "m", "configs": [
            {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": False})
    return answer["responses"][0]["error_code"]


_POLICY = ErrorCode.POLICY_VIOLATION


_ADMIN_CASES = [
    ("delete-records-by-an-admin", ADMIN, False, _delete_records, _POLICY),
    ("delete-records-with-the-id-without-cluster-action", ALICE, True, _delete_records,
     _POLICY),
    ("delete-records-by-the-mirror", MIRROR, True, _delete_records, ErrorCode.NONE),
    ("create-partitions-by-an-admin", ADMIN, False, _grow, _POLICY),
    ("create-partitions-by-the-mirror", MIRROR, True, _grow, ErrorCode.NONE),
    ("incremental-set-by-an-admin", ADMIN, False,
     lambda c: _incremental(c, "retention.ms", "1000"), _POLICY),
    ("incremental-set-by-the-mirror", MIRROR, True,
     lambda c: _incremental(c, "retention.ms", "1000"), _POLICY),
    ("legacy-replace-keeping-the-mark", ADMIN, False,
     lambda c: _legacy(c, {MIRROR_SOURCE: "source-a", "retention.ms": "1000"}), _POLICY),
    ("mark-moved-to-another-source", ADMIN, False,
     lambda c: _incremental(c, MIRROR_SOURCE, "source-b"), _POLICY),
    ("nothing-changes", ADMIN, False,
     lambda c: _incremental(c, MIRROR_SOURCE, "source-a"), ErrorCode.NONE),
    ("promote-incremental", ADMIN, False,
     lambda c: _incremental(c, MIRROR_SOURCE, None, operation=1), ErrorCode.NONE),
    ("promote-legacy", ADMIN, False, lambda c: _legacy(c, {}), ErrorCode.NONE),
]


@pytest.mark.parametrize("case, who, as_mirror, request_, code",
                         [pytest.param(*c, id=c[0]) for c in _ADMIN_CASES])
def test_admin_changes_of_a_mirror_topic_are_the_mirrors_or_the_promotion(
        served, principals, case, who, as_mirror, request_, code):
    broker, admin, _clients = served
    for principal in (MIRROR, ALICE):
        grant(admin, principal, Op.DELETE, R.TOPIC, "m")
        grant(admin, principal, Op.ALTER, R.TOPIC, "m")
        grant(admin, principal, Op.ALTER_CONFIGS, R.TOPIC, "m")
    writer = _AsTheMirror(broker, MIRROR, principals)
    assert mirror_append(writer, "m", batch(0, 5))[0] == ErrorCode.NONE
    writer.close()
    client = _AsTheMirror(broker, who, principals) if as_mirror else \
        (admin if who == ADMIN else None)
    try:
        assert request_(client) == code, case
    finally:
        if client is not admin:
            client.close()
    promoted = case.startswith("promote")
    assert produce(admin, "m", build_batch([b"x"], timestamp=T0))[0] == \
        (ErrorCode.NONE if promoted else ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("case, overrides, new, refused", [
    ("no-mirror-topic", {"retention.ms": 5}, {"retention.ms": 6}, False),
    ("promotion", {MIRROR_SOURCE: "A", "retention.ms": 5}, {"retention.ms": 5}, False),
    ("no-change", {MIRROR_SOURCE: "A"}, {MIRROR_SOURCE: "A"}, False),
    ("no-change-spelt-otherwise", {MIRROR_SOURCE: "A", "retention.ms": 5},
     {MIRROR_SOURCE: "A", "retention.ms": "5"}, False),
    ("a-value-that-does-not-parse", {MIRROR_SOURCE: "A"}, {"retention.ms": "soon"}, False),
    ("another-config", {MIRROR_SOURCE: "A"}, {MIRROR_SOURCE: "A", "retention.ms": "5"},
     True),
    ("promotion-and-another-config", {MIRROR_SOURCE: "A"}, {"retention.ms": "5"}, True),
    ("another-source", {MIRROR_SOURCE: "A"}, {MIRROR_SOURCE: "B"}, True),
])
def test_config_change_refusal_each_branch(case, overrides, new, refused):
    answer = config_change_refusal("m", overrides, new)
    assert (answer is not None) == refused, case
    if refused:
        assert answer[0] == ErrorCode.POLICY_VIOLATION and "mirror of A" in answer[1]
