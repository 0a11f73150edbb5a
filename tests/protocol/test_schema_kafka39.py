"""kqlite's protocol against Apache Kafka 3.9, with kio as an independent oracle.

kio 0.5.0 is code generated from Kafka 3.9's message JSON (one dataclass per API, version
and direction) with its own serializer and parser (``kio.serial``). Three checks:

- layouts: for every API and version kqlite serves, both directions have kio's fields in
  kio's order with the same types, nullability and tags, and kqlite's default wherever kio
  records one;
- bytes: a body encoded by kqlite is parsed by kio to the same values, kio encodes the same
  body to the same bytes, and kqlite decodes kio's bytes back to the body;
- versions: every API kqlite serves is served in exactly the range an Apache Kafka 3.9
  broker in ZooKeeper mode advertises in ApiVersions (``KAFKA_39_ZK_BROKER`` below); the
  inter-broker APIs (``CLUSTER_ONLY``) in exactly that range too, in ``CLUSTER_SUPPORTED``.

The inter-broker APIs are also checked as whole request frames: kio writes each version's
own request header (v0 without a client id for ControlledShutdown v0, v1, v2).
"""

import dataclasses
import datetime
import functools
import io
import os
import typing
import uuid
from types import NoneType, UnionType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlite.protocol import (API_NAMES, CLUSTER_SUPPORTED, SUPPORTED, ServerConnection,
                             encode_request)
from kqlite.protocol.codec import message
from kqlite.protocol.primitives import Reader, Writer
from kqlite.protocol.schema import APIS, CLUSTER_ONLY, MISSING, in_range

from protocol_helpers import case_id

kio_index = pytest.importorskip("kio.index")
from kio.schema.errors import ErrorCode as KioErrorCode  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.serial.readers import tz_aware_from_i64  # noqa: E402

EXAMPLES = int(os.environ.get("KQLITE_PROTOCOL_EXAMPLES", "6"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ZERO_UUID = uuid.UUID(int=0)

# kio gives some integer fields a richer Python type; on the wire they are these.
_WIRE_TYPE = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64",
              "datetime_i64": "int64"}
# kio reads the zero UUID and a -1 timestamp as None; that is a sentinel, not Kafka's
# nullability (Kafka's JSON cannot make a uuid or int64 nullable).
_SENTINEL_NONE = {"uuid", "datetime_i64"}
# kio names a duration or time field without Kafka's "Ms" suffix (ThrottleTimeMs ->
# throttle_time); kqlite keeps the JSON name.
_UNIT_SUFFIX = {"timedelta_i32": "_ms", "timedelta_i64": "_ms", "datetime_i64": "_ms"}

# Every API an Apache Kafka 3.9 broker in ZooKeeper mode (the default, no migration, no
# unstable versions) advertises in ApiVersions, as key: (min, max). Checked by hand against
# the 3.9 branch of apache/kafka: the request JSON's validVersions for every message whose
# "listeners" include "zkBroker", none of which is "latestVersionUnstable" in 3.9;
# ApiVersionsResponse.filterApis keeps all of them (every minRequiredInterBrokerMagic is at
# most the record version 2 of metadata version 3.9-IV0) and drops only the telemetry APIs,
# which are not zkBroker APIs anyway; a ZooKeeper broker forwards nothing to a controller
# (forwarding needs zookeeper.metadata.migration.enable), so no range is intersected.
KAFKA_39_ZK_BROKER = {
    0: (0, 11),   # Produce
    1: (0, 17),   # Fetch
    2: (0, 9),    # ListOffsets
    3: (0, 12),   # Metadata
    4: (0, 7),    # LeaderAndIsr
    5: (0, 4),    # StopReplica
    6: (0, 8),    # UpdateMetadata
    7: (0, 3),    # ControlledShutdown
    8: (0, 9),    # OffsetCommit
    9: (0, 9),    # OffsetFetch
    10: (0, 6),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    16: (0, 5),   # ListGroups
    17: (0, 1),   # SaslHandshake
    18: (0, 4),   # ApiVersions
    19: (0, 7),   # CreateTopics
    20: (0, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 5),   # InitProducerId
    23: (0, 4),   # OffsetForLeaderEpoch
    24: (0, 5),   # AddPartitionsToTxn
    25: (0, 4),   # AddOffsetsToTxn
    26: (0, 4),   # EndTxn
    27: (0, 1),   # WriteTxnMarkers
    28: (0, 4),   # TxnOffsetCommit
    29: (0, 3),   # DescribeAcls
    30: (0, 3),   # CreateAcls
    31: (0, 3),   # DeleteAcls
    32: (0, 4),   # DescribeConfigs
    33: (0, 2),   # AlterConfigs
    34: (0, 2),   # AlterReplicaLogDirs
    35: (0, 4),   # DescribeLogDirs
    36: (0, 2),   # SaslAuthenticate
    37: (0, 3),   # CreatePartitions
    38: (0, 3),   # CreateDelegationToken
    39: (0, 2),   # RenewDelegationToken
    40: (0, 2),   # ExpireDelegationToken
    41: (0, 3),   # DescribeDelegationToken
    42: (0, 2),   # DeleteGroups
    43: (0, 2),   # ElectLeaders
    44: (0, 1),   # IncrementalAlterConfigs
    45: (0, 0),   # AlterPartitionReassignments
    46: (0, 0),   # ListPartitionReassignments
    47: (0, 0),   # OffsetDelete
    48: (0, 1),   # DescribeClientQuotas
    49: (0, 1),   # AlterClientQuotas
    50: (0, 0),   # DescribeUserScramCredentials
    51: (0, 0),   # AlterUserScramCredentials
    56: (0, 3),   # AlterPartition
    57: (0, 1),   # UpdateFeatures
    58: (0, 0),   # Envelope
    60: (0, 1),   # DescribeCluster
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 1),   # ListTransactions
    67: (0, 0),   # AllocateProducerIds
    68: (0, 0),   # ConsumerGroupHeartbeat
    69: (0, 0),   # ConsumerGroupDescribe
}


# Every (key, version, kind) kqlite serves; the refused APIs (decoded to be answered with
# an error, never advertised) in the versions Kafka 3.9 has; and the inter-broker APIs only
# a cluster broker serves.
SERVED = [(key, v, kind) for key in sorted(SUPPORTED)
          for v in range(SUPPORTED[key][0], SUPPORTED[key][1] + 1)
          for kind in ("request", "response")]
REFUSED = [(key, v, kind) for key in sorted(set(APIS) - set(SUPPORTED) - CLUSTER_ONLY)
           for v in range(APIS[key].versions[0], APIS[key].versions[1] + 1)
           if v in kio_index.schema_name_map[kio_index.api_key_map[key]]
           for kind in ("request", "response")]
CLUSTER = [(key, v, kind) for key in sorted(CLUSTER_ONLY)
           for v in range(CLUSTER_SUPPORTED[key][0], CLUSTER_SUPPORTED[key][1] + 1)
           for kind in ("request", "response")]
CASES = SERVED + REFUSED + CLUSTER


def kio_class(key, version, kind):
    load = kio_index.load_request_schema if kind == "request" else kio_index.load_response_schema
    return load(key, version)


# -- kio's dataclasses, read as layouts -----------------------------------------------------------

class _KioField(typing.NamedTuple):
    name: str
    kio_type: str         # kio's kafka_type ("error_code", "int32", ...); "" for structs
    array: bool
    optional: bool        # the Python type admits None
    struct: type | None   # the element dataclass of a struct or array of structs
    tag: int | None
    default: object       # dataclasses.MISSING when kio records none


@functools.cache
def kio_fields(cls):
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp, optional = _strip_none(hints[f.name])
        array = typing.get_origin(tp) is tuple
        elem = typing.get_args(tp)[0] if array else tp
        struct = elem if dataclasses.is_dataclass(elem) else None
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(_KioField(f.name, "" if struct else f.metadata["kafka_type"], array,
                             optional, struct, f.metadata.get("tag"), default))
    return out


def _strip_none(tp):
    if typing.get_origin(tp) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        assert len(args) == 1, tp
        return args[0], True
    return tp, False


def _kio_layout(cls):
    out = []
    for f in kio_fields(cls):
        if f.struct is not None:
            ftype = "[]" if f.array else "{}"
        else:
            ftype = ("[]" if f.array else "") + _WIRE_TYPE.get(f.kio_type, f.kio_type)
        nullable = f.optional and (f.array or f.kio_type not in _SENTINEL_NONE)
        out.append({
            "name": key_of(f), "type": ftype,
            "nullable": nullable, "tag": f.tag,
            "default": (MISSING if f.default is dataclasses.MISSING
                        else to_plain(f.default, f)),
            "fields": _kio_layout(f.struct) if f.struct is not None else None,
        })
    return out


_ZERO = {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b"",
         "uuid": ZERO_UUID, "[]": [], "{}": None}


def _our_layout(fields, version, flexible, kio_layout):
    """kqlite's layout in the shape of ``kio_layout``; defaults only where kio has one."""
    theirs = {f["name"]: f for f in kio_layout}
    out = []
    for f in fields:
        if not in_range(version, f.versions):
            continue
        nullable = in_range(version, f.nullable)
        mine = theirs.get(f.name, {"default": MISSING, "fields": []})
        default = MISSING
        if mine["default"] is not MISSING:
            if f.default is not MISSING:
                default = f.default
            elif nullable:
                default = None
            elif f.type.startswith("[]"):
                default = []
            elif f.type == "{}":
                default = mine["default"]  # a struct's default is its fields' defaults
            else:
                default = _ZERO.get(f.type, 0)
        out.append({
            "name": f.name, "type": f.type, "nullable": nullable,
            "tag": f.tag if flexible and in_range(version, f.tagged) else None,
            "default": default,
            "fields": (_our_layout(f.fields, version, flexible, mine["fields"] or [])
                       if f.fields is not None else None),
        })
    return out


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_layout_matches_kio(case):
    key, version, kind = case
    api = APIS[key]
    cls = kio_class(key, version, kind)
    assert cls.__api_key__ == key and cls.__version__ == version
    assert cls.__flexible__ == api.is_flexible(version)
    theirs = _kio_layout(cls)
    assert _our_layout(getattr(api, kind), version, api.is_flexible(version), theirs) == theirs


# -- Values: kqlite's body dicts <-> kio's entities ------------------------------------------------

def key_of(f):
    """kqlite's key for kio field ``f``. kio appends "_" to the JSON names that are Python
    builtins (``type_``, ``id_``: LeaderAndIsr, UpdateMetadata); kqlite keeps the JSON name."""
    return f.name.removesuffix("_") + _UNIT_SUFFIX.get(f.kio_type, "")


def plain_struct(entity):
    """A kio entity as kqlite's body dict."""
    return {key_of(f): to_plain(getattr(entity, f.name), f) for f in kio_fields(type(entity))}


def to_plain(value, f):
    """A kio value of field ``f`` as kqlite's codec has it."""
    if f.array:
        if value is None:
            return None
        return [_plain_one(v, f) for v in value]
    return _plain_one(value, f)


def _plain_one(value, f):
    if f.struct is not None:
        if value is None:
            return None
        return plain_struct(value)
    if f.kio_type == "error_code":
        return int(value)
    if f.kio_type in ("timedelta_i32", "timedelta_i64"):
        return value // datetime.timedelta(milliseconds=1)
    if f.kio_type == "datetime_i64":
        return -1 if value is None else round(value.timestamp() * 1000)
    if f.kio_type == "uuid":
        return ZERO_UUID if value is None else value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


def to_kio(body, cls):
    """kqlite's body dict for ``cls`` as a kio entity."""
    kwargs = {}
    for f in kio_fields(cls):
        value = body[key_of(f)]
        if f.array:
            kwargs[f.name] = None if value is None else tuple(_kio_one(v, f) for v in value)
        else:
            kwargs[f.name] = _kio_one(value, f)
    return cls(**kwargs)


def _kio_one(value, f):
    if value is None:
        return None
    if f.struct is not None:
        return to_kio(value, f.struct)
    if f.kio_type == "error_code":
        return KioErrorCode(value)
    if f.kio_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if f.kio_type == "datetime_i64":
        return None if value == -1 and f.optional else tz_aware_from_i64(value)
    if f.kio_type == "uuid":
        return None if value == ZERO_UUID else value
    return value


def _normal(body):
    """A decoded kqlite body with byte views as bytes, so that bodies compare by value."""
    if isinstance(body, dict):
        return {k: _normal(v) for k, v in body.items()}
    if isinstance(body, list):
        return [_normal(v) for v in body]
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    return body


# Bodies are drawn from kio's schema, within what kio itself can represent: its ErrorCode
# enum, durations as timedelta, times as non-negative datetimes in whole seconds (kio's
# TZAware has no sub-second part), or -1 where kio reads that as None.
_INT = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "timedelta_i32": 31}
_MAX_TIME = 4102444800000  # 2100-01-01, ms
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)


def _kio_value(f):
    if f.struct is not None:
        one = kio_bodies(f.struct)
    elif f.kio_type in _INT:
        bits = _INT[f.kio_type]
        one = st.integers(-(1 << bits), (1 << bits) - 1)
    elif f.kio_type == "uint16":
        one = st.integers(0, 0xFFFF)
    elif f.kio_type == "timedelta_i64":
        one = st.integers(-(1 << 40), 1 << 40)
    elif f.kio_type == "datetime_i64":
        one = st.integers(0, _MAX_TIME // 1000).map(lambda s: s * 1000)
        if f.optional:
            one = st.just(-1) | one
    elif f.kio_type == "error_code":
        one = st.sampled_from(sorted(int(e) for e in KioErrorCode))
    elif f.kio_type == "bool":
        one = st.booleans()
    elif f.kio_type == "float64":
        one = st.floats(allow_nan=False, allow_infinity=False)
    elif f.kio_type == "string":
        one = _text
    elif f.kio_type in ("bytes", "records"):
        one = st.binary(max_size=24)
    elif f.kio_type == "uuid":
        one = st.just(ZERO_UUID) | st.uuids()
    else:
        raise AssertionError(f"no strategy for kio type {f.kio_type!r}")
    if f.array:
        one = st.lists(one, max_size=2)
    nullable = f.optional and (f.array or f.kio_type not in _SENTINEL_NONE)
    return st.none() | one if nullable else one


def kio_bodies(cls):
    return st.fixed_dictionaries({
        key_of(f): _kio_value(f) for f in kio_fields(cls)})


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bytes_agree_with_kio(case):
    key, version, kind = case
    cls = kio_class(key, version, kind)
    ours = message(key, version, kind)
    read, write = entity_reader(cls), entity_writer(cls)

    @SETTINGS
    @given(body=kio_bodies(cls))
    def run(body):
        w = Writer()
        ours.encode(w, body)
        encoded = bytes(w.out)
        entity, size = read(memoryview(encoded), 0)
        assert size == len(encoded)
        assert plain_struct(entity) == body

        buf = io.BytesIO()
        write(buf, to_kio(body, cls))
        assert buf.getvalue() == encoded
        r = Reader(memoryview(buf.getvalue()))
        assert _normal(ours.decode(r)) == body
        assert r.remaining() == 0

    run()


# -- Served versions ------------------------------------------------------------------------------

def test_zk_broker_table_matches_kio():
    """Each range of the table is the full range kio generated from Kafka 3.9's JSON (no
    zkBroker API has an unstable latest version in 3.9, so nothing is cut off)."""
    for key, (lo, hi) in KAFKA_39_ZK_BROKER.items():
        name = kio_index.api_key_map[key]
        versions = sorted(kio_index.schema_name_map[name])
        assert (versions[0], versions[-1]) == (lo, hi), API_NAMES.get(key, key)
        assert versions == list(range(lo, hi + 1))


@pytest.mark.parametrize("key", sorted(SUPPORTED), ids=lambda k: API_NAMES[k])
def test_served_versions_are_kafka_39s(key):
    assert key in KAFKA_39_ZK_BROKER, f"{API_NAMES[key]} is not served by a Kafka 3.9 broker"
    want = KAFKA_39_ZK_BROKER[key]
    assert SUPPORTED[key] == want, \
        f"{API_NAMES[key]}: kqlite serves v{SUPPORTED[key][0]}-{SUPPORTED[key][1]}, " \
        f"Kafka 3.9 serves v{want[0]}-{want[1]}"


@pytest.mark.parametrize("key", sorted(CLUSTER_ONLY), ids=lambda k: API_NAMES[k])
def test_cluster_versions_are_kafka_39s(key):
    """A cluster broker serves each inter-broker API in Kafka 3.9's range; a single broker
    does not advertise it. Beyond those, a cluster broker advertises what a single broker
    does."""
    want = KAFKA_39_ZK_BROKER[key]
    assert CLUSTER_SUPPORTED[key] == want, \
        f"{API_NAMES[key]}: kqlite serves v{CLUSTER_SUPPORTED[key][0]}-" \
        f"{CLUSTER_SUPPORTED[key][1]}, Kafka 3.9 serves v{want[0]}-{want[1]}"
    assert key not in SUPPORTED
    assert {k: v for k, v in CLUSTER_SUPPORTED.items() if k not in CLUSTER_ONLY} == \
        SUPPORTED


# -- Whole request frames of the inter-broker APIs ------------------------------------------------

CLUSTER_REQUESTS = [(key, v, kind) for key, v, kind in CLUSTER if kind == "request"]


@pytest.mark.parametrize("case", CLUSTER_REQUESTS, ids=case_id)
def test_cluster_request_frames_agree_with_kio(case):
    """kio frames a request with the header Kafka 3.9 uses for that version (v0, without a
    client id, for ControlledShutdown v0); kqlite reads it and writes the same bytes."""
    key, version, _ = case
    cls = kio_class(key, version, "request")
    header_cls = cls.__header_schema__
    header_fields = {f.name for f in dataclasses.fields(header_cls)}
    client_id = "broker-2" if "client_id" in header_fields else ""
    write_body, write_header = entity_writer(cls), entity_writer(header_cls)

    @SETTINGS
    @given(body=kio_bodies(cls), corr=st.integers(-(1 << 31), (1 << 31) - 1))
    def run(body, corr):
        header = {"request_api_key": key, "request_api_version": version,
                  "correlation_id": corr, "client_id": client_id}
        buf = io.BytesIO()
        write_header(buf, header_cls(**{k: header[k] for k in header_fields}))
        write_body(buf, to_kio(body, cls))
        frame = len(buf.getvalue()).to_bytes(4, "big") + buf.getvalue()
        (req,) = ServerConnection().receive_data(frame)
        assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == \
            (key, version, corr, client_id)
        assert not req.unsupported and _normal(req.body) == body
        assert encode_request(key, version, corr, client_id, body) == frame

    run()
