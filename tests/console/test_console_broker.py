"""The console served by a broker's HTTP listener: beside every /metrics family, with
Kafka's request-time histogram; writes sent as the logged-in user's Kafka requests; a
login checked by the broker's SASL and its ACLs applied; and no storage read on the
broker's event loop."""

import asyncio
import json
import threading
import time

import pytest

from console_processes import ConsoleBroker, form_token, get, post

kafka = pytest.importorskip("kafka")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ConsoleBroker(tmp_path_factory.mktemp("console-broker") / "data",
                      ["--console-allow-writes", "--console-sample-interval", "0.5"])
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap)
        for i in range(20):
            producer.send("orders", json.dumps({"order": i}).encode(), key=b"o%d" % i)
        producer.flush()
        producer.close()
        yield b
    finally:
        assert b.stop() == 0


def test_metrics_keep_their_families_and_add_the_request_histogram(broker):
    status, text = get(f"{broker.url}/metrics")
    assert status == 200
    text = text.decode()
    assert "kqlite_messages_in_total 20" in text
    assert 'kqlite_requests_total{api="Produce"}' in text
    assert 'kafka_network_requestmetrics_totaltimems_bucket{le="1.0",request="Produce"}' in text
    assert 'kafka_network_requestmetrics_totaltimems_count{request="Produce"}' in text
    status, page = get(f"{broker.url}/api/cluster")
    latency = json.loads(page)["latency_ms"]
    assert latency["Produce"]["count"] >= 1 and latency["Produce"]["p99"] >= \
        latency["Produce"]["p50"] >= 0


def test_throughput_is_sampled_for_its_plot(broker):
    def series():
        return json.loads(get(f"{broker.url}/api/cluster")[1])["throughput"]
    deadline = time.monotonic() + 60       # a liveness guard: samples every 0.5 s
    while len(series().get("records in", [])) < 2:
        assert time.monotonic() < deadline, series()
        time.sleep(0.2)
    assert set(series()) == {"records in", "bytes in", "bytes out"}
    status, svg = get(f"{broker.url}/chart/throughput")
    assert status == 200 and svg.count(b"<polyline") == 3


def test_pages_and_writes_through_the_broker(broker):
    status, page = get(f"{broker.url}/topics")
    assert status == 200 and b"orders" in page
    token = form_token(page)
    status, done = post(f"{broker.url}/topics", {"name": "made-here", "partitions": "2",
                                                 "token": token})
    assert status == 200 and b"created" in done, done
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert "made-here" in admin.list_topics()
        status, done = post(f"{broker.url}/messages", {"topic": "made-here", "partition": "1",
                                                       "value": "hello", "token": token})
        assert b"appended at offset 0" in done, done
        found = json.loads(get(f"{broker.url}/api/messages?topic=made-here&partition=1")[1])
        assert [r["value"]["text"] for r in found["records"]] == ["hello"]
        status, done = post(f"{broker.url}/topics/made-here/delete", {"token": token})
        assert b"deleted" in done, done
        assert "made-here" not in admin.list_topics()
    finally:
        admin.close()


def test_reset_offsets_of_an_empty_group(broker):
    consumer = kafka.KafkaConsumer("orders", bootstrap_servers=broker.bootstrap,
                                   group_id="resetters", auto_offset_reset="earliest",
                                   enable_auto_commit=False)
    try:
        while not consumer.poll(1000):
            pass
        consumer.commit()
        group = json.loads(get(f"{broker.url}/api/groups/resetters")[1])
        assert group["state"] == "STABLE"
        assert [m["assignment"] for m in group["members"]] == [[["orders", 0]]]
        text = get(f"{broker.url}/metrics")[1].decode()
        for name in ("FetchConsumer", "Fetch"):    # Kafka counts a fetch under both
            assert f'kafka_network_requestmetrics_totaltimems_count{{request="{name}"}}' \
                in text
        token = form_token(get(f"{broker.url}/topics")[1])
        status, done = post(f"{broker.url}/groups/resetters/reset", {"to": "earliest",
                                                                      "token": token})
        assert b"refused" in done
    finally:
        consumer.close()
    status, done = post(f"{broker.url}/groups/resetters/reset", {"to": "earliest",
                                                                  "token": token})
    assert b"committed" in done, done
    group = json.loads(get(f"{broker.url}/api/groups/resetters")[1])
    assert [o["committed"] for o in group["offsets"]] == [0]


# -- a login checked by the broker's SASL, and its ACLs ---------------------------------------

_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
         'username="alice" password="alice-secret" user_alice="alice-secret" '
         'user_bob="bob-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-sasl")
    config = root / "server.properties"
    config.write_text("\n".join([
        f"log.dirs={root / 'data'}", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={_JAAS}",
        "authorizer.class.name=kqlite.AclAuthorizer", "super.users=User:alice", ""]))
    b = ConsoleBroker(None, ["--console-allow-writes"], config=config)
    try:
        yield b
    finally:
        b.stop()


def test_a_secured_broker_needs_a_login(secured):
    status, _ = get(f"{secured.url}/topics")
    assert status == 401
    assert get(f"{secured.url}/topics", ("alice", "wrong"))[0] == 401
    assert get(f"{secured.url}/topics", ("nobody", "x"))[0] == 401
    assert get(f"{secured.url}/topics", ("alice", "alice-secret"))[0] == 200
    # /metrics stays as it was: Prometheus scrapes it without a login
    assert get(f"{secured.url}/metrics")[0] == 200


def test_the_broker_acls_apply_to_the_console(secured):
    assert get(f"{secured.url}/cluster", ("bob", "bob-secret"))[0] == 403
    assert get(f"{secured.url}/cluster", ("alice", "alice-secret"))[0] == 200
    assert get(f"{secured.url}/topics/__consumer_offsets", ("bob", "bob-secret"))[0] == 403


def test_writes_are_the_users_kafka_requests_under_the_broker_acls(secured):
    status, page = get(f"{secured.url}/topics", ("alice", "alice-secret"))
    token = form_token(page)
    status, done = post(f"{secured.url}/topics", {"name": "bobs", "token": token},
                        ("bob", "bob-secret"))
    assert status == 200 and b"refused: TOPIC_AUTHORIZATION_FAILED" in done, done
    status, done = post(f"{secured.url}/topics", {"name": "alices", "token": token},
                        ("alice", "alice-secret"))
    assert status == 200 and b"created" in done, done
    assert b"alices" in get(f"{secured.url}/topics", ("alice", "alice-secret"))[1]
    # a topic bob may not describe is not listed to him
    assert b"alices" not in get(f"{secured.url}/topics", ("bob", "bob-secret"))[1]


def test_a_broker_console_is_read_only_without_the_flag(tmp_path):
    from kqlite.console.app import Console
    from kqlite.console.sources import BrokerSource
    from kqlite.server import Broker
    from kqlite.server.http_listener import HttpRequest

    async def main():
        broker = Broker(tmp_path / "data", "127.0.0.1", 0)
        await broker.start()
        try:
            console = Console(BrokerSource(broker))
            page = await console.handle(HttpRequest("GET", "/topics", {}, {}, b""), 0.0)
            answer = await console.handle(HttpRequest(
                "POST", "/topics", {}, {"content-type": "application/x-www-form-urlencoded"},
                f"name=x&token={console.token}".encode()), 0.0)
            return page, answer
        finally:
            await broker.stop()
    page, answer = asyncio.run(main())
    assert b'id="create"' not in page.body and answer.status == 403


# -- the event loop never reads storage -------------------------------------------------------

def test_no_console_page_reads_storage_on_the_event_loop(tmp_path):
    from kqlite.console.app import Console
    from kqlite.console.sources import BrokerSource
    from kqlite.server import Broker
    from kqlite.server.http_listener import HttpRequest

    async def main():
        broker = Broker(tmp_path / "data", "127.0.0.1", 0)
        await broker.start()
        loop_thread = threading.get_ident()
        on_loop = []
        db = broker.db
        for name in ("leased_log", "topic_metadata", "list_topics"):
            original = getattr(db, name)

            def guarded(*args, _original=original, _name=name, **kwargs):
                if threading.get_ident() == loop_thread:
                    on_loop.append(_name)
                return _original(*args, **kwargs)
            setattr(db, name, guarded)
        try:
            await broker.io.run(lambda: db.create_topic("t", 2))
            console = Console(BrokerSource(broker))
            for path, query in [("/topics", {}), ("/topics/t", {"offsets": "1"}),
                                ("/messages", {"topic": "t"}), ("/groups", {}),
                                ("/cluster", {}), ("/api/messages", {"topic": "t"})]:
                answer = await console.handle(HttpRequest("GET", path, query, {}, b""), 0.0)
                assert answer.status == 200, (path, answer.body)
            await console.sample(1.0)
        finally:
            await broker.stop()
        assert on_loop == []
    asyncio.run(main())


def test_the_http_listener_binds_the_metrics_listen_host(tmp_path):
    from console_processes import free_port
    from kqlite.server import Broker

    async def main():
        broker = Broker(tmp_path / "data", "0.0.0.0", 0, metrics_port=free_port(),
                        metrics_host="127.0.0.1")
        await broker.start()
        try:
            return [s.getsockname()[0] for s in broker._metrics_server.sockets]
        finally:
            await broker.stop()
    assert asyncio.run(main()) == ["127.0.0.1"]
