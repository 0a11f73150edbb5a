"""A Kafka ``server.properties`` file, read as Java's ``Properties.load`` reads it, and the
check of every key in it against the settings ``kqlite serve`` knows.

Theory of operation. ``read_properties(text)`` gives ``{key: value}``: lines are
``key=value``, ``key:value`` or ``key value``; ``#`` and ``!`` start comments; a line ending
in an odd number of backslashes continues on the next (its leading blanks dropped);
``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>`` are unescaped; a later line wins.
``--override key=value`` adds pairs on top, as Kafka's ``kafka-server-start.sh`` does.

``check_keys(properties)`` refuses, naming the key, any key that is not a setting of
serve_settings.py's table: its Kafka name, or for a per-listener setting
``listener.name.<listener>.<name>`` and, for a per-mechanism one,
``listener.name.<listener>.<mechanism>.<name>``. Kafka keys that only tune the JVM or its
network threads (``IGNORED``) are accepted and have no effect.
"""

import re

__all__ = ["read_properties", "parse_override", "check_keys", "PropertiesError", "IGNORED"]

# Kafka settings with no meaning for kqlite (the JVM's TLS providers, network threads, socket
# buffer sizes the kernel picks): accepted, so a Kafka server.properties reads, and unused.
IGNORED = {
    "num.network.threads": "kqlite serves every connection on one event loop",
    "num.recovery.threads.per.data.dir": "recovery runs per log as it opens",
    "socket.send.buffer.bytes": "the kernel's socket buffer sizes are used",
    "socket.receive.buffer.bytes": "the kernel's socket buffer sizes are used",
    "ssl.keymanager.algorithm": "OpenSSL reads the key store, not a JVM key manager",
    "ssl.trustmanager.algorithm": "OpenSSL checks certificates, not a JVM trust manager",
    "ssl.provider": "OpenSSL is the only provider",
    "ssl.secure.random.implementation": "OpenSSL's random generator is used",
}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LISTENER_KEY = re.compile(r"listener\.name\.(?P<listener>[^.]+)\.(?P<rest>.+)")


class PropertiesError(ValueError):
    """A property file or key ``kqlite serve`` cannot use; ``key`` names it (or None)."""

    def __init__(self, message, key=None):
        super().__init__(message)
        self.key = key


def _unescape(text):
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6] or ""):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text):
    pending = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continues = trailing % 2 == 1
        if continues:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continues:
            yield pending
            pending = None
    if pending is not None:
        yield pending


def _split(line):
    """(raw key, raw value): the key ends at the first unescaped '=', ':' or blank; blanks
    and then one '=' or ':' (and blanks after it) separate it from the value."""
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def read_properties(text):
    """``{key: value}`` of a properties file's text."""
    properties = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        properties[_unescape(key)] = _unescape(value)
    return properties


def parse_override(text):
    """``(key, value)`` of an ``--override key=value``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise PropertiesError(f"--override {text!r}: expected KEY=VALUE")
    return key.strip(), value


def check_keys(properties, settings, mechanisms):
    """Refuse any key that is not a known setting (see the module docstring).
    ``settings``: the rows (``kafka``, ``scope``); ``mechanisms``: SASL mechanism names."""
    known = {s.kafka: s for s in settings if s.kafka}
    lowered = {m.lower() for m in mechanisms}
    for key in properties:
        if key in known or key in IGNORED:
            continue
        match = _LISTENER_KEY.fullmatch(key)
        if match is not None:
            rest = match["rest"]
            row = known.get(rest)
            if row is not None and row.scope in ("listener", "listener or mechanism"):
                continue
            mechanism, _, name = rest.partition(".")
            row = known.get(name)
            if mechanism in lowered and row is not None and \
                    row.scope in ("mechanism", "listener or mechanism"):
                continue
        raise PropertiesError(f"unknown property {key!r}: kqlite serve has no such setting "
                              f"(docs/configuration.md lists them)", key)
