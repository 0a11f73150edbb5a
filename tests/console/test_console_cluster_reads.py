"""The bounds of a cluster broker's reads from the other brokers (cluster_reads.py),
without processes: a fake metadata cache and fake connections. A broker that does not
answer in time, refuses the connection or is not alive gives error cells and leaves the
others' answers whole; requests in flight never pass CONCURRENCY; the sampler asks at
most GROUPS_SAMPLED groups a round and reaches every group in turn."""

import asyncio
import types

import pytest

from kqlite.console import cluster_reads
from kqlite.console.cluster_reads import (CONCURRENCY, GROUPS_SAMPLED, ClusterReads, Failed,
                                          Offsets, sample_lags)
from kqlite.protocol.api_keys import ApiKey

USER = types.SimpleNamespace(name="ANONYMOUS", password=None)


class FakeCache:
    def __init__(self, leaders, alive):
        self.broker_id = 1
        self.leaders = leaders                  # {(topic, p): leader}
        self.alive = alive                      # {broker id: behaviour}

    def endpoint(self, broker_id, listener):
        return ("127.0.0.1", broker_id) if broker_id in self.alive else None

    def partition(self, topic, p):
        leader = self.leaders.get((topic, p))
        return None if leader is None else types.SimpleNamespace(leader=leader)

    def alive_brokers(self, listener):
        return [types.SimpleNamespace(broker_id=b) for b in sorted(self.alive)]


class FakeConnection:
    """Answers as a broker holding 10 records in every partition; counts requests in
    flight across connections."""
    in_flight = 0
    most = 0

    def __init__(self, groups):
        self.groups = groups

    def version_for(self, api, versions):
        return versions[1]

    async def request(self, api, version, body):
        FakeConnection.in_flight += 1
        FakeConnection.most = max(FakeConnection.most, FakeConnection.in_flight)
        try:
            await asyncio.sleep(0.01)
            return self.answer(api, body)
        finally:
            FakeConnection.in_flight -= 1

    def answer(self, api, body):
        if api == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": 0,
                 "offset": 0 if p["timestamp"] == -2 else 10} for p in t["partitions"]]}
                for t in body["topics"]]}
        if api == ApiKey.LIST_GROUPS:
            return {"error_code": 0, "groups": [{"group_id": g, "group_state": "Empty"}
                                                for g in self.groups]}
        if api == ApiKey.FIND_COORDINATOR:
            return {"error_code": 0, "node_id": 1}
        if api == ApiKey.OFFSET_FETCH:
            return {"error_code": 0, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 4, "error_code": 0}]}]}
        raise AssertionError(api)

    async def close(self):
        pass


class FakeLogin:
    def __init__(self, cache, groups=()):
        self.cache = cache
        self.groups = groups
        self.opened = []

    async def connect(self, user, address):
        behaviour = self.cache.alive[address[1]]
        self.opened.append(address[1])
        if behaviour == "silent":
            await asyncio.sleep(3600)
        if behaviour == "refuses":
            raise ConnectionRefusedError(111, "refused")
        return FakeConnection(self.groups)


def _reads(leaders, alive, groups=()):
    cache = FakeCache(leaders, alive)
    login = FakeLogin(cache, groups)
    return ClusterReads(types.SimpleNamespace(cache=cache), login, "PLAINTEXT"), login


def test_a_broker_that_fails_gives_error_cells_and_the_others_answer(monkeypatch):
    monkeypatch.setattr(cluster_reads, "TIMEOUT", 0.2)
    leaders = {("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("t", 3): 4, ("t", 4): -1}
    reads, login = _reads(leaders, {1: "answers", 2: "silent", 3: "refuses"})
    found = asyncio.run(reads.offsets(USER, sorted(leaders)))
    assert found[("t", 0)] == Offsets(0, 10, 10)
    assert str(found[("t", 1)]) == "error: broker 2 did not answer in 0.2 s"
    assert str(found[("t", 2)]) == "error: broker 3: ConnectionRefusedError"
    assert str(found[("t", 3)]) == "error: broker 4 is not alive"
    assert str(found[("t", 4)]) == "error: no leader"
    assert 4 not in login.opened            # a broker not alive is not even dialled


def test_requests_in_flight_are_bounded():
    FakeConnection.most = 0
    leaders = {("t", p): p for p in range(1, 41)}
    reads, _login = _reads(leaders, {b: "answers" for b in range(1, 41)})
    found = asyncio.run(reads.offsets(USER, sorted(leaders)))
    assert all(isinstance(v, Offsets) for v in found.values()) and len(found) == 40
    assert FakeConnection.most == CONCURRENCY


def test_the_sampler_takes_a_bounded_round_and_every_group_in_turn():
    groups = [f"g{i:02}" for i in range(GROUPS_SAMPLED * 2 + 3)]
    reads, _login = _reads({("t", 0): 1}, {1: "answers"}, groups)

    async def rounds():
        out, cursor = [], 0
        for _round in range(3):
            lags, cursor = await sample_lags(reads, USER, cursor)
            out.append(lags)
        return out
    seen = []
    for lags in asyncio.run(rounds()):
        assert len(lags) <= GROUPS_SAMPLED
        assert set(lags.values()) == {6}            # 10 records, 4 committed
        seen.extend(g for g, _t, _p in lags)
    assert sorted(set(seen)) == groups


def test_a_group_whose_coordinator_is_silent_is_an_error(monkeypatch):
    monkeypatch.setattr(cluster_reads, "TIMEOUT", 0.2)
    reads, _login = _reads({("t", 0): 1}, {1: "silent"})
    found = asyncio.run(reads.group_offsets(USER, "g"))
    assert isinstance(found, Failed) and "did not answer" in str(found)


@pytest.mark.parametrize("behaviour", ["silent", "refuses"])
def test_messages_of_a_partition_whose_leader_fails_are_an_error(monkeypatch, behaviour):
    monkeypatch.setattr(cluster_reads, "TIMEOUT", 0.2)
    reads, _login = _reads({("t", 0): 2}, {1: "answers", 2: behaviour})
    page = asyncio.run(reads.browse(USER, "t", 0, offset=None, timestamp=None, count=5,
                                    search=None, window=10))
    assert isinstance(page, Failed)
