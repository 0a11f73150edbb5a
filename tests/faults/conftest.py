"""Fixtures of the fault tests: ``fault_cluster(...)`` makes a :class:`FaultCluster` with
its own ZooKeeper, started, and stops it at teardown (printing the ends of the broker
logs when the test failed, and keeping them whole in its directory, so a bug report has
them)."""

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kazoo")

from harness.cluster import FaultCluster  # noqa: E402
from kqlite.cluster.zookeeper.process import ZooKeeperUnavailable, find_zookeeper  # noqa: E402


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.faults_failed = report.failed
    return report


@pytest.fixture
def fault_cluster(tmp_path, request):
    try:
        find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    made = []

    def make(size=3, **options):
        cluster = FaultCluster(tmp_path / f"cluster-{len(made)}", size, **options)
        made.append(cluster)
        return cluster.start()
    yield make
    for cluster in made:
        if getattr(request.node, "faults_failed", True):
            print(cluster.logs())
            cluster.save_logs()
        cluster.stop()
