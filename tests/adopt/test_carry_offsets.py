"""carry_offsets.py's table, one test per row, against a scripted broker (no network):
a partition the cluster has a commit for is left alone, a retriable answer is tried
again, any other answer gives the group up; the journal goes once every group is done."""

import asyncio

from kqlite.cluster.adoption import journal as jr
from kqlite.cluster.adoption.carry_offsets import OffsetCarrier
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.storage.fs import DEFAULT_FS


class _Conn:
    def __init__(self, broker):
        self.broker = broker

    async def negotiate_versions(self):
        pass

    def version_for(self, api_key, versions):
        return versions[1]

    async def request(self, api_key, version, body):
        return self.broker.answer(api_key, body)

    async def close(self):
        pass


class _Broker:
    """Coordinator 1 for every group; ``committed`` the cluster's commits; ``script``
    error codes OffsetCommit answers, in turn, before it accepts."""

    def __init__(self, committed=None, script=()):
        self.committed = dict(committed or {})
        self.script = list(script)
        self.commits = []

    def answer(self, api_key, body):
        if api_key == ApiKey.FIND_COORDINATOR:
            return {"error_code": 0, "node_id": 1, "host": "h", "port": 1}
        group = body["group_id"]
        if api_key == ApiKey.OFFSET_FETCH:
            return {"error_code": 0, "topics": [{"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": 0,
                 "committed_offset": self.committed.get((group, t["name"], p), -1)}
                for p in t["partition_indexes"]]} for t in body["topics"]]}
        code = self.script.pop(0) if self.script else ErrorCode.NONE
        if code == ErrorCode.NONE:
            self.commits.append(body)
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in body["topics"]]}


class _Cache:
    def endpoint(self, broker_id, listener):
        return ("127.0.0.1", 1)


class _InterBroker:
    name = "PLAINTEXT"

    def __init__(self, broker):
        self.broker = broker

    async def connect(self, host, port, **options):
        return _Conn(self.broker)


class _Io:
    async def run(self, fn, *args):
        return fn(*args)


class _Node:
    def __init__(self, data_dir, broker):
        self.broker_id = 1
        self.cache = _Cache()
        self.inter_broker = _InterBroker(broker)
        self.broker = type("B", (), {"io": _Io()})()
        self._fs = DEFAULT_FS
        self._data_dir = data_dir


def _carry(tmp_path, broker, offsets):
    journal = {"state": "identity", "offsets": offsets}
    jr.write_journal(DEFAULT_FS, str(tmp_path), journal)

    async def go():
        carrier = OffsetCarrier(_Node(str(tmp_path), broker), journal, retry_backoff_ms=1)
        carrier.start()
        await asyncio.wait_for(carrier.done.wait(), 30)
        return carrier
    carrier = asyncio.run(go())
    assert jr.read_journal(DEFAULT_FS, str(tmp_path)) is None
    return carrier


def test_each_group_is_committed_with_generation_minus_one(tmp_path):
    broker = _Broker()
    carrier = _carry(tmp_path, broker, {"app": [["orders", 0, 7, 2, "m"]]})
    (body,) = broker.commits
    assert body["generation_id_or_member_epoch"] == -1 and body["member_id"] == ""
    assert body["topics"] == [{"name": "orders", "partitions": [
        {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": 2,
         "committed_metadata": "m"}]}]
    assert carrier.carried == {"app": 1}


def test_a_partition_the_cluster_has_a_commit_for_is_left_alone(tmp_path):
    broker = _Broker(committed={("app", "orders", 0): 99})
    carrier = _carry(tmp_path, broker,
                     {"app": [["orders", 0, 7, -1, ""], ["orders", 1, 5, -1, ""]]})
    (body,) = broker.commits
    assert [p["partition_index"] for p in body["topics"][0]["partitions"]] == [1]
    assert carrier.carried == {"app": 1}


def test_a_retriable_answer_is_tried_again(tmp_path):
    broker = _Broker(script=[ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             ErrorCode.NOT_COORDINATOR])
    carrier = _carry(tmp_path, broker, {"app": [["orders", 0, 7, -1, ""]]})
    assert len(broker.commits) == 1 and carrier.carried == {"app": 1}


def test_any_other_answer_gives_the_group_up(tmp_path):
    broker = _Broker(script=[ErrorCode.UNKNOWN_MEMBER_ID])
    carrier = _carry(tmp_path, broker, {"busy": [["orders", 0, 7, -1, ""]],
                                        "idle": [["orders", 1, 3, -1, ""]]})
    assert "UNKNOWN_MEMBER_ID" in carrier.given_up["busy"]     # tried first: sorted
    assert carrier.carried == {"idle": 1}
