"""The console's rules without a browser: each bound of limits.py, the read-only default,
the form token, path and topic-name checks, value formats, the sampler's bounds, the SVG
charts, assignments, and a data dir of 1,000 partitions whose pages open only the logs
of the page they show. Each runs the pure router (Console.handle) over a real data dir;
the HTTP listener's own bounds are tested over a socket."""

import asyncio
import json
import socket
import struct
import time

import pytest

import kqlite
from kqlite.console import limits, reads
from kqlite.console.app import Console
from kqlite.console.assignment import assigned_partitions
from kqlite.console.charts import MAX_LINES, line_chart
from kqlite.console.sampler import MAX_POINTS, MAX_SERIES, WINDOW, Rates, Samples
from kqlite.console.sources import EmbeddedSource
from kqlite.console.values import show
from kqlite.server.http_listener import MAX_BODY, HttpRequest, start_http
from kqlite.server.request_latency import RequestLatency, quantile


def _request(path, query=None, method="GET", body=b"", headers=None):
    return HttpRequest(method, path, query or {}, headers or {}, body, "127.0.0.1")


@pytest.fixture
def data_dir(tmp_path):
    db = kqlite.open(tmp_path / "data")
    db.create_topic("clicks", 2)
    with db.producer() as p:
        for i in range(30):
            p.send("clicks", json.dumps({"n": i}).encode(), key=b"k%d" % i, partition=0,
                   headers=[("h", b"v%d" % i)], timestamp=1_000_000 + i * 1000)
        p.send("clicks", b"\x00\xffbinary", partition=1)
    db.offsets.commit("readers", {("clicks", 0): 10})
    db.close()
    return tmp_path / "data"


def _console(path, writes=False):
    db = kqlite.open(path, retention_check_interval_ms=0)
    return Console(EmbeddedSource(db, allow_writes=writes)), db


def _run(console, request, now=0.0):
    return asyncio.run(console.handle(request, now))


def _close(console, db):
    console.source.close()
    db.close()


# -- pages and endpoints --------------------------------------------------------------------

def test_every_page_answers_over_a_data_dir(data_dir):
    console, db = _console(data_dir)
    try:
        for path, query, needle in [
                ("/topics", {}, b"clicks"), ("/topics/clicks", {}, b"00000000000000000000.log"),
                ("/messages", {"topic": "clicks", "partition": "0"}, b"k0"),
                ("/groups", {}, b"readers"), ("/groups/readers", {}, b"lag"),
                ("/cluster", {}, b"embedded")]:
            answer = _run(console, _request(path, query))
            assert answer.status == 200, (path, answer.body)
            assert needle in answer.body, path
    finally:
        _close(console, db)


def test_messages_found_by_offset_and_by_timestamp(data_dir):
    console, db = _console(data_dir)
    try:
        by_offset = json.loads(_run(console, _request("/api/messages", {
            "topic": "clicks", "offset": "7", "count": "1"})).body)
        assert [r["offset"] for r in by_offset["records"]] == [7]
        assert by_offset["records"][0]["value"] == {"format": "json",
                                                    "text": '{\n  "n": 7\n}'}
        by_time = json.loads(_run(console, _request("/api/messages", {
            "topic": "clicks", "timestamp": str(1_000_000 + 12_500), "count": "1"})).body)
        assert [r["offset"] for r in by_time["records"]] == [13]
    finally:
        _close(console, db)


def test_search_looks_at_no_more_than_its_window(data_dir):
    console, db = _console(data_dir)
    try:
        found = json.loads(_run(console, _request("/api/messages", {
            "topic": "clicks", "search": "k25", "window": "10"})).body)
        assert found["records"] == [] and found["scanned"] == 10
        found = json.loads(_run(console, _request("/api/messages", {
            "topic": "clicks", "search": "k25", "window": "30"})).body)
        assert [r["offset"] for r in found["records"]] == [25]
    finally:
        _close(console, db)


def test_group_lag_per_partition(data_dir):
    console, db = _console(data_dir)
    try:
        group = json.loads(_run(console, _request("/api/groups/readers")).body)
        assert group["offsets"] == [{"topic": "clicks", "partition": 0, "committed": 10,
                                     "end": 30, "lag": 20}]
        asyncio.run(console.sample(1.0))
        asyncio.run(console.sample(2.0))
        group = json.loads(_run(console, _request("/api/groups/readers")).body)
        assert group["lag"] == [[1.0, 20], [2.0, 20]]
        chart = _run(console, _request("/chart/lag", {"group": "readers"}))
        assert chart.content_type == "image/svg+xml" and b"<polyline" in chart.body
    finally:
        _close(console, db)


# -- hostile input --------------------------------------------------------------------------

@pytest.mark.parametrize("path,query", [
    ("/topics/..", {}), ("/topics/.", {}), ("/topics/a%2Fb", {}),
    ("/api/topics/" + "x" * 250, {}),
    ("/messages", {"topic": "../etc"}), ("/messages", {"topic": "clicks", "partition": "-1"}),
    ("/messages", {"topic": "clicks", "offset": "1e9"}),
    ("/messages", {"topic": "clicks", "offset": "9" * 30}),
    ("/messages", {"topic": "clicks", "count": str(limits.MAX_RECORDS + 1)}),
    ("/messages", {"topic": "clicks", "count": "0"}),
    ("/messages", {"topic": "clicks", "window": str(limits.MAX_WINDOW + 1)}),
    ("/messages", {"topic": "clicks", "search": "x" * (limits.MAX_SEARCH + 1)}),
    ("/topics/clicks", {"first": "-3"}),
    ("/groups/" + "g" * 300, {}), ("/chart/lag", {"group": "\x00"}),
])
def test_a_value_out_of_bounds_is_refused_before_any_read(data_dir, path, query):
    console, db = _console(data_dir)
    try:
        answer = _run(console, _request(path, query))
        assert answer.status == 400, answer.body
    finally:
        _close(console, db)


def test_no_path_reads_outside_the_data_dir(data_dir, tmp_path):
    (tmp_path / "secret-0").mkdir()
    (tmp_path / "secret-0" / "00000000000000000000.log").write_bytes(b"TOP-SECRET")
    console, db = _console(data_dir)
    try:
        for path in ("/topics/../secret", "/topics/..%2Fsecret", "/api/topics/secret",
                     "/static/../app.py", "/static/console.js/../../app.py"):
            answer = _run(console, _request(path))
            assert answer.status in (400, 404), path
            assert b"TOP-SECRET" not in answer.body and str(tmp_path).encode() not in \
                answer.body, path
    finally:
        _close(console, db)


def test_unknown_topic_and_partition_are_404(data_dir):
    console, db = _console(data_dir)
    try:
        assert _run(console, _request("/topics/nothing")).status == 404
        assert _run(console, _request("/messages", {"topic": "clicks",
                                                    "partition": "7"})).status == 404
        assert _run(console, _request("/nowhere")).status == 404
        assert _run(console, _request("/topics", method="DELETE")).status == 405
    finally:
        _close(console, db)


def test_a_record_larger_than_the_display_bound_is_clipped(tmp_path):
    db = kqlite.open(tmp_path / "d")
    db.create_topic("big")
    with db.producer() as p:
        p.send("big", b"v" * (limits.MAX_VALUE_SHOWN * 10), partition=0)
    db.close()
    console, db = _console(tmp_path / "d")
    try:
        page = json.loads(_run(console, _request("/api/messages", {"topic": "big"})).body)
        assert len(page["records"][0]["value"]["text"]) == limits.MAX_VALUE_SHOWN
    finally:
        _close(console, db)


# -- writes ---------------------------------------------------------------------------------

def _form(console, path, **fields):
    fields.setdefault("token", console.token)
    body = "&".join(f"{k}={v}" for k, v in fields.items()).encode()
    return _run(console, _request(path, method="POST", body=body, headers={
        "content-type": "application/x-www-form-urlencoded"}))


def test_read_only_by_default_refuses_every_write(data_dir):
    console, db = _console(data_dir)
    try:
        assert _form(console, "/topics", name="new", partitions="1").status == 403
        assert _form(console, "/topics/clicks/delete").status == 403
        assert _form(console, "/messages", topic="clicks", value="x").status == 403
        assert _form(console, "/groups/readers/reset", to="earliest").status == 403
        assert b'id="create"' not in _run(console, _request("/topics")).body
        assert db.list_topics() == ["clicks"]
    finally:
        _close(console, db)


def test_writes_with_the_flag_and_the_form_token(data_dir):
    console, db = _console(data_dir, writes=True)
    try:
        assert _form(console, "/topics", name="new", partitions="2",
                     token="forged").status == 403
        assert _form(console, "/topics", name="new", partitions="2").status == 200
        assert "new" in db.list_topics()
        assert _form(console, "/topics", name="many",
                     partitions=str(limits.MAX_NEW_PARTITIONS + 1)).status == 400
        assert b"offset 0" in _form(console, "/messages", topic="new", partition="1",
                                    key="k", value="hello").body
        assert db.log("new", 1).read_one(0).value == b"hello"
        assert _form(console, "/groups/readers/reset", to="latest").status == 200
        assert db.offsets.committed("readers") == {("clicks", 0): 30}
        assert _form(console, "/topics/new/delete").status == 200
        assert "new" not in db.list_topics()
    finally:
        _close(console, db)


def test_a_test_record_is_bounded(data_dir):
    console, db = _console(data_dir, writes=True)
    try:
        answer = _form(console, "/messages", topic="clicks", value="x" * (
            limits.MAX_TEST_RECORD + 1))
        assert answer.status == 400
    finally:
        _close(console, db)


# -- the 1,000-partition data dir -----------------------------------------------------------

def test_pages_over_1000_partitions_open_only_one_page_of_logs(tmp_path):
    db = kqlite.open(tmp_path / "big")
    db.create_topic("wide", 1000)
    db.close()
    console, db = _console(tmp_path / "big")
    opened = []
    opener = db.logs._opener

    def counting(key):
        opened.append(key)
        return opener(key)
    db.logs._opener = counting
    try:
        started = time.perf_counter()
        for path, query in [("/topics", {}), ("/topics/wide", {}),
                            ("/topics/wide", {"first": "900"}), ("/groups", {}),
                            ("/cluster", {})]:
            assert _run(console, _request(path, query)).status == 200
        print(f"\nfive pages over 1,000 partitions: {time.perf_counter() - started:.3f} s")
        assert opened == []
        assert _run(console, _request("/topics/wide", {"first": "100",
                                                       "offsets": "1"})).status == 200
        assert sorted(p for _t, p in opened) == list(range(100, 100 + limits.PARTITIONS_PER_PAGE))
    finally:
        _close(console, db)


# -- the pieces -----------------------------------------------------------------------------

def test_values_shown_as_text_json_or_hex():
    assert show(None) == ("null", "null")
    assert show(b'{"a":1}') == ("json", '{\n  "a": 1\n}')
    assert show(b"plain") == ("text", "plain")
    assert show(b"\x00\x01") == ("hex", "00 01")
    assert show(b"plain", "hex") == ("hex", "70 6c 61 69 6e")
    assert show(b"not json", "json") == ("hex", "6e 6f 74 20 6a 73 6f 6e")
    assert show(b'{"a":1}', "text") == ("text", '{"a":1}')


def test_a_series_keeps_one_hour_and_a_bounded_number_of_points():
    samples = Samples()
    for t in range(0, 7200, 1):
        samples.add("s", float(t), 1.0)
    points = samples.get("s")
    assert len(points) <= MAX_POINTS and points[0][0] >= 7199 - WINDOW
    for i in range(MAX_SERIES + 10):
        samples.add(f"n{i}", 0.0, 1.0)
    assert len(samples.names()) == MAX_SERIES and "s" not in samples.names()


def test_rates_between_two_feeds():
    rates = Rates()
    assert rates.feed(10.0, {"records in": 100}) == {}
    assert rates.feed(12.0, {"records in": 300}) == {"records in": 100.0}
    assert rates.feed(12.0, {"records in": 400}) == {}


def test_chart_escapes_names_and_bounds_its_lines():
    svg = line_chart("t", {f"<s{i}>": [(0.0, 1.0), (1.0, 2.0)] for i in range(20)})
    assert svg.count("<polyline") == MAX_LINES and "<s0>" not in svg and "&lt;s0&gt;" in svg
    assert "no samples yet" in line_chart("t", {})


def test_assignment_bytes():
    data = struct.pack(">hih", 0, 1, 6) + b"clicks" + struct.pack(">iii", 2, 0, 3) + \
        struct.pack(">i", -1)
    assert assigned_partitions(data) == [("clicks", 0), ("clicks", 3)]
    assert assigned_partitions(data[:9]) == []
    assert assigned_partitions(struct.pack(">hi", 0, 1 << 30)) == []
    assert assigned_partitions(None) == []


def test_latency_quantiles_from_the_histogram():
    latency = RequestLatency()
    for ms in [1] * 98 + [400, 400]:
        latency.observe(["Produce"], ms / 1000)
    count, p50, p99 = latency.quantiles()["Produce"]
    assert count == 100 and 0.5 <= p50 <= 1.0 and 250 <= p99 <= 500
    assert "kafka_network_requestmetrics_totaltimems_bucket" in latency.exposition()
    assert quantile(0.5, [1.0], [0, 0]) == 0.0


def test_a_fetch_counts_as_kafka_counts_it():
    from kqlite.server.request_latency import request_names
    assert request_names("Produce", 9, {}) == ("Produce",)
    assert request_names("Fetch", 12, {"replica_id": -1}) == ("FetchConsumer", "Fetch")
    assert request_names("Fetch", 12, {"replica_id": 2}) == ("FetchFollower", "Fetch")
    assert request_names("Fetch", 15, {"replica_state": {"replica_id": 2}}) == \
        ("FetchFollower", "Fetch")
    assert request_names("Fetch", 16, {}) == ("FetchConsumer", "Fetch")


# -- the HTTP listener's bounds -------------------------------------------------------------

def _whole(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _exchange(port, data):
    """The status line of the answer to ``data``."""
    return _whole(port, data).split(b"\r\n", 1)[0]


def test_the_listener_refuses_oversized_requests():
    async def main():
        seen = []

        async def app(request):
            seen.append(request)
            from kqlite.server.http_listener import HttpResponse
            return HttpResponse.text(200, "ok")
        server = await start_http("127.0.0.1", 0, lambda request: app)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        try:
            cases = [
                (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", b"414"),
                (b"GET / HTTP/1.1\r\nX: " + b"b" * 9000 + b"\r\n\r\n", b"431"),
                (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n", b"431"),
                (b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1), b"413"),
                (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"411"),
                (b"NONSENSE\r\n\r\n", b"400"),
                (b"GET /ok HTTP/1.1\r\n\r\n", b"200")]
            head = await loop.run_in_executor(None, _whole, port,
                                              b"HEAD /ok HTTP/1.1\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n") and \
                b"Content-Length: 2" in head
            for data, status in cases:
                first = await loop.run_in_executor(None, _exchange, port, data)
                assert status in first, (data[:40], first)
        finally:
            server.close()
            await server.wait_closed()
        assert [r.path for r in seen] == ["/ok", "/ok"]
    asyncio.run(main())


def test_hostile_forms_and_numbers(data_dir):
    console, db = _console(data_dir, writes=True)
    try:
        headers = {"content-type": "application/x-www-form-urlencoded"}
        many = "&".join(f"f{i}=x" for i in range(100)).encode()
        for body, status in [(b"\xff\xfe", 400), (many, 400), (b"token=%C3%A9", 403),
                             (b"name=x", 403)]:
            answer = _run(console, _request("/topics", method="POST", body=body,
                                            headers=headers))
            assert answer.status == status, body
        for value in ("²", "١٢", " 1", "+1", "0x1"):
            answer = _run(console, _request("/messages", {"topic": "clicks",
                                                          "offset": value}))
            assert answer.status == 400, value
    finally:
        _close(console, db)


def test_the_listener_refuses_a_query_of_too_many_fields():
    async def main():
        from kqlite.server.http_listener import HttpResponse

        async def app(request):
            return HttpResponse.text(200, "ok")
        server = await start_http("127.0.0.1", 0, lambda request: app)
        port = server.sockets[0].getsockname()[1]
        query = "&".join(f"a{i}=1" for i in range(100)).encode()
        try:
            first = await asyncio.get_running_loop().run_in_executor(
                None, _exchange, port, b"GET /?" + query + b" HTTP/1.1\r\n\r\n")
        finally:
            server.close()
            await server.wait_closed()
        assert b"400" in first
    asyncio.run(main())


# -- who may use a broker's console (auth.py's table) -------------------------------------------

class _Listener:
    def __init__(self, protocol, mechanisms=None):
        from kqlite.protocol.security import SecurityProtocol
        self.protocol = SecurityProtocol[protocol]
        self.sasl = None if mechanisms is None else type("Sasl", (), {
            "mechanisms": mechanisms})()


class _Broker:
    def __init__(self, *listeners):
        self.listeners = list(listeners)


def test_the_login_a_broker_needs():
    from kqlite.console.auth import BrokerLogin
    open_ = BrokerLogin(_Broker(_Listener("PLAINTEXT")))
    assert not open_.required and not open_.refused
    assert asyncio.run(open_.check("anyone", "anything"))
    sasl = BrokerLogin(_Broker(_Listener("PLAINTEXT"),
                               _Listener("SASL_SSL", ["SCRAM-SHA-256"]),
                               _Listener("SASL_PLAINTEXT", ["SCRAM-SHA-512", "PLAIN"])))
    assert sasl.required and not sasl.refused
    assert sasl.sasl_listener.protocol.name == "SASL_PLAINTEXT" and sasl.mechanism == "PLAIN"
    certificates = BrokerLogin(_Broker(_Listener("SSL")))
    assert certificates.required and certificates.refused
    assert not asyncio.run(certificates.check("alice", "alice-secret"))


def test_a_login_is_remembered_for_a_while():
    from kqlite.console.auth import REMEMBER, BrokerLogin
    now = [0.0]
    login = BrokerLogin(_Broker(_Listener("SASL_PLAINTEXT", ["PLAIN"])), clock=lambda: now[0])
    handshakes = []

    class _Connection:
        async def close(self):
            pass

    async def handshake(name, password):
        handshakes.append(name)
        if password != "right":
            raise PermissionError("refused")
        return _Connection()
    login._open = handshake
    assert asyncio.run(login.check("alice", "right"))
    assert asyncio.run(login.check("alice", "right"))
    assert not asyncio.run(login.check("alice", "wrong"))
    now[0] = REMEMBER + 1
    assert asyncio.run(login.check("alice", "right"))
    assert handshakes == ["alice", "alice", "alice"]


def test_a_broker_with_certificates_only_refuses_the_console(tmp_path):
    from kqlite.console.auth import BrokerLogin
    from kqlite.console.sources import BrokerSource

    class _Fake(_Broker):
        db = None
    source = BrokerSource(_Fake(_Listener("SSL")), login=BrokerLogin(_Fake(_Listener("SSL"))))
    answer = asyncio.run(Console(source).handle(_request("/topics"), 0.0))
    assert answer.status == 403 and b"TLS" in answer.body


def test_embedded_group_members_and_reset_of_an_empty_group_only(data_dir):
    console, db = _console(data_dir, writes=True)
    member = kqlite.open(data_dir)
    consumer = member.consumer("clicks", group="readers", enable_auto_commit=False,
                               client_id="reader-1")
    try:
        while not consumer.poll(timeout_ms=100):
            pass
        group = json.loads(_run(console, _request("/api/groups/readers")).body)
        assert group["state"] == "STABLE"
        assert [(m["client"], sorted(map(tuple, m["assignment"]))) for m in group["members"]] \
            == [("reader-1", [("clicks", 0), ("clicks", 1)])]
        assert b"refused" in _form(console, "/groups/readers/reset", to="earliest").body
        assert db.offsets.committed("readers") == {("clicks", 0): 10}
    finally:
        consumer.close()
        member.close()
    group = json.loads(_run(console, _request("/api/groups/readers")).body)
    assert group["state"] == "EMPTY" and group["members"] == []
    assert b"committed" in _form(console, "/groups/readers/reset", to="earliest").body
    assert db.offsets.committed("readers") == {("clicks", 0): 0}
    _close(console, db)


def test_partition_health_as_kafka_counts_it():
    from kqlite.console.pages import partition_state
    assert partition_state(-1, (), (1, 2), {1, 2}) == "offline"
    assert partition_state(3, (3,), (1, 3), {1, 2}) == "offline"       # leader not alive
    assert partition_state(1, (1,), (1, 2), {1, 2}) == "under-replicated"
    assert partition_state(1, (1, 2), (1, 2), {1, 2}) == "ok"


def test_the_cluster_page_lists_problems_first_and_a_bounded_number():
    from kqlite.console.pages import cluster_view
    from kqlite.console.sources import ClusterView
    parts = [("t", p, 1, (1, 2), (1, 2), ()) for p in range(limits.MAX_CLUSTER_ROWS + 50)]
    parts.append(("t", 99999, 1, (1,), (1, 2), ()))
    html = cluster_view(ClusterView(1, 1, [(1, "h", 1, None), (2, "h", 2, None)], parts),
                        "cluster")
    assert html.count("<tr><td>t</td>") == limits.MAX_CLUSTER_ROWS
    assert html.index("<td>t</td><td>99999</td>") < html.index("<td>t</td><td>0</td>")
    assert f"{limits.MAX_CLUSTER_ROWS} of {len(parts)} partitions" in html
    assert '<b id="under">1</b>' in html


def test_the_topic_list_sizes_a_bounded_number_of_partitions(tmp_path, monkeypatch):
    db = kqlite.open(tmp_path / "d")
    db.create_topic("a", 3)
    db.create_topic("b", 3)
    monkeypatch.setattr(limits, "MAX_PARTITIONS_SIZED", 4)
    try:
        assert [(r.name, r.size is None) for r in reads.list_topics(db, internal=False)] == \
            [("a", False), ("b", True)]
    finally:
        db.close()


def test_the_listener_holds_a_bounded_number_of_connections():
    from kqlite.server.http_listener import MAX_CONNECTIONS

    async def main():
        server = await start_http("127.0.0.1", 0, lambda request: None)
        port = server.sockets[0].getsockname()[1]
        idle = [await asyncio.open_connection("127.0.0.1", port)
                for _ in range(MAX_CONNECTIONS)]
        try:
            # once the listener has taken every idle one (it waits for their requests),
            # the next is refused at once; until then one more may be taken, so ask again
            for _ in range(100):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                try:
                    answer = await asyncio.wait_for(reader.read(), 0.2)
                except asyncio.TimeoutError:
                    answer = b""
                writer.close()
                if answer:
                    break
        finally:
            for _reader, w in idle:
                w.close()
            server.close()
            await server.wait_closed()
        return answer
    assert asyncio.run(main()).startswith(b"HTTP/1.1 503")


def test_a_console_without_login_answers_only_its_own_addresses(data_dir):
    import socket as sockets
    from kqlite.console.app import trusted_host
    for host in (None, "127.0.0.1:8090", "[::1]:8090", "localhost:8090", "10.0.0.7",
                 f"{sockets.gethostname()}:8090"):
        assert trusted_host(host), host
    for host in ("evil.example:8090", "attacker.test", "127.0.0.1.nip.io:8090"):
        assert not trusted_host(host), host
    console, db = _console(data_dir)
    try:
        assert _run(console, _request("/topics", headers={
            "host": "evil.example:8090"})).status == 403
        assert _run(console, _request("/topics", headers={
            "host": "127.0.0.1:8090"})).status == 200
    finally:
        _close(console, db)
