"""Config values as Kafka reads them: Java's parsing of a value by its ``ConfigDef.Type``
and Kafka's validators (the checks config_rules.py's table names for each config).

A value comes as a string from a Kafka client (CreateTopics, AlterConfigs) or as a
Python value from the embedded API. A string is trimmed as Java's ``String.trim`` trims
(every character up to U+0020 at either end; other Unicode spaces stay and make the
value invalid), then parsed by the config's type with Java's rules:

- INT and LONG: ``Integer.parseInt``/``Long.parseLong``: an optional sign and decimal
  digits (any Unicode decimal digit of the Basic Multilingual Plane, as Java's
  ``Character.digit``), no ``_``, no ``0x``, within 32 or 64 bits;
- DOUBLE: ``Double.parseDouble``: Java's floating-point literal syntax (``NaN``,
  ``Infinity``, ``1e3``, ``.5``, ``5.``, hexadecimal ``0x1p-1``, a ``d``/``f`` suffix),
  ASCII digits only;
- BOOLEAN: ``true`` or ``false`` in any case (Java's ``equalsIgnoreCase``);
- STRING: the trimmed string; LIST: the trimmed string split at commas with the
  whitespace (``[ \\t\\n\\x0b\\f\\r]``) around them; an empty string is the empty list.

Python values: INT/LONG take an int (not a bool, not a float), DOUBLE an int or float,
BOOLEAN a bool, LIST a list or tuple of strings -- the Java types ``parseType`` takes.

Each parser returns the parsed value, or None when the value is not of the type (its
``must`` says what it must be). Each validator (Kafka's ``Range.atLeast``,
``Range.between``, ``ValidString.in``, ``ValidList.in``, the compression level and
throttled-replica validators, ``MetadataVersionValidator``) returns what a refused value
must be, or None. :func:`java_double_string` is Java's ``Double.toString``, the form in
which Kafka shows a DOUBLE.

One deliberate difference: Kafka's ``Range`` lets NaN through (every comparison with NaN
is false) and a NaN ``min.cleanable.dirty.ratio`` then never compacts; :func:`between`
refuses it.
"""

import math
import re
import unicodedata
from decimal import Decimal
from functools import lru_cache

__all__ = ["PARSERS", "java_trim", "at_least", "between", "one_of", "list_of", "gzip_level",
           "throttled_replicas", "metadata_version", "java_double_string"]


# -- Java's parsing ----------------------------------------------------------------------

_TRIMMED = "".join(map(chr, range(0x21)))


def java_trim(text):
    return text.strip(_TRIMMED)


_INTEGER = re.compile(r"([+-]?)(\d+)")     # \d: Unicode decimal digits (category Nd)


@lru_cache(maxsize=1)
def _zeros():
    return "".join(c for c in map(chr, range(0x10000)) if unicodedata.decimal(c, None) == 0)


def _java_integer(text):
    """Integer.parseInt / Long.parseLong of a trimmed string (range unchecked), or None."""
    m = _INTEGER.fullmatch(text)
    # Java reads UTF-16 units: a digit outside the BMP is a surrogate pair, not a digit.
    if m is None or max(m.group(2)) > "\uffff":
        return None
    significant = m.group(2).lstrip(_zeros())
    if len(significant) > 19:
        return None
    value = int(significant or "0")
    return -value if m.group(1) == "-" else value


_DOUBLE = re.compile(r"""[+-]?(?:
    NaN | Infinity
  | (?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?
  | (?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?
)""", re.VERBOSE)


def _java_double(text):
    """Double.parseDouble of a trimmed string, or None."""
    m = _DOUBLE.fullmatch(text)
    if m is None:
        return None
    negative = text.startswith("-")
    if m.group("hex"):
        value = float.fromhex(m.group("hex"))
    elif m.group("dec"):
        value = float(m.group("dec"))
    else:
        value = float(text.lstrip("+-"))
    return -value if negative else value


def _equals_ignore_case(text, word):
    # Java compares char by char, upper- then lower-cased: "falſe" (long s) is "false".
    return len(text) == len(word) and all(
        a == b or a.upper() == b.upper() or a.lower() == b.lower() for a, b in zip(text, word))


_LIST_SEPARATOR = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")


def _integer(bits):
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def parse(value):
        if isinstance(value, str):
            value = _java_integer(java_trim(value))
        elif isinstance(value, bool) or not isinstance(value, int):
            value = None
        return value if value is not None and low <= value <= high else None
    parse.must = f"must be a {bits}-bit integer"
    return parse


def _double(value):
    if isinstance(value, str):
        return _java_double(java_trim(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def _boolean(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        trimmed = java_trim(value)
        for word, parsed in (("true", True), ("false", False)):
            if _equals_ignore_case(trimmed, word):
                return parsed
    return None


def _string(value):
    return java_trim(value) if isinstance(value, str) else None


def _list(value):
    if isinstance(value, str):
        trimmed = java_trim(value)
        return _LIST_SEPARATOR.split(trimmed) if trimmed else []
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


_double.must = "must be a number"
_boolean.must = "must be true or false"
_string.must = "must be a string"
_list.must = "must be a comma-separated list"
# ConfigDef.Type -> parser: the parsed value, or None when the value is not of the type.
PARSERS = {"INT": _integer(32), "LONG": _integer(64), "DOUBLE": _double,
           "BOOLEAN": _boolean, "STRING": _string, "LIST": _list}


# -- Kafka's validators: each returns what a refused value must be, or None --------------

def at_least(minimum):
    def check(value):
        return None if value >= minimum else f"must be at least {minimum}"
    check.minimum = minimum
    return check


def between(low, high):
    def check(value):
        # "not (...)" also refuses NaN, which Kafka's Range lets by.
        return None if low <= value <= high else f"must be between {low} and {high}"
    check.minimum = low
    return check


def one_of(*choices):
    def check(value):
        return None if value in choices else f"must be one of {', '.join(choices)}"
    return check


def list_of(*choices):
    def check(items):
        if all(item in choices for item in items):
            return None
        return f"must list only {' and '.join(choices)} (comma-separated, or empty)"
    return check


def gzip_level(value):
    # GzipCompression's level validator: Deflater's 1..9, or -1 (its default level).
    return None if value == -1 or 1 <= value <= 9 else "must be between 1 and 9 or equal to -1"


_REPLICA = re.compile(r"(?:[0-9]+:[0-9]+)?")


def throttled_replicas(items):
    # ThrottledReplicaListValidator: each trimmed item partitionId:brokerId (or empty), or
    # the items together exactly "*".
    trimmed = [java_trim(item) for item in items]
    if all(_REPLICA.fullmatch(t) for t in trimmed) or "".join(trimmed) == "*":
        return None
    return "must be the literal '*' or a list of replicas partitionId:brokerId,..."


# Kafka 3.9's MetadataVersion: release -> its internal versions (IV0, IV1, ...). The
# releases up to 3.9 are production versions, so the bare release names them too; the
# 4.0 versions are not, so "4.0" alone is not a version.
_IV_COUNTS = {
    "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3,
    "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1,
    "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1}
_METADATA_VERSIONS = frozenset(
    ["0.8.0", "0.8.1", "0.8.2", "0.9.0", "4.0-IV0", "4.0-IV1"] + list(_IV_COUNTS)
    + [f"{release}-IV{i}" for release, count in _IV_COUNTS.items() for i in range(count)])


def metadata_version(value):
    # MetadataVersion.fromVersionString: the first three dot-separated parts of a 0.x
    # version and the first two of a later one name it; "2.8.1" is "2.8".
    parts = value.split(".")
    while parts and parts[-1] == "":       # Java's String.split drops trailing empties
        parts.pop()
    wanted = 3 if value.startswith("0.") else 2
    key = value if wanted >= len(parts) else ".".join(parts[:wanted])
    if key not in _METADATA_VERSIONS:
        return "must be a Kafka version such as 3.9, 2.8 or 3.0-IV1"
    return None


# -- Java's Double.toString ----------------------------------------------------------------

def java_double_string(x):
    """``x`` as Java's ``Double.toString`` writes it (``0.5``, ``1.0E-4``, ``NaN``)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    # The shortest digits that read back as x (Python's repr), in Java's layout: plain
    # from 10^-3 up to 10^7, "d.dddE<n>" outside.
    shortest = Decimal(repr(abs(x))).normalize()
    digits = "".join(map(str, shortest.as_tuple().digits))
    exponent = shortest.adjusted()
    if 1e-3 <= abs(x) < 1e7:
        point = exponent + 1
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"
