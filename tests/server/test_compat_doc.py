"""docs/compatibility.md says what the code does: the APIs and versions ApiVersions
advertises, the requests kqlite decodes only to refuse, the inter-broker APIs only a cluster
broker advertises, the versions cluster brokers send one another, the tests it names, and
the kafkajs version the Node.js tests pin."""

import ast
import json
import os
import re

import pytest

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol.schema import APIS, CLUSTER_ONLY  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DOC = os.path.join(ROOT, "docs", "compatibility.md")


def _doc():
    return open(DOC, encoding="utf-8").read()


def _section(text, heading):
    return text.split(heading)[1].split("\n#")[0]


def _api_table(heading):
    """{key: (lo, hi)} of the ``| key | API | lo-hi |`` rows under ``heading``; checks
    that each key has one row, in key order, under Kafka's name for it."""
    table = _section(_doc(), heading)
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+)-(\d+) \|", table, re.M)
    keys = [int(k) for k, _name, _lo, _hi in rows]
    assert len(keys) == len(set(keys)), "an API has two rows"
    assert keys == sorted(keys), "rows out of API key order"
    for k, name, _lo, _hi in rows:
        assert protocol.API_NAMES[int(k)] == name
    return {int(k): (int(lo), int(hi)) for k, _name, lo, hi in rows}


def test_api_table_matches_what_the_broker_advertises():
    assert _api_table("## Kafka APIs served by `kqlite serve`") == protocol.SUPPORTED


def test_inter_broker_table_matches_what_a_cluster_broker_adds():
    documented = _api_table("### Inter-broker APIs (cluster mode only)")
    assert documented == {k: protocol.CLUSTER_SUPPORTED[k] for k in CLUSTER_ONLY}
    assert not set(documented) & set(protocol.SUPPORTED)


def test_sent_table_matches_the_versions_the_cluster_sends():
    """The "Requests a cluster broker sends" rows are the ranges the cluster code asks its
    peers for, each within what a cluster broker serves, under Kafka's names."""
    from kqlite.cluster import in_process, node
    from kqlite.cluster.controller import requests
    from kqlite.cluster.coordinators import relocation, txn_markers, txn_verification
    from kqlite.cluster.fetcher import task
    from kqlite.cluster.network import sasl
    from kqlite.protocol import ApiKey
    table = _section(_doc(), "### Requests a cluster broker sends")
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+)-(\d+) \|", table, re.M)
    sent = {}
    for k, name, lo, hi in rows:
        assert protocol.API_NAMES[int(k)] == name
        assert int(k) not in sent, f"{name} has two rows"
        sent[int(k)] = (int(lo), int(hi))
    assert [k for k, *_ in rows] == sorted((k for k, *_ in rows), key=int)
    controller_sends = {key: (v, v) for key, v in (
        (ApiKey.LEADER_AND_ISR, requests.LEADER_AND_ISR_VERSION),
        (ApiKey.STOP_REPLICA, requests.STOP_REPLICA_VERSION),
        (ApiKey.UPDATE_METADATA, requests.UPDATE_METADATA_VERSION))}
    assert {k: sent[k] for k in controller_sends} == controller_sends
    assert sent[ApiKey.PRODUCE] == in_process._PRODUCE_VERSIONS == relocation._PRODUCE_VERSIONS
    assert sent[ApiKey.FETCH] == task.FOLLOWER_FETCH_VERSIONS
    assert sent[ApiKey.LIST_OFFSETS] == task._LIST_OFFSETS_VERSIONS
    assert sent[ApiKey.CONTROLLED_SHUTDOWN] == node._CONTROLLED_SHUTDOWN_VERSIONS
    assert sent[ApiKey.SASL_HANDSHAKE] == (sasl.HANDSHAKE_VERSION, sasl.HANDSHAKE_VERSION)
    assert sent[ApiKey.SASL_AUTHENTICATE] == sasl.AUTHENTICATE_VERSIONS
    assert sent[ApiKey.ADD_PARTITIONS_TO_TXN] == txn_verification._VERSIONS
    assert sent[ApiKey.WRITE_TXN_MARKERS] == txn_markers._VERSIONS
    assert set(sent) == {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, *controller_sends,
                         ApiKey.CONTROLLED_SHUTDOWN, ApiKey.SASL_HANDSHAKE,
                         ApiKey.SASL_AUTHENTICATE, ApiKey.ALTER_PARTITION,
                         ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.WRITE_TXN_MARKERS}
    for key, (lo, hi) in sent.items():
        served_lo, served_hi = protocol.CLUSTER_SUPPORTED[key]
        assert served_lo <= lo <= hi <= served_hi, f"{protocol.API_NAMES[key]} v{lo}-{hi}"


def test_refused_table_matches_the_decoded_apis():
    """Each row names APIs kqlite decodes but never advertises, in the versions it decodes."""
    table = _section(_doc(), "### Requests kqlite refuses")
    listed = {}
    for names, keys, lo, hi in re.findall(
            r"((?:\w+)(?: / \w+)*) \((\d+(?:/\d+)*)\) v(\d+)-(\d+)", table):
        for name, key in zip(names.split(" / "), keys.split("/"), strict=True):
            listed[int(key)] = (name, (int(lo), int(hi)))
    decoded_only = {k: (api.name, api.versions) for k, api in APIS.items()
                    if k not in protocol.SUPPORTED and k not in CLUSTER_ONLY}
    assert listed == decoded_only


def _named_tests(text):
    return sorted(set(re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", text)))


def test_every_named_test_exists():
    """A row proven by a test names a file (and function) that is there."""
    for path, function in _named_tests(_doc()):
        full = os.path.join(ROOT, path)
        assert os.path.isfile(full), f"docs/compatibility.md names {path}, which does not exist"
        if function:
            tree = ast.parse(open(full, encoding="utf-8").read())
            defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert function in defined, f"{path} has no {function}"


def test_kafkajs_row_names_the_pinned_version():
    table = _section(_doc(), "## Kafka clients tested against `kqlite serve`")
    (row,) = [line for line in table.splitlines() if line.startswith("| kafkajs")]
    documented = row.split("|")[2].strip()
    node = os.path.join(ROOT, "tests", "server", "node")
    pinned = json.load(open(os.path.join(node, "package.json")))["dependencies"]["kafkajs"]
    lock = json.load(open(os.path.join(node, "package-lock.json")))
    assert lock["packages"]["node_modules/kafkajs"]["version"] == pinned
    assert documented == pinned


def test_every_api_row_names_the_tests_that_prove_it():
    text = _doc()
    rows = re.findall(r"^\| (\d+) \| (\w+) \| \d+-\d+ \|(.*)$", text, re.M)
    assert rows
    unproven = [f"{k} {name}" for k, name, rest in rows if "tests/" not in rest]
    assert unproven == [], "rows naming no test"
