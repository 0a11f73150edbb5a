"""Fixtures of the adoption tests: ZooKeeper (one server, a chroot per test:
tests/zookeeper_fixtures.py) and broker processes started with the C helpers whichever
pass runs the tests (these tests run in the pure-Python pass only: tests/conftest.py)."""

import os
import sys

import pytest

pytest.importorskip("kazoo.client")

_CLUSTER_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "cluster")
if _CLUSTER_TESTS not in sys.path:
    sys.path.append(_CLUSTER_TESTS)
