"""Shared helpers for the protocol tests: Kafka's JSON definitions and Hypothesis bodies."""

import importlib.resources
import json
import re

from hypothesis import strategies as st

from kqlite.protocol.schema import APIS, MISSING, in_range

KAFKA_JSON_PACKAGE = "kafka.protocol.schemas.resources"

# Every (api_key, version, kind) kqlite serves, for parametrizing.
CASES = [(key, v, kind) for key, api in sorted(APIS.items())
         for v in range(api.versions[0], api.versions[1] + 1)
         for kind in ("request", "response")]


def case_id(case):
    key, v, kind = case
    return f"{APIS[key].name}{kind.capitalize()}-v{v}"


def kafka_json(name):
    """Kafka's message definition ``name`` (e.g. "FetchRequest") from kafka-python's copy,
    or None when kafka-python (or that file) is not installed."""
    try:
        text = importlib.resources.files(KAFKA_JSON_PACKAGE).joinpath(name + ".json").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    return json.loads(re.sub(r"(?m)^\s*//.*$", "", text))


def snake(name):
    """Kafka's CamelCase field name -> kqlite's key: ThrottleTimeMs -> throttle_time_ms."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# -- Hypothesis bodies from kqlite's own schema --------------------------------------------------

_INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def _value(f, version, flexible):
    nullable = in_range(version, f.nullable)
    elem = f.element_type
    if elem is not None:
        item = (_struct(f.fields, version, flexible) if f.fields is not None
                else _value(f._replace(type=elem, nullable=None), version, flexible))
        s = st.lists(item, max_size=3)
    elif f.type == "{}":
        s = _struct(f.fields, version, flexible)
    elif f.type in _INT_RANGES:
        bits = _INT_RANGES[f.type]
        s = st.integers(-(1 << bits), (1 << bits) - 1)
    elif f.type == "uint16":
        s = st.integers(0, 0xFFFF)
    elif f.type == "uint32":
        s = st.integers(0, 0xFFFFFFFF)
    elif f.type == "bool":
        s = st.booleans()
    elif f.type == "string":
        s = _text
    elif f.type in ("bytes", "records"):
        s = st.binary(max_size=40)
    elif f.type == "uuid":
        s = st.uuids()
    elif f.type == "float64":
        s = st.floats(allow_nan=False)
    else:
        raise AssertionError(f.type)
    if nullable:
        s = st.none() | s
    return s


def _struct(fields, version, flexible):
    return st.fixed_dictionaries({
        f.name: _value(f, version, flexible) for f in fields if in_range(version, f.versions)})


def bodies(api_key, version, kind):
    """A strategy of complete body dicts for one message version."""
    api = APIS[api_key]
    return _struct(getattr(api, kind), version, api.is_flexible(version))


def defaults_of(f, version):
    """kqlite's effective default for ``f`` at ``version`` (the DSL's rule)."""
    if f.default is not MISSING:
        return f.default
    return None if in_range(version, f.nullable) else "<zero>"
