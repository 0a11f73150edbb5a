"""Topic names on the wire: Kafka's rules (1-249 of [a-zA-Z0-9._-], not "." or "..") are
checked by every API, a bad name gets INVALID_TOPIC_EXCEPTION (17) on the same
connection and nothing is created or deleted anywhere (least of all outside the data
dir), and valid names up to the 249-character limit work end to end, across a restart.
Internal topics cannot be deleted by clients.

Raw frames through kqlite's codec: no client library sends names that break the rules.
"""

import os

import pytest

from broker_process import BrokerProcess, RawClient

from kqlite.format.batch import build_batch, decode_batch
from kqlite.protocol import ApiKey, ErrorCode

INVALID = ErrorCode.INVALID_TOPIC_EXCEPTION

BAD_NAMES = [
    "../escape", "../../escape", "../../../escape", "a/../../escape", "/tmp/escape",
    "..", ".", "", "x\0y", "sp ace", "caf\u00e9", "e" * 250, "f" * 1000,
]


def _tree(root, skip=None):
    """Every path under ``root`` (relative), except below ``skip``."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        if skip is not None and os.path.abspath(dirpath) == os.path.abspath(skip):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A data dir with decoys beside it and inside it: the topic store is
    <data>/.kqlite/topics, so from there "../../victim" is <data>/victim.json and
    "../../../victim" is next to the data dir."""
    parent = tmp_path_factory.mktemp("names")
    data = parent / "data"
    data.mkdir()
    for target in (parent, data, data / ".kqlite"):
        target.mkdir(exist_ok=True)
        (target / "victim.json").write_text('{"name": "victim"}')
        (target / "victim-0").mkdir()
        (target / "victim-0" / "00000000000000000000.log").write_bytes(b"keep me")
    return parent, data


@pytest.fixture(scope="module")
def broker(place):
    _parent, data = place
    b = BrokerProcess(data)
    yield b
    b.stop()


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def metadata(c, name, auto):
    body = c.call(ApiKey.METADATA, 9,
                  {"topics": [{"name": name}], "allow_auto_topic_creation": auto})
    return [t["error_code"] for t in body["topics"]]


def produce(c, name):
    body = c.call(ApiKey.PRODUCE, 7, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": build_batch([b"v"])}]}]})
    return [p["error_code"] for t in body["responses"] for p in t["partition_responses"]]


def fetch(c, name):
    body = c.call(ApiKey.FETCH, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                    "max_bytes": 1 << 20, "isolation_level": 0, "topics": [
                                        {"topic": name, "partitions": [
                                            {"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 1 << 20}]}]})
    return [p["error_code"] for t in body["responses"] for p in t["partitions"]]


def list_offsets(c, name):
    body = c.call(ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return [p["error_code"] for t in body["topics"] for p in t["partitions"]]


def delete_records(c, name):
    body = c.call(ApiKey.DELETE_RECORDS, 1, {"timeout_ms": 5000, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "offset": -1}]}]})
    return [p["error_code"] for t in body["topics"] for p in t["partitions"]]


def epoch_end(c, name):
    body = c.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": name, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
    return [p["error_code"] for t in body["topics"] for p in t["partitions"]]


def describe_configs(c, name):
    body = c.call(ApiKey.DESCRIBE_CONFIGS, 1,
                  {"resources": [{"resource_type": 2, "resource_name": name,
                                  "configuration_keys": None}]})
    return [r["error_code"] for r in body["results"]]


def delete_topic(c, name, version=4):
    body = c.call(ApiKey.DELETE_TOPICS, version, {"topic_names": [name], "timeout_ms": 5000})
    return [r["error_code"] for r in body["responses"]]


def create_topic(c, name, validate_only):
    body = c.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{"name": name, "num_partitions": 1,
                                                        "replication_factor": 1}],
                                            "timeout_ms": 5000, "validate_only": validate_only})
    return [t["error_code"] for t in body["topics"]]


def create_partitions(c, name, validate_only):
    body = c.call(ApiKey.CREATE_PARTITIONS, 1,
                  {"topics": [{"name": name, "count": 4, "assignments": None}],
                   "timeout_ms": 5000, "validate_only": validate_only})
    return [r["error_code"] for r in body["results"]]


CALLS = {
    "Metadata": lambda c, n: metadata(c, n, auto=False),
    "Metadata(auto-create)": lambda c, n: metadata(c, n, auto=True),
    "Produce": produce,
    "Fetch": fetch,
    "ListOffsets": list_offsets,
    "DeleteRecords": delete_records,
    "OffsetForLeaderEpoch": epoch_end,
    "DescribeConfigs": describe_configs,
    "DeleteTopics": delete_topic,
    "CreateTopics": lambda c, n: create_topic(c, n, validate_only=False),
    "CreateTopics(validate_only)": lambda c, n: create_topic(c, n, validate_only=True),
    "CreatePartitions": lambda c, n: create_partitions(c, n, validate_only=False),
    "CreatePartitions(validate_only)": lambda c, n: create_partitions(c, n, validate_only=True),
}


@pytest.mark.parametrize("api", list(CALLS))
def test_a_bad_name_is_invalid_topic_and_touches_nothing(api, place, broker, client):
    parent, data = place
    before_outside = _tree(parent, skip=data)
    before_inside = _tree(data)
    call = CALLS[api]
    for name in BAD_NAMES:
        assert call(client, name) == [INVALID], (api, name)
    assert client.metadata_ok()       # the same connection still serves
    assert _tree(parent, skip=data) == before_outside
    made = _tree(data) - before_inside
    assert not [p for p in made if "escape" in p or p.startswith(("e" * 10, "f" * 10))]
    for target in (parent, data, data / ".kqlite"):
        assert (target / "victim.json").read_text() == '{"name": "victim"}'
        assert (target / "victim-0" / "00000000000000000000.log").read_bytes() == b"keep me"
    assert broker.proc.poll() is None


def _fetched_values(c, name):
    body = c.call(ApiKey.FETCH, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                    "max_bytes": 1 << 20, "isolation_level": 0, "topics": [
                                        {"topic": name, "partitions": [
                                            {"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 1 << 20}]}]})
    (part,) = body["responses"][0]["partitions"]
    assert part["error_code"] == 0
    _header, records = decode_batch(bytes(part["records"]))
    return [r.value for r in records]


@pytest.mark.parametrize("length", [241, 245, 249])
def test_names_up_to_249_characters_work_end_to_end(tmp_path, length):
    data = tmp_path / "data"
    created, auto = "c" * (length - 1) + "1", "a" * (length - 1) + "2"
    b = BrokerProcess(data)
    try:
        c = RawClient(b)
        assert create_topic(c, created, validate_only=True) == [0]
        assert create_topic(c, created, validate_only=False) == [0]
        assert metadata(c, auto, auto=True) == [0]
        for name in (created, auto):
            assert produce(c, name) == [0]
            assert _fetched_values(c, name) == [b"v"]
            assert list_offsets(c, name) == [0]
            assert describe_configs(c, name) == [0]
        assert create_partitions(c, created, validate_only=False) == [0]
        c.close()
    finally:
        assert b.stop() == 0, b.stderr()
    b = BrokerProcess(data)
    try:
        c = RawClient(b)
        for name in (created, auto):
            assert _fetched_values(c, name) == [b"v"]
            assert delete_topic(c, name) == [0]
            assert metadata(c, name, auto=False) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        c.close()
    finally:
        assert b.stop() == 0, b.stderr()
    left = [n for n in os.listdir(data) if n.startswith(("a" * 200, "c" * 200))]
    assert left == []
    for sub in ("topics", "deleting"):
        path = data / ".kqlite" / sub
        assert not [n for n in os.listdir(path) if n.startswith(("a" * 200, "c" * 200))]


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_internal_topics_cannot_be_deleted(client, version):
    group, topic = f"keeper-{version}", f"kept-{version}"
    assert metadata(client, topic, auto=True) == [0]
    # A simple commit (no generation) stores the offset in __consumer_offsets.
    commit = client.call(ApiKey.OFFSET_COMMIT, 2,
                         {"group_id": group, "generation_id_or_member_epoch": -1,
                          "member_id": "", "topics": [
                              {"name": topic, "partitions": [
                                  {"partition_index": 0, "committed_offset": 42,
                                   "committed_metadata": ""}]}]})
    assert [p["error_code"] for t in commit["topics"] for p in t["partitions"]] == [0]
    # Kafka answers a deletion its policy refuses with TOPIC_DELETION_DISABLED, and with
    # INVALID_REQUEST to versions before that code existed (v3).
    expected = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
    for name in ("__consumer_offsets", "__transaction_state"):
        if version < 6:
            body = client.call(ApiKey.DELETE_TOPICS, version,
                               {"topic_names": [name], "timeout_ms": 5000})
        else:
            body = client.call(ApiKey.DELETE_TOPICS, version,
                               {"topics": [{"name": name}], "timeout_ms": 5000})
        assert [(r["name"], r["error_code"]) for r in body["responses"]] == [(name, expected)]
    fetched = client.call(ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0]}]})
    assert [p["committed_offset"] for t in fetched["topics"] for p in t["partitions"]] == [42]
    names = client.call(ApiKey.METADATA, 1, {"topics": None})["topics"]
    assert "__consumer_offsets" in [t["name"] for t in names]
