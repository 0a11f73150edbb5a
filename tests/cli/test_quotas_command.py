"""``kqlite quotas alter | describe`` as an operator runs it: on a data dir (the file a
single broker follows), through a broker's client quota APIs, and its refusals. The
ZooKeeper side: tests/cluster/test_zk_acls.py."""

import json
import os
import sys

import pytest

from kqlite.cli.main import main
from kqlite.server.quotas.entities import DEFAULT, QuotaEntity
from kqlite.server.quotas.store import quota_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_thread import BrokerThread  # noqa: E402


def quotas(capsys, *argv):
    code = main(["quotas", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def described(capsys, *argv):
    code, out, _err = quotas(capsys, "describe", *argv, "--json")
    assert code == 0
    return {(e["user"], e["user_default"], e["client_id"], e["client_id_default"]):
            e["quotas"] for e in json.loads(out)}


def test_alter_and_describe_in_a_data_dir(tmp_path, capsys):
    d = tmp_path / "data"
    d.mkdir()
    code, out, _err = quotas(capsys, "alter", "--data-dir", d, "--user", "alice",
                             "--add", "producer_byte_rate=1048576",
                             "--add", "request_percentage=50")
    assert code == 0 and "producer_byte_rate=1.04858e+06" in out
    assert quotas(capsys, "alter", "--data-dir", d, "--user-default", "--client-id", "app",
                  "--add", "consumer_byte_rate=2048")[0] == 0
    assert described(capsys, "--data-dir", d) == {
        ("alice", False, None, False): {"producer_byte_rate": 1048576.0,
                                        "request_percentage": 50.0},
        (None, True, "app", False): {"consumer_byte_rate": 2048.0}}
    assert set(described(capsys, "--data-dir", d, "--user", "alice", "--strict")) == \
        {("alice", False, None, False)}
    assert quotas(capsys, "alter", "--data-dir", d, "--user", "alice",
                  "--delete", "request_percentage")[0] == 0
    _stamp, stored = quota_file(str(d)).read()
    assert stored == {QuotaEntity("alice", None): {"producer_byte_rate": 1048576.0},
                      QuotaEntity(DEFAULT, "app"): {"consumer_byte_rate": 2048.0}}


@pytest.mark.parametrize("argv, text", [
    (["alter", "--data-dir", "{d}", "--add", "producer_byte_rate=1"], "name the entity"),
    (["alter", "--data-dir", "{d}", "--user", "u"], "--add or --delete"),
    (["alter", "--data-dir", "{d}", "--user", "u", "--add", "nonsense=1"],
     "Invalid configuration key nonsense"),
    (["alter", "--data-dir", "{d}", "--user", "u", "--add", "producer_byte_rate=1.5"],
     "must be a LONG value"),
    (["alter", "--data-dir", "{d}", "--user", "u", "--add", "producer_byte_rate"],
     "KEY=VALUE"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, text):
    d = tmp_path / "data"
    d.mkdir()
    code, _out, err = quotas(capsys, *[a.format(d=d) for a in argv])
    assert code == 2 and text in err


def test_through_a_brokers_quota_apis(tmp_path, capsys):
    with BrokerThread(tmp_path / "data") as broker:
        server = f"127.0.0.1:{broker.port}"
        assert quotas(capsys, "alter", "--bootstrap-server", server, "--client-id-default",
                      "--add", "producer_byte_rate=4096")[0] == 0
        assert described(capsys, "--bootstrap-server", server) == {
            (None, False, None, True): {"producer_byte_rate": 4096.0}}
        assert broker.broker.quotas.configs.get(QuotaEntity(None, DEFAULT)) == \
            {"producer_byte_rate": 4096.0}
        code, _out, err = quotas(capsys, "alter", "--bootstrap-server", server, "--user", "",
                                 "--add", "producer_byte_rate=1")
        assert code == 1 and "INVALID_REQUEST" in err
