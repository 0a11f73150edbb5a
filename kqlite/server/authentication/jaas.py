"""``sasl.jaas.config`` values: a JAAS login module entry, as Kafka's ``JaasConfig`` reads it.

A value is ``<login module class> <flag> [<option>=<value>]* ;`` where a value is a bare word
or a double-quoted string (backslash escapes the next character). Kafka takes exactly one
entry per property; the flag is ``required``, ``requisite``, ``sufficient`` or
``optional``. What the options mean is the mechanism's business: PLAIN's users are its
``user_<name>`` options, and ``username``/``password`` are the broker's own credentials
for the connections it makes to other brokers.
"""

import re
from typing import NamedTuple

__all__ = ["JaasEntry", "parse_jaas", "JaasError", "LOGIN_MODULES"]

# The login module of each mechanism (Kafka's class names).
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<word>[^\s=;"]+)|"(?P<quoted>(?:\\.|[^"\\])*)"|(?P<sym>[=;]))')


class JaasError(ValueError):
    """A ``sasl.jaas.config`` value Kafka would refuse."""


class JaasEntry(NamedTuple):
    login_module: str
    flag: str
    options: dict


def _tokens(text):
    pos, out = 0, []
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise JaasError(f"unexpected text at {text[pos:pos + 20]!r}")
        if match["quoted"] is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"])))
        elif match["word"] is not None:
            out.append(("value", match["word"]))
        else:
            out.append((match["sym"], match["sym"]))
        pos = match.end()
    return out


def parse_jaas(text):
    """The one entry of a ``sasl.jaas.config`` value; JaasError otherwise."""
    tokens = _tokens(text)
    entries = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "value" or tokens[i + 1][0] != "value":
            raise JaasError("expected a login module and a flag")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _FLAGS:
            raise JaasError(f"invalid control flag {tokens[i + 1][1]!r}")
        i += 2
        options = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "value" or tokens[i + 1][0] != "=" \
                    or tokens[i + 2][0] != "value":
                raise JaasError("expected option=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError("the entry does not end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag, options))
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, "
                        f"should be 1 module")
    return entries[0]
