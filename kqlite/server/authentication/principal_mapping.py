"""The principal of a TLS client certificate: its subject as an RFC 2253 distinguished name,
mapped by ``ssl.principal.mapping.rules`` (KIP-371, Kafka's ``SslPrincipalMapper``).

Theory of operation. Kafka takes the certificate's subject as ``X500Principal.getName()``
prints it (RFC 2253: the most specific name first, ``CN=alice,OU=eng,O=Acme,C=US``,
with ``\\,`` escapes) and applies the rules in order:

- ``DEFAULT`` keeps the DN as it is;
- ``RULE:<regex>/<replacement>/[L|U]`` applies when the regex matches the **whole** DN; the
  replacement may use ``$1``...; ``L`` and ``U`` fold the result's case.

The first rule that applies gives the principal name (``User:<name>``); no rule applying
refuses the connection (Kafka's ``NoMatchingRule``). A rules value that does not parse is a
start-up error naming the property.

The DN is built from Python's decoded certificate (``SSLSocket.getpeercert()``). The
attributes Java prints by keyword are printed here the same; others (an e-mail address)
are printed ``OID=value``, where Java prints ``OID=#<DER hex>``: rules should match the
keyword attributes (CN, OU, O, L, ST, C, STREET, DC, UID).
"""

import re

__all__ = ["PrincipalMapper", "NoMatchingRule", "distinguished_name", "DEFAULT_RULES"]

DEFAULT_RULES = "DEFAULT"

# Java's RFC 2253 keywords for the attribute names Python's ssl module gives.
_KEYWORDS = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
             "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
             "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}
_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5",
         "title": "2.5.4.12", "surname": "2.5.4.4", "givenName": "2.5.4.42",
         "initials": "2.5.4.43", "generationQualifier": "2.5.4.44",
         "dnQualifier": "2.5.4.46", "pseudonym": "2.5.4.65", "postalCode": "2.5.4.17"}

# One rule: DEFAULT, or RULE:pattern/replacement/flags (Kafka's RULE_PATTERN).
_RULE = re.compile(r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
                   r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))\s*(?:,|$)")


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` rule applies to the certificate's DN."""


def _escape(value):
    """An attribute value escaped as RFC 2253 section 2.4 (and Java) does."""
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def distinguished_name(subject):
    """The RFC 2253 DN of a subject as ``getpeercert()['subject']`` gives it (a tuple of
    RDNs, each a tuple of (attribute, value) pairs, least specific first)."""
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for name, value in rdn:
            key = _KEYWORDS.get(name) or _OIDS.get(name, name)
            parts.append(f"{key}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


class _Rule:
    def __init__(self, pattern, replacement, case):
        self.pattern = re.compile(pattern)
        # Java's replacement syntax: $n is a group, \x a literal x.
        self.replacement = re.sub(r"\\(.)|\$(\d+)",
                                  lambda m: m.group(1).replace("\\", "\\\\") if m.group(1)
                                  is not None else f"\\g<{m.group(2)}>", replacement)
        self.case = case

    def apply(self, dn):
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed; :meth:`name` maps a DN."""

    def __init__(self, rules=DEFAULT_RULES):
        self.rules = []
        text = rules.strip()
        pos = 0
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule at "
                                 f"{text[pos:]!r}")
            if match["default"]:
                self.rules.append(None)
            else:
                try:
                    self.rules.append(_Rule(match["pattern"], match["replacement"],
                                            match["case"]))
                except re.error as exc:
                    raise ValueError(f"ssl.principal.mapping.rules: invalid pattern "
                                     f"{match['pattern']!r}: {exc}") from None
            pos = match.end()
        if not self.rules:
            self.rules.append(None)

    def name(self, dn):
        """The principal name of ``dn``; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            if rule is None:
                return dn
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no rule in ssl.principal.mapping.rules applies to {dn!r}")
