"""The console of a 3-broker cluster in headless Chromium: one broker killed, the cluster
page of another shows the partitions it left under-replicated and their new leaders.
The page is loaded once before the kill; its script refreshes it. The time from the kill
to the page showing it is printed (a liveness bound guards the
wait; the time is reported, not asserted).

Before the kill, every broker's console shows the whole cluster (cluster_reads.py): a
topic of one replica per partition (each partition on one broker) shows every
partition's offsets on every console, a partition led elsewhere is browsed from its
leader, and a group's lag shows on the consoles of the brokers that do not coordinate
it. After the kill, the partition the killed broker held is an error cell on the topic's
page, not a failed page. (One cluster for all of it: starting one costs seconds.)"""

import json
import time
import urllib.request

import pytest

import cluster_processes
from cluster_processes import WAIT, running_cluster, until
from console_processes import ENV, form_token, get, post

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _json(cluster, broker, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics[broker]}{path}",
                                timeout=30) as answer:
        return json.loads(answer.read())


def _spread(cluster):
    """The topic "spread": partition p on one broker, with p + 2 records; the group
    "viewers" committed offset 1 of each. Returns {partition: leader}."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("spread", 3, 1)])["spread"].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for p in range(3):
        for i in range(p + 2):
            producer.produce("spread", value=f"v{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "viewers"})
    consumer.commit(offsets=[TopicPartition("spread", p, 1) for p in range(3)],
                    asynchronous=False)
    consumer.close()
    md = admin.list_topics("spread", timeout=10)
    leaders = {p: info.leader for p, info in md.topics["spread"].partitions.items()}
    assert sorted(leaders.values()) == [1, 2, 3]    # one partition on each broker
    return leaders


def _offsets_on_every_console(cluster):
    for broker in (1, 2, 3):
        def shown(broker=broker):
            page = _json(cluster, broker, "/api/topics/spread")
            return page if [(r["start"], r["high_watermark"]) for r in page["partitions"]
                            ] == [(0, 2), (0, 3), (0, 4)] else None
        page = until(shown, f"every partition's offsets on broker {broker}'s console")
        # segment files only of the partition this broker hosts; the others' sizes are
        # their leaders' (DescribeLogDirs)
        hosted = [r["partition"] for r in page["partitions"] if r["segment_files"]]
        assert len(hosted) == 1
        assert all(isinstance(r["size"], int) and r["size"] > 0 for r in page["partitions"])
        assert "spread" in [t["name"] for t in _json(cluster, broker, "/api/topics")]


def _messages_from_leaders(cluster, leaders):
    for p, leader in leaders.items():
        if leader == 1:
            continue
        page = _json(cluster, 1, f"/api/messages?topic=spread&partition={p}&offset=1")
        assert [r["value"]["text"] for r in page["records"]] == [
            f"v{p}-{i}" for i in range(1, p + 2)]
        assert (page["start"], page["log_end"]) == (1, p + 2)


def _reset_from_another_broker(cluster):
    """The empty group "viewers" reset to the earliest offsets from the console of a broker
    that does not coordinate it."""
    md = AdminClient({"bootstrap.servers": cluster.bootstrap})
    coordinator = md.describe_consumer_groups(["viewers"])["viewers"].result(30).coordinator.id
    broker = next(b for b in (1, 2, 3) if b != coordinator)
    url = f"http://127.0.0.1:{cluster.metrics[broker]}"
    status, page = get(f"{url}/groups/viewers")
    status, done = post(f"{url}/groups/viewers/reset", {"to": "earliest",
                                                         "token": form_token(page)})
    assert status == 200 and b"committed" in done, done
    group = _json(cluster, coordinator, "/api/groups/viewers")
    assert [(o["partition"], o["committed"]) for o in group["offsets"]] == [
        (0, 0), (1, 0), (2, 0)]


def _lag_on_every_console(cluster):
    for broker in (1, 2, 3):
        (listed,) = [g for g in _json(cluster, broker, "/api/groups")
                     if g["group"] == "viewers"]
        assert listed["state"]          # its coordinator's, wherever that is
        group = _json(cluster, broker, "/api/groups/viewers")
        assert [(o["partition"], o["committed"], o["lag"]) for o in group["offsets"]] == [
            (0, 1, 1), (1, 1, 2), (2, 1, 3)]
    # every broker's sampler asks the group's coordinator: its lag is plotted everywhere
    for broker in (1, 2, 3):
        until(lambda broker=broker: [v for _t, v in _json(
            cluster, broker, "/api/groups/viewers")["lag"]][-1:] == [6],
            f"the lag of viewers sampled by broker {broker}")


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
    with running_cluster(tmp_path, zk_hosts, ["--console", "--console-sample-interval", "1",
                                              "--console-allow-writes"],
                         metrics=True) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(30)
        leaders = _spread(cluster)
        _offsets_on_every_console(cluster)
        _messages_from_leaders(cluster, leaders)
        _lag_on_every_console(cluster)
        _reset_from_another_broker(cluster)
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
        # "spread" has one replica: its partition on broker 3 is offline, not
        # under-replicated; the group's commit made __consumer_offsets (three replicas)
        offsets_topic = [row for row in _json(cluster, 1, "/api/cluster")["cluster"][
            "partitions"] if row[0] == "__consumer_offsets"]
        assert int(page.inner_text("#under")) == 3 + len(offsets_topic)
        assert int(page.inner_text("#offline")) == 1
        # the partition broker 3 held: an error cell on broker 1's topic page
        (gone,) = [p for p, leader in leaders.items() if leader == 3]
        rows = _json(cluster, 1, "/api/topics/spread")["partitions"]
        assert str(rows[gone]["high_watermark"]).startswith("error: ")
        assert all(r["high_watermark"] == p + 2 for p, r in enumerate(rows) if p != gone)
        page.goto("http://127.0.0.1:%d/topics/spread" % cluster.metrics[1])
        assert "error: " in page.inner_text("#partitions")
        page.screenshot(path=str(screenshots / "cluster-topic-error-cell.png"), full_page=True)
        page.close()
