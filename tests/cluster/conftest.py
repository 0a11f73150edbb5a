"""One real ZooKeeper server for the whole cluster test session (Debian's package, which
scripts/test installs); each test works under its own chroot so tests cannot see each
other's znodes."""

import itertools
import os

import pytest

from kqlite.cluster.zookeeper.process import ZooKeeperProcess, ZooKeeperUnavailable

kazoo_client = pytest.importorskip("kazoo.client")

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except ZooKeeperUnavailable as exc:
        # Not a skip: scripts/test installs ZooKeeper, so a missing server is a setup bug.
        pytest.fail(f"{exc} (run scripts/test, which installs it)", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def zk_hosts(zookeeper):
    """A connect string with a fresh chroot, created beforehand."""
    chroot = f"/kqlite-test-{os.getpid()}-{next(_chroots)}"
    admin = kazoo_client.KazooClient(hosts=zookeeper.connect_string)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    admin.stop()
    admin.close()
    return zookeeper.connect_string + chroot


@pytest.fixture
def zk_client(zk_hosts):
    """A started kazoo client factory; every client is stopped at teardown."""
    clients = []

    def make(**kwargs):
        c = kazoo_client.KazooClient(hosts=zk_hosts, **kwargs)
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
