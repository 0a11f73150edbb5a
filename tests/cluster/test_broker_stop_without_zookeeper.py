"""A cluster broker told to stop (SIGTERM) after its ZooKeeper went away exits, and
cleanly: kazoo holds every call made while the connection is down until it comes back,
so the shutdown closes the session first when ZooKeeper is out of reach
(kqlite/cluster/node.py ``stop``), and the calls waiting in the ZooKeeper threads fail
instead of holding the process for ever.

The broker tries its controlled shutdown first, as Kafka's does: three attempts, each
waiting up to 30 s for the controller's answer (its own controller, whose ZooKeeper
writes cannot go through), so the test takes about a minute and a half and runs with
``--soak``.
"""

import pytest

from cluster_processes import ClusterBroker, until

from kqlite.cluster.zookeeper.process import ZooKeeperProcess, ZooKeeperUnavailable

pytestmark = pytest.mark.soak


def test_sigterm_with_zookeeper_gone_stops_the_broker_cleanly(tmp_path):
    zookeeper = ZooKeeperProcess(tmp_path / "zookeeper")
    try:
        zookeeper.start()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    broker = ClusterBroker(1, tmp_path / "broker", zookeeper.connect_string,
                           extra=["--zookeeper-session-timeout-ms", "6000"])
    try:
        broker.start().wait_listening()
        until(lambda: "is the controller" in broker.log(), "broker 1 elected controller")
        zookeeper.stop()
        until(lambda: "connection lost" in broker.log().lower(),
              "broker 1 saw its ZooKeeper connection lost")
        code = broker.stop(timeout=240)
        assert code == 0, broker.log()[-5000:]
        log = broker.log()
        assert "closing its session before stopping" in log
        assert "stopped cleanly" in log
    finally:
        broker.kill()
        zookeeper.stop()
