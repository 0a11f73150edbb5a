"""``--exactly-once`` into a 3-broker kqlite cluster (transaction coordinators on the
replicated ``__transaction_state``, markers sent between brokers): a kqlite single broker's
topic mirrored, the mirror stopped and started again with more records on the source, and a
read_committed read of the target holds every source record once, in order per
partition."""

import os
import sys

import pytest

pytest.importorskip("kazoo.client")

_CLUSTER_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster")
sys.path.insert(0, _CLUSTER_TESTS)
from cluster_processes import running_cluster  # noqa: E402

from kqlite.mirror import Mirror  # noqa: E402

from mirror_helpers import kqlite_broker  # noqa: E402
from test_mirror_exactly_once import _copied_once, _produce, _settings, _topic  # noqa: E402


def test_into_a_three_broker_cluster(tmp_path, zk_hosts, run_mirror):
    source = kqlite_broker(tmp_path / "source")
    try:
        with running_cluster(tmp_path, zk_hosts) as cluster:
            a, b = source.bootstrap, cluster.bootstrap
            _topic(a, "ev")
            _produce(a, "ev", [b"v%04d" % i for i in range(300)])
            for more in (b"w", b"x"):
                mirror = Mirror(_settings(a, b, replication_factor=3))
                running = run_mirror(mirror)
                _copied_once(a, b)
                running.stop()
                assert 'outcome="committed"' in mirror.metrics.text()
                _produce(a, "ev", [more + b"%04d" % i for i in range(300)])
    finally:
        source.stop()
