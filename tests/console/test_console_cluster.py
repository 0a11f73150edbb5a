"""The console of a 3-broker cluster in headless Chromium: one broker killed, the cluster
page of another shows the partitions it left under-replicated and their new leaders.
The page is loaded once before the kill; its script refreshes it. The time from the kill
to the page showing it is printed (a liveness bound guards the
wait; the time is reported, not asserted)."""

import time
import urllib.request

import pytest

import cluster_processes
from cluster_processes import WAIT, running_cluster, until
from console_processes import ENV

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _partitions(page):
    """{partition: (leader, isr, state)} of the topic "replicated" on the cluster page."""
    rows = page.locator("#cluster-partitions tbody tr")
    out = {}
    for i in range(rows.count()):
        cells = [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        if cells[0] == "replicated":
            out[int(cells[1])] = (int(cells[2]), cells[3], cells[5])
    return out


def test_a_killed_broker_shows_on_the_cluster_page(tmp_path, zk_hosts, browser, screenshots,
                                                   monkeypatch):
    # the brokers run with the C helpers, whichever pass runs this test
    monkeypatch.setattr(cluster_processes.ClusterBroker, "environment", lambda self: ENV)
    with running_cluster(tmp_path, zk_hosts, ["--console"], metrics=True) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(30)
        page = browser.new_page()
        page.set_default_timeout(WAIT * 1000)
        url = f"http://127.0.0.1:{cluster.metrics[1]}/cluster"

        def shown(predicate):
            parts = _partitions(page)
            return parts if len(parts) == 3 and predicate(parts) else None

        def loaded(predicate):
            page.goto(url)
            return shown(predicate)
        before = until(lambda: loaded(lambda ps: all(s == "ok" for _l, _i, s in ps.values())),
                       "the topic's three partitions fully replicated on the page")
        led_by_3 = [p for p, (leader, _isr, _s) in before.items() if leader == 3]
        # followers fetch from the leaders: Kafka's FetchFollower request metric (a
        # follower's fetch waits up to replica.fetch.wait.max.ms before it is answered)
        until(lambda: 'totaltimems_count{request="FetchFollower"}' in urllib.request.urlopen(
            url.replace("/cluster", "/metrics"), timeout=30).read().decode(),
            "a follower's fetch counted as FetchFollower by broker 1")
        page.screenshot(path=str(screenshots / "cluster-before.png"), full_page=True)
        killed = time.monotonic()
        cluster[3].kill()
        # the page is not reloaded: its script refreshes the cluster's view
        after = until(lambda: shown(lambda ps: all(
            s == "under-replicated" and leader != 3 for leader, _i, s in ps.values())),
            "every partition under-replicated, none led by the killed broker", interval=0.5)
        print(f"\nbroker 3 killed; the cluster page showed it after "
              f"{time.monotonic() - killed:.1f} s")
        page.screenshot(path=str(screenshots / "cluster-after.png"), full_page=True)
        assert all("3" not in isr.split(",") for _l, isr, _s in after.values())
        assert all(after[p][0] in (1, 2) for p in led_by_3)
        assert int(page.inner_text("#under")) == 3 and int(page.inner_text("#offline")) == 0
        page.close()
