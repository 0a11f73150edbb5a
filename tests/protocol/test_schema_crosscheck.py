"""kqlite's hand-written schemas against a second, newer copy of Kafka's message JSON.

The served ranges are Kafka 3.9's, checked against kio 0.5.0 (generated from 3.9's JSON) by
test_schema_kafka39.py. This file is an independent second oracle: kafka-python's copy of
Kafka's clients/src/main/resources/common/message/ (Kafka 4.x). For every served version
that copy still defines, both directions must have the same fields in the same order with
the same types, nullability, tags and defaults, and every API must agree on its key, name
and flexible versions. Versions Kafka 4 dropped (KIP-896) are skipped here, not unchecked:
the 3.9 oracle covers them. Skipped when kafka-python is absent.
"""

import pytest

from kqlite.protocol import API_NAMES
from kqlite.protocol.schema import APIS, CLUSTER_ONLY, MISSING, in_range, parse_versions

from protocol_helpers import CASES, case_id, kafka_json, snake

pytest.importorskip("kafka.protocol.schemas.resources")

UNSTATED = "(no default in the JSON)"
# kafka-python ships Kafka 4's JSON, which has no ZooKeeper inter-broker APIs (LeaderAndIsr,
# StopReplica, UpdateMetadata and ControlledShutdown were removed in 4.0; AlterPartition is
# not in its copy) and none of the versions KIP-896 removed; test_schema_kafka39.py checks
# those against Kafka 3.9.
_ZERO = {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b""}


def _json_default(f, version, ftype):
    """The default Kafka's JSON states for a field ("null" meaning null), or UNSTATED.
    Where the JSON states none, the DSL's convention (the type's zero, None when nullable)
    is not compared: the codec only uses it for a field a handler leaves out."""
    raw = f.get("default")
    if raw is None:
        return UNSTATED
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


def _with_common_structs(fields, common):
    """``fields`` with each field typed by one of the message's ``commonStructs`` given that
    struct's fields, as Kafka's generator resolves them."""
    out = []
    for f in fields:
        base = f["type"][2:] if f["type"].startswith("[]") else f["type"]
        if "fields" in f:
            f = {**f, "fields": _with_common_structs(f["fields"], common)}
        elif base in common:
            f = {**f, "fields": _with_common_structs(common[base], common)}
        out.append(f)
    return out


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


def _in_kafka4(key, version, kind):
    """Whether kafka-python's Kafka 4 JSON still defines this API version."""
    doc = kafka_json(APIS[key].name + kind.capitalize())
    return doc is not None and in_range(version, parse_versions(doc["validVersions"]))


# Only what both define is compared here; the rest is compared with Kafka 3.9 (kio).
KAFKA4_CASES = [case for case in CASES if _in_kafka4(*case)]


@pytest.mark.parametrize("key", sorted(set(APIS) - CLUSTER_ONLY))
def test_api_identity(key):
    api = APIS[key]
    for kind in ("Request", "Response"):
        doc = kafka_json(api.name + kind)
        assert doc is not None, f"no Kafka JSON for {api.name}{kind}"
        assert doc["apiKey"] == key
        assert doc["name"] == api.name + kind
        assert API_NAMES[key] == api.name
        valid = parse_versions(doc["validVersions"])
        flexible = parse_versions(doc["flexibleVersions"])
        for v in range(api.versions[0], api.versions[1] + 1):
            if in_range(v, valid):
                assert api.is_flexible(v) == in_range(v, flexible), (kind, v)
        # The first flexible version matters beyond what kqlite serves: it decides the
        # request header version of requests kqlite must answer as unsupported.
        assert api.flexible == flexible


def test_most_served_versions_are_compared_here_too():
    # Guards the filter above: Kafka 4 dropped only the oldest versions of a few APIs.
    assert len(KAFKA4_CASES) > 0.75 * len([c for c in CASES if c[0] not in CLUSTER_ONLY])


@pytest.mark.parametrize("case", KAFKA4_CASES, ids=case_id)
def test_layout_matches_kafka_json(case):
    key, version, kind = case
    api = APIS[key]
    doc = kafka_json(api.name + kind.capitalize())
    flexible = api.is_flexible(version)
    common = {c["name"]: c["fields"] for c in doc.get("commonStructs", ())}
    theirs = _json_layout(_with_common_structs(doc["fields"], common), version, flexible)
    ours = _our_layout(getattr(api, kind), version, flexible)
    _forget_unstated_defaults(ours, theirs)
    assert ours == theirs


def _forget_unstated_defaults(ours, theirs):
    for a, b in zip(ours, theirs):
        if b["default"] == UNSTATED and a["name"] == b["name"]:
            a["default"] = UNSTATED
        if a["fields"] and b["fields"]:
            _forget_unstated_defaults(a["fields"], b["fields"])


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
