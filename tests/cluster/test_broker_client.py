"""The inter-broker client (kqlite.cluster.network.broker_client) and the ordered channels built on
it (kqlite.cluster.network.channels), against real `kqlite serve` processes: version negotiation,
Metadata, Produce then a follower Fetch whose records go straight into a Log, pipelining,
a broker killed mid-request and restarted, request timeouts, unreachable brokers and
oversized responses. A few protocol faults no real broker commits (a wrong correlation
id, an old ApiVersions) are played by a scripted peer speaking through the project's codec.
"""

import asyncio
import os
import signal
import sys

import pytest

from kqlite.cluster.network.broker_client import (
    BrokerConnectError, BrokerConnection, BrokerDisconnectedError, BrokerProtocolError,
    BrokerRequestTimeoutError, BrokerResponseTooLargeError, UnsupportedVersionError)
from kqlite.cluster.network.channels import (BrokerChannel, ChannelManager, ChannelRemovedError,
                                             UnknownBrokerError)
from kqlite.format.batch import build_batch, decode_batch
from kqlite.protocol import ApiKey, ErrorCode, ServerConnection
from kqlite.storage import Isolation
from kqlite.storage.log import Log

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_process import BrokerProcess, free_port, unique  # noqa: E402

LIMIT = 120  # seconds any scenario may take before it fails instead of hanging


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, LIMIT))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("peer") / "data")
    yield b
    b.stop()


@pytest.fixture
def own_broker(tmp_path):
    """A broker this test may kill and restart on the same port."""
    brokers = [BrokerProcess(tmp_path / "data")]

    def restart():
        brokers.append(BrokerProcess(tmp_path / "data",
                                     extra=["--listen", f"127.0.0.1:{brokers[0].port}"]))
        return brokers[-1]
    yield brokers[0], restart
    for b in brokers:
        b.stop()


def connect(port, **options):
    return BrokerConnection.connect("127.0.0.1", port, broker_id=0, client_id="test-h3",
                                    **options)


async def create_topic(conn, name):
    body = await conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": []}]})
    assert body["topics"][0]["error_code"] == ErrorCode.NONE, body


def produce_body(topic, values, acks=-1):
    return {"acks": acks, "timeout_ms": 30000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": build_batch(values)}]}]}


def fetch_body(topic, offset=0, *, replica_id=-1, max_wait_ms=0, max_bytes=1 << 20):
    return {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": max_bytes, "isolation_level": 0, "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes,
                "current_leader_epoch": -1}]}]}


def fetched(body):
    (topic,) = body["responses"]
    (part,) = topic["partitions"]
    assert part["error_code"] == ErrorCode.NONE, part
    return part


def values_of(records):
    data, pos, out = bytes(records), 0, []
    while pos < len(data):
        header, recs = decode_batch(data, pos)
        out += [(r.offset, r.value) for r in recs]
        pos += header.size
    return out


def metadata_body(topics, auto_create=False):
    return {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": auto_create,
            "include_topic_authorized_operations": False}


async def wait_until(predicate, what):
    for _ in range(LIMIT * 100):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


# -- one connection ------------------------------------------------------------------------

def test_negotiates_versions_with_a_real_broker(broker):
    async def scenario():
        conn = await connect(broker.port)
        table = await conn.negotiate_versions()
        assert conn.api_versions is table
        assert table[ApiKey.API_VERSIONS][0] == 0 and table[ApiKey.FETCH][1] >= 12
        # The highest version the broker, the codec and the caller share.
        assert conn.version_for(ApiKey.FETCH) == table[ApiKey.FETCH][1]
        assert conn.version_for(ApiKey.METADATA, (0, 5)) == 5
        assert conn.version_for(ApiKey.FETCH, (12, 12)) == 12
        # A single broker does not serve the ZooKeeper-mode inter-broker APIs.
        with pytest.raises(UnsupportedVersionError) as info:
            conn.version_for(ApiKey.LEADER_AND_ISR)
        assert "LeaderAndIsr" in str(info.value) and f"127.0.0.1:{broker.port}" in str(info.value)
        with pytest.raises(UnsupportedVersionError, match="no common version of Metadata"):
            newest = table[ApiKey.METADATA][1]
            conn.version_for(ApiKey.METADATA, (newest + 1, newest + 3))
        await conn.close()
    run(scenario())


def test_metadata_names_the_broker(broker):
    async def scenario():
        conn = await connect(broker.port)
        body = await conn.request(ApiKey.METADATA, 12, {"topics": None,
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        assert [(b["node_id"], b["port"]) for b in body["brokers"]] == [(0, broker.port)]
        await conn.close()
    run(scenario())


def test_produce_then_follower_fetch_gives_records_a_log_can_append(broker, tmp_path):
    topic = unique("replicated")

    async def scenario():
        conn = await connect(broker.port)
        await create_topic(conn, topic)
        values = [b"one", b"two", b"three" * 100]
        produced = await conn.request(ApiKey.PRODUCE, 9, produce_body(topic, values))
        (part,) = produced["responses"][0]["partition_responses"]
        assert part["error_code"] == ErrorCode.NONE and part["base_offset"] == 0
        follower = fetched(await conn.request(ApiKey.FETCH, 12,
                                              fetch_body(topic, replica_id=1)))
        consumer = fetched(await conn.request(ApiKey.FETCH, 12, fetch_body(topic)))
        await conn.close()
        return follower, consumer, values

    follower, consumer, values = run(scenario())
    records = follower["records"]
    assert isinstance(records, memoryview) and follower["high_watermark"] == 3
    assert bytes(records) == bytes(consumer["records"])
    assert values_of(records) == list(enumerate(values))
    # What a follower does with them: append with the leader's offsets.
    log = Log.open(str(tmp_path / f"{topic}-0"))
    try:
        assert log.append_batches(records, assign_offsets=False) == 0
        assert log.next_offset == 3
        assert [(r.offset, r.value) for r in log.read(0, isolation=Isolation.LOG_END)] == \
            list(enumerate(values))
    finally:
        log.close()


def test_one_hundred_pipelined_requests_each_get_their_own_answer(broker):
    async def scenario():
        conn = await connect(broker.port)
        names = [unique(f"absent-{i}") for i in range(100)]
        # send() writes without waiting, so all hundred are in flight before any answer
        # is read: the responses must be matched to them by correlation id, in order.
        futures = [conn.send(ApiKey.METADATA, 12, metadata_body([name])) for name in names]
        assert conn.in_flight == 100
        bodies = await asyncio.gather(*futures)
        assert [b["topics"][0]["name"] for b in bodies] == names
        assert {b["topics"][0]["error_code"] for b in bodies} == {
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # The same through concurrent request() calls.
        bodies = await asyncio.gather(*(conn.request(ApiKey.METADATA, 9, metadata_body([name]))
                                        for name in names))
        assert [b["topics"][0]["name"] for b in bodies] == names
        assert conn.in_flight == 0
        await conn.close()
    run(scenario())


def test_unanswered_and_abandoned_requests_keep_the_stream_in_step(broker):
    topic = unique("in-step")

    async def scenario():
        conn = await connect(broker.port)
        await create_topic(conn, topic)
        # acks=0: Kafka sends no response, so nothing may wait for one.
        fire = produce_body(topic, [b"fire"], acks=0)
        assert await conn.request(ApiKey.PRODUCE, 9, fire) is None
        assert conn.in_flight == 0
        # A caller that gives up: its answer still arrives first and is dropped.
        abandoned = asyncio.ensure_future(
            conn.request(ApiKey.FETCH, 12, fetch_body(topic, 1, max_wait_ms=300)))
        await wait_until(lambda: conn.in_flight == 1, "the fetch in flight")
        abandoned.cancel()
        answer = await conn.request(ApiKey.FETCH, 12, fetch_body(topic))
        assert values_of(fetched(answer)["records"]) == [(0, b"fire")]
        assert abandoned.cancelled() and not conn.closed
        await conn.close()
    run(scenario())


def test_a_timed_out_request_fails_alone_and_closes_the_connection(broker):
    topic = unique("quiet")

    async def scenario():
        conn = await connect(broker.port)
        await create_topic(conn, topic)
        before = await conn.request(ApiKey.METADATA, 12, metadata_body([topic]))
        # An empty partition and a long max_wait: the broker holds the fetch.
        slow = conn.send(ApiKey.FETCH, 12, fetch_body(topic, max_wait_ms=60000, replica_id=1),
                         timeout=0.5)
        behind = conn.send(ApiKey.METADATA, 12, metadata_body([topic]))
        with pytest.raises(BrokerRequestTimeoutError) as timeout:
            await slow
        assert "Fetch v12" in str(timeout.value)
        assert f"broker 0 at 127.0.0.1:{broker.port}" in str(timeout.value)
        # Kafka answers in order, so the request behind cannot be answered either: it
        # fails as a disconnection caused by the timeout, never with a late answer.
        with pytest.raises(BrokerDisconnectedError, match="Metadata v12.*timed out"):
            await behind
        assert conn.closed
        with pytest.raises(BrokerDisconnectedError, match="not sent"):
            await conn.request(ApiKey.METADATA, 12, metadata_body([topic]))
        assert before["topics"][0]["error_code"] == ErrorCode.NONE
        await conn.close()
    run(scenario())


def test_oversized_responses_are_refused(broker):
    topic = unique("big")

    async def scenario():
        setup = await connect(broker.port)
        await create_topic(setup, topic)
        await setup.request(ApiKey.PRODUCE, 9, produce_body(topic, [os.urandom(20000)]))
        await setup.close()
        conn = await connect(broker.port, max_response_size=4096)
        small = await conn.request(ApiKey.METADATA, 12, metadata_body([topic]))
        assert small["topics"][0]["error_code"] == ErrorCode.NONE
        with pytest.raises(BrokerResponseTooLargeError) as info:
            await conn.request(ApiKey.FETCH, 12, fetch_body(topic))
        message = str(info.value)
        assert "Fetch v12" in message and "above the limit of 4096 bytes" in message
        assert conn.closed
        await conn.close()
    run(scenario())


def test_unreachable_broker_fails_to_connect_with_its_name():
    port = free_port()

    async def scenario():
        with pytest.raises(BrokerConnectError, match=f"broker 0 at 127.0.0.1:{port}"):
            await connect(port)
    run(scenario())


def test_a_killed_broker_fails_the_requests_in_flight(own_broker):
    first, _restart = own_broker
    topic = unique("killed")

    async def scenario():
        conn = await connect(first.port)
        await create_topic(conn, topic)
        held = [conn.send(ApiKey.FETCH, 12, fetch_body(topic, max_wait_ms=60000, replica_id=1))
                for _ in range(2)]
        await asyncio.sleep(0)  # let the writes leave
        await asyncio.to_thread(first.stop, signal.SIGKILL)
        for future in held:
            with pytest.raises(BrokerDisconnectedError) as info:
                await future
            assert "Fetch v12" in str(info.value)
            assert f"broker 0 at 127.0.0.1:{first.port}" in str(info.value)
        assert conn.closed
        await conn.close()
    run(scenario())


# -- scripted peers --------------------------------------------------------------------------

async def scripted_peer(answer):
    """A server that decodes requests with the project's codec and writes whatever
    ``answer(request)`` returns (a list of byte chunks)."""
    async def handle(reader, writer):
        conn = ServerConnection()
        while data := await reader.read(65536):
            for request in conn.receive_data(data):
                for chunk in answer(request):
                    writer.write(chunk)
        writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_an_old_broker_gets_the_api_versions_it_knows():
    from kqlite.protocol.connection import encode_response
    seen = []

    def answer(request):
        seen.append(request.api_version)
        if request.api_version > 2:
            # A broker that knows ApiVersions v0-v2 answers in v0 with its range (KIP-511).
            return encode_response(ApiKey.API_VERSIONS, 0, request.correlation_id, {
                "error_code": ErrorCode.UNSUPPORTED_VERSION,
                "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": 0,
                              "max_version": 2}]})
        return encode_response(ApiKey.API_VERSIONS, 2, request.correlation_id, {
            "error_code": 0, "throttle_time_ms": 0, "api_keys": [
                {"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 2},
                {"api_key": ApiKey.FETCH, "min_version": 4, "max_version": 11}]})

    async def scenario():
        server, port = await scripted_peer(answer)
        conn = await connect(port)
        assert await conn.negotiate_versions() == {ApiKey.API_VERSIONS: (0, 2),
                                                   ApiKey.FETCH: (4, 11)}
        assert conn.version_for(ApiKey.FETCH) == 11
        await conn.close()
        server.close()
    run(scenario())
    assert seen[0] > 2 and seen[1:] == [2]


def test_a_wrong_correlation_id_closes_the_connection():
    from kqlite.protocol.connection import encode_response

    def answer(request):
        return encode_response(ApiKey.METADATA, request.api_version,
                               request.correlation_id + 7, {"brokers": [], "topics": []})

    async def scenario():
        server, port = await scripted_peer(answer)
        conn = await connect(port)
        first = conn.send(ApiKey.METADATA, 1, {"topics": None})
        second = conn.send(ApiKey.METADATA, 1, {"topics": None})
        with pytest.raises(BrokerProtocolError, match="correlation id 7 where Metadata v1 "
                                                      r"\(correlation id 0\) was next"):
            await first
        with pytest.raises(BrokerDisconnectedError, match="correlation id 1"):
            await second
        assert conn.closed
        await conn.close()
        server.close()
    run(scenario())


def test_answers_before_a_bad_frame_are_delivered_and_later_requests_fail():
    from kqlite.protocol.connection import encode_response
    answered = {"brokers": [{"node_id": 0, "host": "h", "port": 1, "rack": None}],
                "topics": []}
    held = []

    def answer(request):
        # Nothing until the third request; then, in one write, a good answer to the first
        # and an undecodable one (an empty body) to the second.
        held.append(request)
        if len(held) < 3:
            return []
        good = b"".join(encode_response(ApiKey.METADATA, 1, held[0].correlation_id,
                                        answered))
        return [good + (4).to_bytes(4, "big") + held[1].correlation_id.to_bytes(4, "big")]

    async def scenario():
        server, port = await scripted_peer(answer)
        conn = await connect(port)
        first, second, third = (conn.send(ApiKey.METADATA, 1, {"topics": None})
                                for _ in range(3))
        assert (await first)["brokers"][0]["host"] == "h"
        with pytest.raises(BrokerProtocolError, match=r"undecodable response from broker 0 "
                                                      r".*Metadata v1 \(correlation id 1\)"):
            await second
        with pytest.raises(BrokerDisconnectedError, match=r"correlation id 2\) to .* failed"):
            await third
        assert conn.closed and conn.in_flight == 0
        with pytest.raises(BrokerDisconnectedError, match="not sent.*undecodable"):
            conn.send(ApiKey.METADATA, 1, {"topics": None})
        await conn.close()
        server.close()
    run(scenario())


# -- channels ----------------------------------------------------------------------------------

def test_a_channel_sends_in_order_and_survives_a_broker_restart(own_broker):
    first, restart = own_broker
    topic = unique("ordered")

    async def scenario():
        manager = ChannelManager(client_id="test-h3", backoff=0.05, backoff_max=0.2,
                                 request_timeout=30)
        manager.add_broker(0, "127.0.0.1", first.port)
        # A second, independent channel holds a fetch that is to be resent after the
        # restart (the controller's rule: retry until answered).
        resender = BrokerChannel(0, "127.0.0.1", first.port, client_id="test-h3",
                                 backoff=0.05, backoff_max=0.2)
        created = await manager.send(0, ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}]})
        assert created["topics"][0]["error_code"] == ErrorCode.NONE

        waiting = fetch_body(topic, max_wait_ms=60000, replica_id=1)
        held = manager.send(0, ApiKey.FETCH, 12, waiting, retry=False)
        resent = resender.send(ApiKey.FETCH, 12, waiting)
        await wait_until(lambda: all(c.connection is not None and c.connection.in_flight
                                     for c in (manager.channel(0), resender)),
                         "both fetches in flight")
        await asyncio.to_thread(first.stop, signal.SIGKILL)
        with pytest.raises(BrokerDisconnectedError, match="Fetch v12"):
            await held

        # Queued while the broker is down: delivered in order once it is back.
        completed = []
        produces = []
        for value in (b"a", b"b", b"c"):
            future = manager.send(0, ApiKey.PRODUCE, 9, produce_body(topic, [value]))
            future.add_done_callback(lambda f, v=value: completed.append(v))
            produces.append(future)
        assert manager.channel(0).queue_size == 3 and manager.total_queue_size == 3
        await asyncio.to_thread(restart)
        answers = await asyncio.gather(*produces)
        assert completed == [b"a", b"b", b"c"]
        offsets = [a["responses"][0]["partition_responses"][0]["base_offset"] for a in answers]
        assert offsets == [0, 1, 2]
        part = fetched(await resent)
        assert values_of(part["records"])[0] == (0, b"a")
        records = fetched(await manager.send(0, ApiKey.FETCH, 12, fetch_body(topic)))["records"]
        assert values_of(records) == [(0, b"a"), (1, b"b"), (2, b"c")]

        resender.remove()
        await resender.wait_removed()
        await manager.close()
    run(scenario())


def test_a_timeout_on_a_channel_fails_that_request_and_the_next_one_goes_through(broker):
    topic = unique("timeouts")

    async def scenario():
        manager = ChannelManager(client_id="test-h3", backoff=0.01, backoff_max=0.05)
        manager.add_broker(0, "127.0.0.1", broker.port)
        setup = await connect(broker.port)
        await create_topic(setup, topic)
        await setup.close()
        slow = manager.send(0, ApiKey.FETCH, 12, fetch_body(topic, max_wait_ms=60000),
                            timeout=0.5, retry=False)
        after = manager.send(0, ApiKey.METADATA, 12, metadata_body([topic]))
        with pytest.raises(BrokerRequestTimeoutError, match="Fetch v12"):
            await slow
        assert (await after)["topics"][0]["error_code"] == ErrorCode.NONE
        await manager.close()
    run(scenario())


def test_versions_can_be_chosen_per_connection(broker):
    async def scenario():
        channel = BrokerChannel(0, "127.0.0.1", broker.port, client_id="test-h3")
        chosen = []

        def body(version):
            chosen.append(version)
            return metadata_body([])

        answer = await channel.send(ApiKey.METADATA, (1, 9), body)
        assert chosen == [9] and answer["brokers"][0]["node_id"] == 0
        assert channel.connection.api_versions[ApiKey.METADATA][1] >= 9
        refused = channel.send(ApiKey.LEADER_AND_ISR, (5, 7), lambda v: {})
        with pytest.raises(UnsupportedVersionError, match="LeaderAndIsr"):
            await refused
        # The failure was this request's alone.
        assert (await channel.send(ApiKey.METADATA, 12, metadata_body([])))["brokers"]
        channel.remove()
        await channel.wait_removed()
    run(scenario())


class FakeClock:
    """The channel's sleep: records each backoff and advances simulated time at once."""

    def __init__(self):
        self.now = 0.0
        self.delays = []

    async def sleep(self, delay):
        self.delays.append(delay)
        self.now += delay
        await asyncio.sleep(0)


def test_an_unreachable_broker_is_retried_with_capped_exponential_backoff():
    port = free_port()  # nothing listens there
    clock = FakeClock()
    attempts = []

    async def counting_connect(host, port, **options):
        attempts.append(clock.now)
        return await BrokerConnection.connect(host, port, **options)

    async def scenario():
        manager = ChannelManager(client_id="test-h3", backoff=0.1, backoff_max=1.0,
                                 jitter=0.2, connector=counting_connect, sleep=clock.sleep)
        manager.add_broker(3, "127.0.0.1", port)
        pending = manager.send(3, ApiKey.METADATA, 12, metadata_body([]))
        await wait_until(lambda: len(attempts) >= 12, "twelve connection attempts")
        manager.remove_broker(3)
        with pytest.raises(ChannelRemovedError) as info:
            await pending
        assert f"broker 3 at 127.0.0.1:{port}" in str(info.value)
        assert "Metadata v12" in str(info.value)
        count = len(attempts)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(attempts) == count, "a removed channel kept connecting"
        with pytest.raises(UnknownBrokerError):
            await manager.send(3, ApiKey.METADATA, 12, metadata_body([]))
        await manager.close()
        return count

    count = run(scenario())
    # Every attempt after the first waited for a backoff: 100 ms doubling, +-20 %, capped
    # at 1 s. So no spinning: few attempts per simulated window.
    assert len(clock.delays) >= count - 1
    for n, delay in enumerate(clock.delays):
        expected = 0.1 * 2 ** n
        assert min(0.8 * expected, 1.0) <= delay <= min(1.2 * expected, 1.0)
    assert sum(1 for t in attempts if t <= 5.0) <= 9
    assert all(b > a for a, b in zip(attempts, attempts[1:]))


def test_removing_a_channel_cancels_what_it_holds(broker):
    topic = unique("removed")

    async def scenario():
        manager = ChannelManager(client_id="test-h3")
        manager.add_broker(0, "127.0.0.1", broker.port)
        setup = await connect(broker.port)
        await create_topic(setup, topic)
        await setup.close()
        held = manager.send(0, ApiKey.FETCH, 12, fetch_body(topic, max_wait_ms=60000))
        queued = [manager.send(0, ApiKey.METADATA, 12, metadata_body([])) for _ in range(3)]
        channel = manager.channel(0)
        await wait_until(lambda: channel.connection is not None
                         and channel.connection.in_flight, "the fetch in flight")
        manager.remove_broker(0)
        for future in [held, *queued]:
            with pytest.raises(ChannelRemovedError, match="channel was removed"):
                await future
        assert manager.broker_ids == [] and channel.queue_size == 0
        late = channel.send(ApiKey.METADATA, 12, metadata_body([]))
        with pytest.raises(ChannelRemovedError, match="not sent"):
            await late
        await manager.close()
        assert channel.connection is None
    run(scenario())


def test_removing_a_channel_passes_over_requests_their_callers_gave_up(broker):
    """A request its caller cancelled while it waited in the queue (a stopping broker's
    request to the controller) is left as it is when the channel is removed."""
    topic = unique("abandoned")

    async def scenario():
        manager = ChannelManager(client_id="test-h4")
        manager.add_broker(0, "127.0.0.1", broker.port)
        setup = await connect(broker.port)
        await create_topic(setup, topic)
        await setup.close()
        held = manager.send(0, ApiKey.FETCH, 12, fetch_body(topic, max_wait_ms=60000))
        abandoned = manager.send(0, ApiKey.METADATA, 12, metadata_body([]))
        channel = manager.channel(0)
        await wait_until(lambda: channel.connection is not None
                         and channel.connection.in_flight, "the fetch in flight")
        abandoned.cancel()
        await manager.close()
        assert abandoned.cancelled()
        with pytest.raises(ChannelRemovedError):
            await held
    run(scenario())


def test_a_channel_follows_its_broker_to_a_new_address(broker):
    async def scenario():
        manager = ChannelManager(client_id="test-h3", backoff=0.01, backoff_max=0.05)
        manager.add_broker(0, "127.0.0.1", free_port())  # a stale address
        pending = manager.send(0, ApiKey.METADATA, 12, metadata_body([]))
        manager.add_broker(0, "127.0.0.1", broker.port)  # the broker re-registered
        answer = await pending
        assert answer["brokers"][0]["port"] == broker.port
        assert manager.channel(0).port == broker.port
        await manager.close()
    run(scenario())
