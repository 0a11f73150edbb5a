"""docs/compatibility.md lists exactly the APIs and versions ApiVersions advertises."""

import os
import re

import pytest

protocol = pytest.importorskip("kqlite.protocol")

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "compatibility.md")


def test_api_table_matches_what_the_broker_advertises():
    text = open(DOC, encoding="utf-8").read()
    table = text.split("## Kafka APIs served by `kqlite serve`")[1].split("###")[0]
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+)-(\d+) \|", table, re.M)
    documented = {int(k): (int(lo), int(hi)) for k, _name, lo, hi in rows}
    assert documented == protocol.SUPPORTED
    for k, name, _lo, _hi in rows:
        assert protocol.API_NAMES[int(k)] == name
