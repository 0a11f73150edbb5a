"""Fetch sessions (KIP-227): the pure cache (kqlite/server/fetch_sessions.py) against
Kafka's rules, property-tested, then the broker with raw frames and kafka-python, whose
consumer fetches incrementally."""

import random
import time
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.fetch_sessions import (EVICTION_MS, FINAL_EPOCH, INITIAL_EPOCH,
                                          FetchSessionCache, next_epoch)


@dataclass
class Result:
    """What the cache reads of a partition's fetch result."""
    error_code: int = 0
    high_watermark: int = 0
    log_start_offset: int = 0
    size: int = 0
    diverging_epoch: tuple = None

    def release(self):
        pass


def full(cache, keys, now=0, session_id=0, epoch=INITIAL_EPOCH, version=12, follower=False,
         results=None):
    ctx = cache.new_context(version=version, session_id=session_id, epoch=epoch,
                            from_follower=follower, fetch_data={k: {"k": k} for k in keys},
                            forgotten=[], now_ms=now)
    results = results or {}
    return ctx, ctx.respond([(k, results.get(k, Result())) for k, _ in ctx.partitions()], now)


def incremental(cache, session_id, epoch, changed=(), forgotten=(), now=0, version=12,
                results=None):
    ctx = cache.new_context(version=version, session_id=session_id, epoch=epoch,
                            from_follower=False, fetch_data={k: {"k": k} for k in changed},
                            forgotten=list(forgotten), now_ms=now)
    results = results or {}
    return ctx, ctx.respond([(k, results.get(k, Result())) for k, _ in ctx.partitions()], now)


# -- The pure cache ---------------------------------------------------------------------------

def test_epochs_follow_kafka():
    assert [next_epoch(e) for e in (0, 1, 41, 0x7FFFFFFF, -1)] == [1, 2, 42, 1, -1]


def test_full_then_incremental_answers_only_what_changed():
    cache = FetchSessionCache()
    _, answer = full(cache, [("t", 0), ("t", 1), ("u", 0)])
    sid = answer.session_id
    assert sid != 0 and [k for k, _ in answer.partitions] == [("t", 0), ("t", 1), ("u", 0)]
    _, answer = incremental(cache, sid, 1)
    assert (answer.error_code, answer.session_id, answer.partitions) == (0, sid, [])
    assert len(answer.omitted) == 3
    _, answer = incremental(cache, sid, 2, results={("t", 1): Result(size=10),
                                                   ("u", 0): Result(high_watermark=5)})
    assert [k for k, _ in answer.partitions] == [("t", 1), ("u", 0)]
    # A partition that returned records goes to the back of the session.
    assert list(cache.get(sid).partitions) == [("t", 0), ("u", 0), ("t", 1)]
    _, answer = incremental(cache, sid, 3, results={("u", 0): Result(high_watermark=5)})
    assert answer.partitions == []


def test_errors_and_log_start_moves_are_answered_every_time():
    cache = FetchSessionCache()
    sid = full(cache, [("t", 0)])[1].session_id
    err = {("t", 0): Result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=-1)}
    assert len(incremental(cache, sid, 1, results=err)[1].partitions) == 1
    assert len(incremental(cache, sid, 2, results=err)[1].partitions) == 1
    moved = {("t", 0): Result(log_start_offset=3, high_watermark=-1)}
    assert len(incremental(cache, sid, 3, results=moved)[1].partitions) == 1
    assert incremental(cache, sid, 4, results=moved)[1].partitions == []


def test_added_updated_and_forgotten_partitions():
    cache = FetchSessionCache()
    sid = full(cache, [("t", 0), ("t", 1)])[1].session_id
    ctx, answer = incremental(cache, sid, 1, changed=[("t", 2), ("t", 0)],
                              forgotten=[("t", 1)])
    assert [k for k, _ in ctx.partitions()] == [("t", 0), ("t", 2)]
    assert [k for k, _ in answer.partitions] == [("t", 2)]      # new: never answered
    # Forgetting every partition closes the session: a sessionless answer.
    ctx, answer = incremental(cache, sid, 2, forgotten=[("t", 0), ("t", 2)])
    assert answer.session_id == 0 and cache.get(sid) is None


def test_session_refusals():
    cache = FetchSessionCache()
    sid = full(cache, [("t", 0)])[1].session_id
    assert incremental(cache, sid + 1, 1)[1].error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert incremental(cache, sid, 5)[1].error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert incremental(cache, sid, 1, version=13)[1].error_code == \
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # Refusals leave the session as it was.
    assert incremental(cache, sid, 1)[1].error_code == ErrorCode.NONE


def test_a_stale_concurrent_request_is_refused_when_it_answers():
    cache = FetchSessionCache()
    sid = full(cache, [("t", 0)])[1].session_id
    first = cache.new_context(version=12, session_id=sid, epoch=1, from_follower=False,
                              fetch_data={}, forgotten=[], now_ms=0)
    incremental(cache, sid, 2)        # a second request got in while the first waited
    answer = first.respond([(("t", 0), Result(size=1))], 0)
    assert (answer.error_code, answer.session_id) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                                      sid)
    assert answer.partitions == [] and len(answer.omitted) == 1


def test_full_requests_close_their_session_and_final_epoch_wants_none():
    cache = FetchSessionCache()
    sid = full(cache, [("t", 0)])[1].session_id
    _, answer = full(cache, [("t", 0)], session_id=sid, epoch=FINAL_EPOCH)
    assert answer.session_id == 0 and len(cache) == 0
    sid = full(cache, [("t", 0)])[1].session_id
    new = full(cache, [("t", 0)], session_id=sid)[1].session_id
    assert new not in (0, sid) and len(cache) == 1


def test_a_full_cache_evicts_only_as_kafka_does():
    cache = FetchSessionCache(max_slots=2)
    a = full(cache, [("t", i) for i in range(3)], now=0)[1].session_id
    b = full(cache, [("t", i) for i in range(5)], now=10)[1].session_id
    # Both are young: nobody is evictable, no session for the newcomer.
    assert full(cache, [("t", 0)], now=20)[1].session_id == 0
    # Past the eviction time without use, the least recently used one goes.
    incremental(cache, b, 1, now=EVICTION_MS + 5)
    c = full(cache, [("t", 0)], now=EVICTION_MS + 6)[1].session_id
    assert c and cache.get(a) is None and cache.get(b) is not None
    # Old enough and touched again, the smaller of two sessions makes way for a bigger
    # newcomer, never for a smaller one.
    later = 2 * EVICTION_MS + 100
    incremental(cache, b, 2, now=later)
    incremental(cache, c, 1, now=later + 1)
    assert full(cache, [], now=later + 2)[1].session_id == 0
    d = full(cache, [("t", i) for i in range(4)], now=later + 3)[1].session_id
    assert d and cache.get(c) is None and cache.get(b) is not None
    assert cache.evictions == 2


def test_followers_are_privileged():
    cache = FetchSessionCache(max_slots=1)
    f = full(cache, [("t", 0)], follower=True, now=0)[1].session_id
    incremental(cache, f, 1, now=10)
    # A young privileged session cannot be evicted, not even by a follower.
    assert full(cache, [("t", i) for i in range(9)], follower=True, now=20)[1].session_id == 0
    consumer = FetchSessionCache(max_slots=1)
    s = full(consumer, [("t", i) for i in range(3)], now=0)[1].session_id
    incremental(consumer, s, 1, now=10)
    # A young consumer session makes way for a follower's (privileged) one.
    assert full(consumer, [("t", i) for i in range(3)], follower=True, now=20)[1].session_id
    assert consumer.get(s) is None


keys = st.tuples(st.sampled_from("abc"), st.integers(0, 3))


class SessionClients(RuleBasedStateMachine):
    """Clients following the protocol against one small cache: whatever the eviction
    does, the cache stays bounded, an incremental request with the right epoch either
    works or says its session is gone, the partitions read are the session's, and a
    partition with records is always in the answer."""

    def __init__(self):
        super().__init__()
        self.cache = FetchSessionCache(max_slots=3, eviction_ms=100, rng=random.Random(7))
        self.now = 0
        self.clients = {}       # session id -> (expected epoch, set of keys)

    @rule(wanted=st.lists(keys, min_size=1, max_size=6, unique=True),
          advance=st.integers(0, 60), follower=st.booleans())
    def full_fetch(self, wanted, advance, follower):
        self.now += advance
        _, answer = full(self.cache, wanted, now=self.now, follower=follower)
        assert answer.error_code == 0
        assert [k for k, _ in answer.partitions] == wanted
        if answer.session_id:
            assert answer.session_id not in self.clients
            self.clients[answer.session_id] = (1, set(wanted))

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), advance=st.integers(0, 60),
          added=st.lists(keys, max_size=3, unique=True),
          dropped=st.lists(keys, max_size=3, unique=True),
          with_records=st.lists(keys, max_size=3, unique=True))
    def incremental_fetch(self, data, advance, added, dropped, with_records):
        self.now += advance
        sid = data.draw(st.sampled_from(sorted(self.clients)))
        epoch, have = self.clients[sid]
        results = {k: Result(size=7) for k in with_records}
        ctx, answer = incremental(self.cache, sid, epoch, changed=added, forgotten=dropped,
                                  now=self.now, results=results)
        if answer.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            del self.clients[sid]            # evicted
            return
        assert answer.error_code == 0
        expected = (have | set(added)) - set(dropped)
        if not expected:
            # The session emptied and is closed; as Kafka's newContext, the request is then
            # served sessionless: what it named, even a partition it also forgot.
            assert {k for k, _ in ctx.partitions()} == set(added)
            assert answer.session_id == 0
            del self.clients[sid]
            return
        assert {k for k, _ in ctx.partitions()} == expected
        sent = {k for k, _ in answer.partitions}
        assert {k for k in with_records if k in expected} <= sent
        assert set(added) - set(dropped) <= sent | {k for k, _ in answer.omitted}
        assert sent | {k for k, _ in answer.omitted} == expected
        self.clients[sid] = (next_epoch(epoch), expected)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), wrong=st.integers(2, 50))
    def wrong_epoch(self, data, wrong):
        sid = data.draw(st.sampled_from(sorted(self.clients)))
        epoch, _have = self.clients[sid]
        _, answer = incremental(self.cache, sid, epoch + wrong, now=self.now)
        assert answer.error_code in (ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                     ErrorCode.FETCH_SESSION_ID_NOT_FOUND)

    @invariant()
    def bounded_and_in_step(self):
        assert len(self.cache) <= 3
        for sid, (epoch, have) in self.clients.items():
            session = self.cache.get(sid)
            if session is not None:
                assert (session.epoch, set(session.partitions)) == (epoch, have)


TestSessionClients = SessionClients.TestCase
TestSessionClients.settings = settings(max_examples=60, stateful_step_count=30,
                                       deadline=None)


class Draws:
    """A random source replaying ``values`` (then counting up), repeats included."""

    def __init__(self, values):
        self.values = list(values)
        self.next = 1

    def randrange(self, lo, hi):
        if self.values:
            return self.values.pop(0)
        self.next += 1
        return self.next


@given(st.lists(st.integers(1, 5), max_size=20))
def test_session_ids_are_positive_and_unique_whatever_the_draws(draws):
    cache = FetchSessionCache(max_slots=30, rng=Draws(draws))
    ids = [full(cache, [("t", 0)], now=i)[1].session_id for i in range(12)]
    assert all(0 < i < 2**31 for i in ids) and len(set(ids)) == len(ids)


# -- The broker --------------------------------------------------------------------------------

def body(topics, session_id=0, epoch=-1, forgotten=(), by_id=False):
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": topics, "forgotten_topics_data": list(forgotten)}


def p(index, offset=0):
    return {"partition": index, "fetch_offset": offset, "partition_max_bytes": 1 << 20}


def shape(response):
    return {(t.get("topic") or t.get("topic_id"), q["partition_index"]):
            (q["error_code"], len(q["records"])) for t in response["responses"]
            for q in t["partitions"]}


@pytest.fixture
def broker(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        b.broker.db.create_topic("s", 3)
        with b.broker.db.leased_log("s", 0) as log:
            log.append_batches(build_batch([b"zero"]))
        yield b


def test_broker_full_and_incremental_sessions_by_name(broker):
    client = RawClient(broker)
    r = client.call(ApiKey.FETCH, 12,
                    body([{"topic": "s", "partitions": [p(0), p(1), p(2)]}], epoch=0))
    sid = r["session_id"]
    assert sid and r["error_code"] == 0 and len(shape(r)) == 3
    r = client.call(ApiKey.FETCH, 12, body([{"topic": "s", "partitions": [p(0, 1)]}], sid, 1))
    assert (r["error_code"], r["session_id"], shape(r)) == (0, sid, {})
    broker.run(_append(broker, "s", 2, b"two"))
    r = client.call(ApiKey.FETCH, 12, body([], sid, 2))
    assert shape(r) == {("s", 2): (0, len(build_batch([b"two"])))}
    r = client.call(ApiKey.FETCH, 12,
                    body([], sid, 3, forgotten=[{"topic": "s", "partitions": [2]}]))
    assert shape(r) == {}
    assert list(broker.broker.fetch_sessions.get(sid).partitions) == [("s", 0), ("s", 1)]
    assert client.call(ApiKey.FETCH, 12, body([], sid, 3))["error_code"] == \
        ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert client.call(ApiKey.FETCH, 12, body([], sid + 1, 1))["error_code"] == \
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    r = client.call(ApiKey.FETCH, 13, body([], sid, 4))
    assert (r["error_code"], r["responses"]) == (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, [])
    r = client.call(ApiKey.FETCH, 12,
                    body([{"topic": "s", "partitions": [p(0)]}], sid, FINAL_EPOCH))
    assert r["session_id"] == 0 and len(broker.broker.fetch_sessions) == 0
    client.close()


def test_broker_sessions_by_topic_id(broker):
    client = RawClient(broker)
    meta = client.call(ApiKey.METADATA, 12,
                       {"topics": [{"name": "s", "topic_id": uuid.UUID(int=0)}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    tid = meta["topics"][0]["topic_id"]
    r = client.call(ApiKey.FETCH, 16,
                    body([{"topic_id": tid, "partitions": [p(0), p(1)]}], epoch=0))
    sid = r["session_id"]
    assert sid and shape(r) == {(tid, 0): (0, len(build_batch([b"zero"]))), (tid, 1): (0, 0)}
    r = client.call(ApiKey.FETCH, 16, body([{"topic_id": tid, "partitions": [p(0, 1)]}], sid, 1))
    assert shape(r) == {}
    r = client.call(ApiKey.FETCH, 16,
                    body([], sid, 2, forgotten=[{"topic_id": tid, "partitions": [0]}]))
    assert shape(r) == {}
    assert client.call(ApiKey.FETCH, 12, body([], sid, 3))["error_code"] == \
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    client.close()


async def _append(broker, topic, index, value):
    partition = await broker.broker.replicas.get(topic, index)
    return await partition.append(build_batch([value]), acks=1, timeout_ms=1000)


def test_kafka_python_consumes_through_incremental_sessions(broker):
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{broker.port}",
                                   group_id="sessions", auto_offset_reset="earliest",
                                   fetch_max_wait_ms=100)
    consumer.subscribe(["s"])
    got = []
    deadline = time.monotonic() + 60
    sent = 0
    while len(got) < 30 and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            got.extend(r.value for r in records)
        if got and sent < 29:
            broker.run(_append(broker, "s", sent % 3, b"m%d" % sent))
            sent += 1
    epochs = [s.epoch for s in broker.broker.fetch_sessions.sessions()]
    consumer.close()
    assert sorted(got) == sorted([b"zero"] + [b"m%d" % i for i in range(29)])
    # kafka-python kept one session and fetched incrementally throughout.
    assert max(epochs, default=0) > 10


def test_an_incremental_session_always_answers_a_diverging_epoch():
    # A diverging epoch carries no bytes and may leave the HW as it was: without this
    # rule an incremental session would drop it and the follower would never truncate.
    cache = FetchSessionCache(10)
    key = ("t", 0)
    ctx, answer = full(cache, [key], follower=True, results={key: Result(high_watermark=5)})
    sid = answer.session_id
    quiet = {key: Result(high_watermark=5)}
    _ctx, answer = incremental(cache, sid, 1, changed=[], forgotten=[], results=quiet)
    assert answer.partitions == []
    diverged = {key: Result(high_watermark=5, diverging_epoch=(1, 3))}
    _ctx, answer = incremental(cache, sid, 2, changed=[], forgotten=[], results=diverged)
    assert [k for k, _ in answer.partitions] == [key]
