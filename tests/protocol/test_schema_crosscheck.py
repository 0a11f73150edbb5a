"""kqlite's hand-written schemas against Kafka's JSON message definitions.

For every API and version kqlite serves, both directions must have the same fields in the
same order with the same types, nullability, tags and defaults, and the API must agree on
its key, name, valid and flexible versions. The JSON files come from kafka-python's copy of
Kafka's clients/src/main/resources/common/message/ (skipped when kafka-python is absent).
"""

import pytest

from kqlite.protocol import API_NAMES, SUPPORTED
from kqlite.protocol.schema import APIS, MISSING, in_range, parse_versions

from protocol_helpers import CASES, case_id, kafka_json, snake

pytest.importorskip("kafka.protocol.schemas.resources")

_ZERO = {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b""}


def _json_default(f, version, ftype):
    """The default a missing field takes, from Kafka's JSON (the contract's rule: the JSON
    default, else None when nullable, else the type's zero)."""
    nullable = in_range(version, parse_versions(f.get("nullableVersions")))
    raw = f.get("default")
    if raw is None:
        return None if nullable else _zero(ftype)
    if raw == "null":
        return None
    if not isinstance(raw, str):  # a few files write numbers unquoted
        return raw
    if ftype == "bool":
        return {"true": True, "false": False}[raw]
    if ftype in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(raw, 0)
    return raw


def _zero(ftype):
    if ftype in ("[]", "{}") or ftype.startswith("[]"):
        return ftype
    if ftype == "uuid":
        return "zero-uuid"
    return _ZERO.get(ftype, 0)


def _json_layout(fields, version, flexible):
    out = []
    for f in fields:
        if not in_range(version, parse_versions(f["versions"])):
            continue
        t = f["type"]
        if "fields" in f:
            t = "[]" if t.startswith("[]") else "{}"
        tagged = flexible and in_range(version, parse_versions(f.get("taggedVersions")))
        sub = _json_layout(f["fields"], version, flexible) if "fields" in f else None
        out.append({
            "name": snake(f["name"]), "type": t,
            "nullable": in_range(version, parse_versions(f.get("nullableVersions"))),
            "tag": f["tag"] if tagged else None,
            "default": _json_default(f, version, t),
            "fields": sub,
        })
    return out


def _our_layout(fields, version, flexible):
    out = []
    for f in fields:
        if not in_range(version, f.versions):
            continue
        nullable = in_range(version, f.nullable)
        if f.default is not MISSING:
            default = f.default
        else:
            default = None if nullable else _zero(f.type)
        out.append({
            "name": f.name, "type": f.type, "nullable": nullable,
            "tag": f.tag if flexible and in_range(version, f.tagged) else None,
            "default": default,
            "fields": _our_layout(f.fields, version, flexible) if f.fields is not None else None,
        })
    return out


def test_supported_versions_are_the_contract():
    assert SUPPORTED == {
        0: (3, 9), 1: (4, 12), 2: (1, 7), 3: (0, 12), 8: (2, 8), 9: (1, 7), 10: (0, 4),
        11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 4), 18: (0, 3),
        19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 4), 23: (2, 4), 32: (1, 4), 37: (0, 3)}


@pytest.mark.parametrize("key", sorted(APIS))
def test_api_identity(key):
    api = APIS[key]
    for kind in ("Request", "Response"):
        doc = kafka_json(api.name + kind)
        assert doc is not None, f"no Kafka JSON for {api.name}{kind}"
        assert doc["apiKey"] == key
        assert doc["name"] == api.name + kind
        assert API_NAMES[key] == api.name
        lo, hi = parse_versions(doc["validVersions"])
        assert lo <= api.versions[0] and api.versions[1] <= hi, "serves a version Kafka lacks"
        flexible = parse_versions(doc["flexibleVersions"])
        for v in range(api.versions[0], api.versions[1] + 1):
            assert api.is_flexible(v) == in_range(v, flexible), (kind, v)
        # The first flexible version matters beyond what kqlite serves: it decides the
        # request header version of requests kqlite must answer as unsupported.
        assert api.flexible == flexible


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_layout_matches_kafka_json(case):
    key, version, kind = case
    api = APIS[key]
    doc = kafka_json(api.name + kind.capitalize())
    flexible = api.is_flexible(version)
    theirs = _json_layout(doc["fields"], version, flexible)
    ours = _our_layout(getattr(api, kind), version, flexible)
    assert ours == theirs


def test_api_names_match_kafka_json():
    """Every JSON definition kafka-python ships names its key as API_NAMES does."""
    import importlib.resources
    root = importlib.resources.files("kafka.protocol.schemas.resources")
    seen = 0
    for entry in root.iterdir():
        if entry.name.endswith("Request.json"):
            doc = kafka_json(entry.name[:-5])
            assert API_NAMES[doc["apiKey"]] + "Request" == doc["name"]
            seen += 1
    assert seen >= 40
