"""The ZooKeeper fixtures of every suite that runs a cluster (tests/cluster, adopt, mirror,
spark, console): one real ZooKeeper server for the whole session (Debian's package, which
scripts/test installs), and a chroot per test so tests cannot see each other's znodes.

A pytest plugin (named in tests/conftest.py's ``pytest_plugins``), so that each suite
asks for ``zk_hosts`` without loading another suite's conftest.py: the fixtures are
lazy, and a session that runs no cluster test starts no server."""

import itertools
import os

import pytest

_chroots = itertools.count()


def _kazoo_client():
    return pytest.importorskip("kazoo.client")


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    from kqlite.cluster.zookeeper.process import ZooKeeperProcess, ZooKeeperUnavailable
    _kazoo_client()
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except ZooKeeperUnavailable as exc:
        # Not a skip: scripts/test installs ZooKeeper, so a missing server is a setup bug.
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    yield server
    server.stop()


def _fresh_chroot(zookeeper):
    chroot = f"/kqlite-test-{os.getpid()}-{next(_chroots)}"
    admin = _kazoo_client().KazooClient(hosts=zookeeper.connect_string)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    admin.stop()
    admin.close()
    return zookeeper.connect_string + chroot


@pytest.fixture
def zk_hosts(zookeeper):
    """A connect string with a fresh chroot, created beforehand."""
    return _fresh_chroot(zookeeper)


@pytest.fixture(scope="module")
def zk_module_hosts(zookeeper):
    """A connect string with a chroot of the module's own, for a cluster its tests share."""
    return _fresh_chroot(zookeeper)


@pytest.fixture
def zk_client(zk_hosts):
    """A started kazoo client factory (of the test's chroot unless ``hosts`` names
    another); every client is stopped at teardown."""
    kazoo_client = _kazoo_client()
    clients = []

    def make(**kwargs):
        kwargs.setdefault("hosts", zk_hosts)
        c = kazoo_client.KazooClient(**kwargs)
        c.start(timeout=15)
        clients.append(c)
        return c
    yield make
    for c in clients:
        try:
            c.stop()
            c.close()
        except Exception:
            pass
