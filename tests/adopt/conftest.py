"""Fixtures of the adoption tests: tests/cluster's ZooKeeper (one server, a chroot per
test) and broker processes started with the C helpers whichever pass runs the tests
(these tests run in the pure-Python pass only: tests/conftest.py)."""

import importlib.util
import os
import sys

import pytest

pytest.importorskip("kazoo.client")

_CLUSTER_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "cluster")
if _CLUSTER_TESTS not in sys.path:
    sys.path.append(_CLUSTER_TESTS)

# tests/cluster's ZooKeeper fixtures, loaded under a name that is not "conftest".
_spec = importlib.util.spec_from_file_location("adopt_cluster_conftest",
                                               os.path.join(_CLUSTER_TESTS, "conftest.py"))
_cluster_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cluster_conftest)
zookeeper = _cluster_conftest.zookeeper
zk_hosts = _cluster_conftest.zk_hosts
zk_client = _cluster_conftest.zk_client
