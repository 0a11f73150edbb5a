"""The schema DSL: Kafka message layouts written as Python data.

A message is a list of fields; ``F(name, type, versions, ...)`` declares one. Versions are
Kafka's range strings: ``"3+"`` (3 and later), ``"0-12"`` (inclusive), ``"7"`` (only 7),
``"none"``. Types are Kafka's JSON type names:

- primitives ``bool int8 int16 uint16 int32 uint32 int64 float64 string bytes records uuid``
  (plus ``uvarint varint varlong``, which Kafka only uses inside other encodings);
- ``"[]int32"``, ``"[]string"`` ...: an array of a primitive;
- ``"[]"`` with ``fields=[...]``: an array of structs; ``"{}"`` with ``fields=[...]``: one struct.

``nullable`` is the versions in which the field may be null; ``tag`` makes it a tagged field
(flexible versions only) in ``tagged`` versions (default: all its versions). ``default`` is the
value a missing field takes when encoding (Kafka's JSON ``default``); without one it is the
type's zero: ``0``, ``False``, ``""``, ``b""``, ``[]``, the zero UUID, or ``None`` when nullable.

``api(ApiKey.X, versions, flexible=..., request=[...], response=[...])`` ties an API key to
its two messages, and the API takes its key's name (``ApiKey.X.api_name``). Field names are
the snake_case of Kafka's JSON names (``ThrottleTimeMs`` -> ``throttle_time_ms``);
tests/protocol/test_schema_crosscheck.py checks every supported version against Kafka's
JSON definitions. The codec (``kqlite.protocol.codec``) compiles these
declarations per version; nothing here encodes or decodes.
"""

from typing import NamedTuple

from ..api_keys import ApiKey

__all__ = ["F", "api", "Api", "Field", "MISSING", "parse_versions", "in_range", "PRIMITIVES"]

# The largest version number Kafka could ever use: versions are int16 on the wire.
_MAX_VERSION = 0x7FFF  # WIRE: Kafka-defined (int16 api_version)

PRIMITIVES = frozenset({
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "string", "bytes", "records", "uuid", "uvarint", "varint", "varlong",
})


class _Missing:
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


def parse_versions(spec):
    """``"3+"`` -> (3, 32767); ``"0-12"`` -> (0, 12); ``"7"`` -> (7, 7);
    ``None`` or ``"none"`` -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return (int(spec[:-1]), _MAX_VERSION)
    lo, _, hi = spec.partition("-")
    return (int(lo), int(hi or lo))


def in_range(version, rng):
    return rng is not None and rng[0] <= version <= rng[1]


class Field(NamedTuple):
    """One declared field; see the module docstring for the meaning of each attribute."""
    name: str
    type: str                 # Kafka type name, "[]" + element type, "[]" or "{}" for structs
    versions: tuple           # (lo, hi)
    nullable: tuple | None    # versions in which null is allowed
    default: object           # MISSING: the type's zero value
    tag: int | None
    tagged: tuple | None      # versions in which the field is tagged
    fields: tuple | None      # sub-fields of a struct or array of structs

    @property
    def is_struct(self):
        return self.fields is not None

    @property
    def element_type(self):
        """The element type of an array ("[]int32" -> "int32"), "" for struct arrays, else None."""
        return self.type[2:] if self.type.startswith("[]") else None


def F(name, type, versions="0+", *, nullable=None, default=MISSING, tag=None, tagged=None,
      fields=None):
    """Declare a field (see the module docstring)."""
    base = type[2:] if type.startswith("[]") else type
    if fields is not None:
        if base not in ("", "{}"):
            raise ValueError(f"{name}: only '[]' and '{{}}' take fields")
        fields = tuple(fields)
    elif base not in PRIMITIVES:
        raise ValueError(f"{name}: unknown type {type!r}")
    if type == "{}" and nullable is not None:
        raise ValueError(f"{name}: nullable structs are not supported")
    rng = parse_versions(versions)
    if tag is not None and tagged is None:
        tagged = versions
    return Field(name, type, rng, parse_versions(nullable), default, tag,
                 parse_versions(tagged), fields)


class Api(NamedTuple):
    """An API: its key, name, the versions kqlite serves, and its two messages.

    ``flexible`` is Kafka's ``flexibleVersions`` for the API; it is also used to parse the
    request header of versions kqlite does not serve (header v2 in flexible versions).
    """
    key: ApiKey
    name: str
    versions: tuple
    flexible: tuple | None
    request: tuple
    response: tuple

    def is_flexible(self, version):
        return in_range(version, self.flexible)


def api(key, versions, *, flexible, request, response):
    return Api(key, key.api_name, parse_versions(versions), parse_versions(flexible),
               tuple(request), tuple(response))
