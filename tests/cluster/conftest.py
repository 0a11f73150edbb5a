"""The cluster tests need kazoo; their ZooKeeper server and chroots (``zookeeper``,
``zk_hosts``, ``zk_client``) are tests/zookeeper_fixtures.py's, shared with the other
suites that run a cluster."""

import pytest

pytest.importorskip("kazoo.client")
