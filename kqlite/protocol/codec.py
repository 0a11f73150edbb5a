"""Compiles schema declarations into per-version decoders and encoders.

``message(api_key, version, "request" | "response")`` returns a :class:`Message` whose
``decode(reader)`` gives a body dict and ``encode(writer, body)`` writes one. Messages are
compiled on first use and cached; a compiled field is a pair of closures and a run of
fixed-width fields one ``struct`` call, so no schema look-up happens at run time.

Decoding rules: every field of the version appears in the dict, tagged fields included
(with their default when the peer did not send them); unknown tags are skipped; a field
that does not consume exactly its tagged size, a null in a non-nullable field, a length or
count beyond the bytes left, or invalid UTF-8 raises ProtocolError.

Encoding rules: keys the version does not have are ignored; a missing key takes the
field's default (``_dsl`` docstring); a tagged field is written only when it differs from
its default (as Kafka does); a wrong type raises EncodeError (a TypeError) and an
unrepresentable value EncodeRangeError (a ValueError), both naming the field path.
"""

import struct
from collections.abc import Mapping

from . import primitives as P
from .errors import ProtocolError
from .schema import APIS, MISSING, in_range

__all__ = ["Message", "message", "read_tags"]

_BYTES_LIKE = (bytes, bytearray, memoryview)
# WIRE: Kafka-defined. Kafka limits every string, classic or compact, to 32767 UTF-8 bytes.
_MAX_STRING = 0x7FFF
_ZERO = {"bool": False, "float64": 0.0, "uuid": P.ZERO_UUID, "string": "", "bytes": b"",
         "records": b""}


class Message:
    """A compiled message layout for one API version and direction."""
    __slots__ = ("name", "version", "flexible", "decode", "encode", "default")

    def __init__(self, name, version, flexible, decode, encode, default):
        self.name = name
        self.version = version
        self.flexible = flexible
        self.decode = decode    # decode(reader) -> dict
        self.encode = encode    # encode(writer, body) -> None
        self.default = default  # default() -> dict with every field at its default


_CACHE = {}


def message(api_key, version, kind):
    """The compiled ``kind`` ("request"/"response") layout; KeyError if kqlite has none."""
    key = (api_key, version, kind)
    compiled = _CACHE.get(key)
    if compiled is None:
        api = APIS[api_key]
        if not in_range(version, api.versions):
            raise KeyError(f"{api.name} v{version} is not supported")
        flexible = api.is_flexible(version)
        dec, enc, default, _ = _struct(getattr(api, kind), version, flexible)
        name = f"{api.name}{kind.capitalize()} v{version}"
        compiled = _CACHE[key] = Message(name, version, flexible, dec, enc, default)
    return compiled


# -- Fields ---------------------------------------------------------------------------------

def _field(f, version, flexible):
    """(decode, encode, default_factory, min_size) for field ``f`` at ``version``."""
    nullable = in_range(version, f.nullable)
    elem = f.element_type
    if elem is not None:
        if f.fields is not None:
            edec, eenc, _, emin = _struct(f.fields, version, flexible)
        else:
            edec, eenc, _, emin = _field(f._replace(type=elem, nullable=None), version, flexible)
        dec, enc = _array(edec, eenc, max(emin, 1), nullable, flexible)
        if f.default is not MISSING:
            default = _const(f.default)
        else:
            default = _const(None) if nullable else list
        return dec, enc, default, 1 if flexible else 4
    if f.type == "{}":
        dec, enc, default, size = _struct(f.fields, version, flexible)
        return dec, enc, default, size
    if f.type in ("string", "bytes", "records"):
        dec, enc = _VARIABLE[f.type](nullable, flexible)
        size = 1 if flexible else (2 if f.type == "string" else 4)
    else:
        dec, enc, size = P.READERS[f.type], P.WRITERS[f.type], P.MIN_SIZE[f.type]
    if f.default is not MISSING:
        default = _const(f.default)
    elif nullable:
        default = _const(None)
    else:
        default = _const(_ZERO.get(f.type, 0))
    return dec, enc, default, size


def _const(value):
    return lambda: value


def _string(nullable, compact):
    take = P.Reader.take

    def dec(r):
        n = P.read_length(r, compact, False)
        if n < 0:
            if nullable:
                return None
            raise ProtocolError(f"null in a non-nullable string at byte {r.pos}")
        if n > _MAX_STRING:
            raise ProtocolError(f"string of {n} bytes at byte {r.pos} is too long")
        try:
            return str(take(r, n), "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"invalid UTF-8 in a string: {exc.reason}") from None

    def enc(w, v):
        if v is None:
            if not nullable:
                raise P.EncodeError("null in a non-nullable string")
            P.write_length(w, -1, compact, False)
            return
        if v.__class__ is not str:
            raise P.EncodeError(f"expected str, got {type(v).__name__}")
        try:
            data = v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise P.EncodeRangeError(f"string is not encodable as UTF-8: {exc.reason}") from None
        if len(data) > _MAX_STRING:
            raise P.EncodeRangeError(f"string of {len(data)} bytes is too long")
        P.write_length(w, len(data), compact, False)
        w.out += data
    return dec, enc


def _bytes(nullable, compact, records=False):
    take = P.Reader.take
    what = "records" if records else "bytes"

    def dec(r):
        n = P.read_length(r, compact, True)
        if n < 0:
            if nullable:
                return None
            raise ProtocolError(f"null in non-nullable {what} at byte {r.pos}")
        # records stay a view of the frame (no copy); small bytes fields become bytes
        return take(r, n) if records else bytes(take(r, n))

    def enc(w, v):
        if v is None:
            if not nullable:
                raise P.EncodeError(f"null in non-nullable {what}")
            P.write_length(w, -1, compact, True)
        elif isinstance(v, _BYTES_LIKE):
            if len(v) > 0x7FFFFFFE:
                raise P.EncodeRangeError(f"{what} of {len(v)} bytes is too long")
            P.write_length(w, len(v), compact, True)
            w.out += v
        elif records and isinstance(v, P.FileRegion):
            if not 0 <= v.length <= 0x7FFFFFFE:
                raise P.EncodeRangeError(f"file region of {v.length} bytes")
            P.write_length(w, v.length, compact, True)
            w.region(v)
        else:
            raise P.EncodeError(f"expected {what}, got {type(v).__name__}")
    return dec, enc


_VARIABLE = {
    "string": _string,
    "bytes": _bytes,
    "records": lambda nullable, compact: _bytes(nullable, compact, records=True),
}


def _array(edec, eenc, emin, nullable, compact):
    def dec(r):
        n = P.read_length(r, compact, True)
        if n < 0:
            if nullable:
                return None
            raise ProtocolError(f"null in a non-nullable array at byte {r.pos}")
        # Bound the count by the bytes left before building anything (AT-12).
        if n * emin > r.end - r.pos:
            raise ProtocolError(f"array of {n} elements at byte {r.pos} exceeds the "
                                f"{r.end - r.pos} bytes left")
        return [edec(r) for _ in range(n)]

    def enc(w, v):
        if v is None:
            if not nullable:
                raise P.EncodeError("null in a non-nullable array")
            P.write_length(w, -1, compact, True)
            return
        if not isinstance(v, (list, tuple)):
            raise P.EncodeError(f"expected a list, got {type(v).__name__}")
        P.write_length(w, len(v), compact, True)
        i = 0
        try:
            for i, item in enumerate(v):
                eenc(w, item)
        except P.EncodeError as exc:
            exc.path.insert(0, f"[{i}]")
            raise
    return dec, enc


# -- Structs --------------------------------------------------------------------------------

# Fixed-width types that consecutive fields of can be read and written with one struct call.
# bool is left out: struct's "?" would accept any object when packing.
_RUN_FORMATS = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                "int64": "q", "float64": "d"}
_IMMUTABLE = (type(None), int, float, str, bytes, bool, type(P.ZERO_UUID))


def _struct(fields, version, flexible):
    """(decode, encode, default_factory, min_size) for a struct of ``fields`` at ``version``.

    Runs of consecutive fixed-width fields are decoded with one ``unpack_from`` and encoded
    with one ``pack`` (falling back to field-by-field writes to report a bad value).
    """
    dsteps = []     # decode, declaration order: (0, names, Struct) run, (1, name, decode),
    #                 (2, name, default) tagged
    esteps = []     # encode, wire order: (0, names, Struct, defaults, encoders), (1, name,
    #                 encode, default)
    tagged = {}     # tag -> (name, decode, encode, default, encoded default)
    defaults = []   # (name, default) in declaration order
    min_size = 1 if flexible else 0  # the tagged-field count
    run = []        # the run being collected: (field, decode, encode, default)

    def close_run():
        if len(run) == 1:
            f, dec, enc, default = run[0]
            dsteps.append((1, f.name, dec))
            esteps.append((1, f.name, enc, default))
        elif run:
            st = struct.Struct(">" + "".join(_RUN_FORMATS[f.type] for f, *_ in run))
            names = tuple(f.name for f, *_ in run)
            dsteps.append((0, names, st))
            esteps.append((0, names, st, tuple(d for *_, d in run),
                           tuple(e for _, _, e, _ in run)))
        run.clear()

    for f in fields:
        if not in_range(version, f.versions):
            continue
        dec, enc, default, size = _field(f, version, flexible)
        defaults.append((f.name, default))
        if flexible and in_range(version, f.tagged):
            close_run()
            w = P.Writer()
            enc(w, default())
            tagged[f.tag] = (f.name, dec, enc, default, bytes(w.out))
            dsteps.append((2, f.name, default))
            continue
        min_size += size
        if f.type not in _RUN_FORMATS:
            close_run()  # a variable-size field ends the run and is a step of its own
        run.append((f, dec, enc, default))
        if f.type not in _RUN_FORMATS:
            close_run()
    close_run()
    tag_order = sorted(tagged.items())

    template = {name: factory() for name, factory in defaults}
    if all(isinstance(v, _IMMUTABLE) for v in template.values()):
        default = template.copy
    else:
        def default():
            return {name: factory() for name, factory in defaults}

    def dec(r):
        d = {}
        for kind, name, step in dsteps:
            if kind == 1:
                d[name] = step(r)
            elif kind == 0:
                p = r.pos
                e = p + step.size
                if e > r.end:
                    raise ProtocolError(f"fields {', '.join(name)} need {step.size} bytes "
                                        f"at byte {p}, {r.end - p} left")
                d.update(zip(name, step.unpack_from(r.buf, p)))
                r.pos = e
            else:
                d[name] = step()
        if flexible:
            read_tags(r, tagged, d)
        return d

    def enc(w, body):
        if body.__class__ is not dict and not isinstance(body, Mapping):
            raise P.EncodeError(f"expected a dict, got {type(body).__name__}")
        get = body.get
        name = None
        try:
            for step in esteps:
                if step[0] == 1:
                    _, name, fenc, factory = step
                    v = get(name, _ABSENT)
                    fenc(w, factory() if v is _ABSENT else v)
                else:
                    _encode_run(w, get, *step[1:])
            if flexible:
                name = None
                write_tags(w, tag_order, body)
        except P.EncodeError as exc:
            if name is not None:
                exc.path.insert(0, name)
            raise
    return dec, enc, default, min_size


def _encode_run(w, get, names, st, factories, encoders):
    values = [get(n, _ABSENT) for n in names]
    for i, v in enumerate(values):
        if v is _ABSENT:
            values[i] = factories[i]()
    try:
        w.out += st.pack(*values)
        return
    except struct.error:
        pass
    # Some value is wrong: encode field by field so the error names it.
    for name, fenc, v in zip(names, encoders, values):
        try:
            fenc(P.Writer(), v)
        except P.EncodeError as exc:
            exc.path.insert(0, name)
            raise
    raise P.EncodeError(f"cannot encode {', '.join(names)}")  # not reached in practice


_ABSENT = object()


def read_tags(r, tagged, d):
    """Read a tagged-field section into ``d``: known tags (``tagged``) decoded, others skipped."""
    count = P.read_uvarint(r)
    if count * 2 > r.end - r.pos:  # each tag takes at least two bytes (tag, size)
        raise ProtocolError(f"{count} tagged fields at byte {r.pos} exceed the bytes left")
    for _ in range(count):
        tag = P.read_uvarint(r)
        size = P.read_uvarint(r)
        start = r.pos
        if size > r.end - start:
            raise ProtocolError(f"tagged field {tag} of {size} bytes at byte {start} "
                                f"exceeds the bytes left")
        known = tagged.get(tag)
        if known is not None:  # unknown tags are skipped, as Kafka does
            sub = P.Reader(r.buf, start, start + size)
            d[known[0]] = known[1](sub)
            if sub.pos != sub.end:
                raise ProtocolError(f"tagged field {tag} did not fill its {size} bytes")
        r.pos = start + size


def write_tags(w, tag_order, body):
    present = []
    for tag, (name, _, enc, _, encoded_default) in tag_order:
        v = body.get(name, _ABSENT)
        if v is _ABSENT:
            continue
        sub = P.Writer()
        try:
            enc(sub, v)
        except P.EncodeError as exc:
            exc.path.insert(0, name)
            raise
        if sub.out != encoded_default:
            present.append((tag, sub.out))
    P.write_uvarint(w, len(present))
    for tag, data in present:
        P.write_uvarint(w, tag)
        P.write_uvarint(w, len(data))
        w.out += data
