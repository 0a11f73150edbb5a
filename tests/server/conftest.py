"""A real `kqlite serve` process per test module, on a free loopback port."""

import pytest

from broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    pytest.importorskip("kqlite.protocol")
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    yield b
    b.stop()
