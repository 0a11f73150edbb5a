"""The console in a real headless Chromium against a real broker with data: every page
opened, a message found by offset and by timestamp, a topic created and deleted, and the
lag plot updating while a consumer runs. Screenshots are saved (their directory is
printed)."""

import json
import threading
import time

import pytest

from console_processes import ConsoleBroker

kafka = pytest.importorskip("kafka")

FIRST_TIMESTAMP = 1_700_000_000_000
WAIT_MS = 60_000      # a liveness guard for the browser's waits, never a timing check


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = ConsoleBroker(tmp_path_factory.mktemp("browser-broker") / "data",
                      ["--console-allow-writes", "--console-sample-interval", "0.5"])
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap)
        for i in range(40):
            producer.send("orders", json.dumps({"order": i, "item": "pen"}).encode(),
                          key=b"order-%d" % i, headers=[("source", b"test")],
                          timestamp_ms=FIRST_TIMESTAMP + i * 1000)
        producer.flush()
        producer.close()
        yield b
    finally:
        b.stop()


@pytest.fixture
def page(browser, broker):
    context = browser.new_context(base_url=broker.url)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()


def test_every_page_opens(page, screenshots):
    for path, title, needle in [("/topics", "Topics", "#topics >> text=orders"),
                                ("/topics/orders", "Topic orders", "#partitions"),
                                ("/messages?topic=orders", "Messages",
                                 "#records >> text=order-0"),
                                ("/groups", "Consumer groups", "#groups"),
                                ("/cluster", "Cluster", "#throughput-chart svg")]:
        page.goto(path)
        assert page.inner_text("h1") == title
        page.wait_for_selector(needle)
        name = path.strip("/").replace("/", "-").split("?")[0]
        page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)


def _first_offset(page):
    return int(page.inner_text("#records tbody tr:first-child td:first-child"))


def test_a_message_found_by_offset_and_by_timestamp(page, screenshots):
    page.goto("/messages")
    page.select_option("#browse select[name=topic]", "orders")
    page.fill("#browse input[name=offset]", "17")
    page.click("#browse button")
    page.wait_for_selector("#records")
    assert _first_offset(page) == 17
    assert '"order": 17' in page.inner_text("#records tbody tr:first-child")
    page.fill("#browse input[name=offset]", "")
    page.fill("#browse input[name=timestamp]", str(FIRST_TIMESTAMP + 29_500))
    page.click("#browse button")
    page.wait_for_selector("#records")
    assert _first_offset(page) == 30
    page.screenshot(path=str(screenshots / "message-by-timestamp.png"), full_page=True)


def test_a_topic_created_and_deleted(page, screenshots):
    page.goto("/topics")
    page.fill("#create input[name=name]", "made-in-browser")
    page.fill("#create input[name=partitions]", "3")
    page.click("#create button")
    assert "created" in page.inner_text(".message")
    page.goto("/topics")
    page.click("#topics >> text=made-in-browser")
    assert page.locator("#partitions tbody tr").count() == 3
    page.screenshot(path=str(screenshots / "created-topic.png"), full_page=True)
    page.click("#delete button")
    assert "deleted" in page.inner_text(".message")
    page.goto("/topics")
    assert page.locator("#topics >> text=made-in-browser").count() == 0


def test_the_lag_plot_updates_while_a_consumer_runs(page, broker, screenshots):
    stop = threading.Event()

    def produce():
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
        i = 0
        while not stop.is_set():
            producer.send("events", b"e%d" % i)
            i += 1
            time.sleep(0.01)
        producer.close()

    def consume():
        consumer = kafka.KafkaConsumer("events", bootstrap_servers=broker.bootstrap,
                                       group_id="watchers", auto_offset_reset="earliest",
                                       enable_auto_commit=False, max_poll_records=5)
        while not stop.is_set():
            if consumer.poll(200):
                consumer.commit()
            time.sleep(0.2)          # slower than the producer: the lag grows
        consumer.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        page.goto("/groups/watchers")
        # the plot is swapped by console.js for the server's newer SVG: its points grow
        page.wait_for_function(
            "() => { const c = document.querySelector('#lag-chart');"
            " const line = c && c.querySelector('polyline');"
            " return c.hasAttribute('data-refreshed') && line &&"
            " line.getAttribute('points').split(' ').length >= 3; }")
        first = page.get_attribute("#lag-chart polyline", "points")
        page.wait_for_function(
            "(before) => document.querySelector('#lag-chart polyline')"
            ".getAttribute('points') !== before", arg=first)
        page.screenshot(path=str(screenshots / "lag-plot.png"), full_page=True)
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def test_pages_over_1000_partitions_open_no_log(browser, tmp_path, screenshots):
    """``kqlite ui``'s console (in this process, so its log manager can be watched) over
    a data dir of one 1,000-partition topic: its pages open no log. Load times are
    printed, not asserted."""
    import asyncio

    import kqlite
    from kqlite.console import serve_data_dir

    with kqlite.open(tmp_path / "wide") as db:
        db.create_topic("wide", 1000)
        with db.producer() as producer:
            for i in range(100):
                producer.send("wide", b"r%d" % i, partition=i % 10)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    service = asyncio.run_coroutine_threadsafe(
        serve_data_dir(str(tmp_path / "wide"), "127.0.0.1", 0), loop).result(60)
    db = service.console.source.db
    opened = []
    opener = db.logs._opener

    def counting(key):
        opened.append(key)
        return opener(key)
    db.logs._opener = counting
    port = service.server.sockets[0].getsockname()[1]
    page = browser.new_page()
    try:
        times = {}
        for path in ("/topics", "/groups", "/cluster", "/topics/wide",
                     "/topics/wide?first=900"):
            started = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}{path}")
            times[path] = time.perf_counter() - started
        page.screenshot(path=str(screenshots / "wide-topic.png"), full_page=True)
        # the last page: partitions 900-999, sized from their directories
        assert page.locator("#partitions tbody tr").count() == 100
        assert page.inner_text("#partitions tbody tr:first-child td:first-child") == "900"
        print("\nload times over 1,000 partitions: " + ", ".join(
            f"{path} {seconds * 1000:.0f} ms" for path, seconds in times.items()))
        assert opened == [] and len(db.logs) == 0
    finally:
        page.close()
        asyncio.run_coroutine_threadsafe(service.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
