"""The JSON Kafka stores one resource pattern's ACLs in, and the ACL file of a data dir.

Kafka keeps the ACLs of each pattern in one ZooKeeper znode (``AclEntry.toJsonCompatibleMap``,
``AclEntry.fromBytes``), version 1 only, the enumerations by their Pascal-case names::

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                          "operation":"Read","host":"*"}]}

A reader accepts the enumerations in any case and with or without underscores, as Kafka's
``SecurityUtils`` does. A single broker keeps every pattern's ACLs in one file of its data
dir (``.kqlite/acls.json``, acl_store.py) whose resources carry the same ``acls`` lists::

    {"version":1,"resources":[{"resourceType":"Topic","patternType":"LITERAL",
                               "name":"orders","acls":[...]}]}
"""

import json

from ...protocol.acl import AclOperation, AclPermissionType, PatternType, ResourcePattern, \
    ResourceType
from .bindings import AclBindingError, AclEntry, kafka_name, parse_name

__all__ = ["encode_acls", "decode_acls", "encode_acl_file", "decode_acl_file",
           "AclFormatError"]

_VERSION = 1   # WIRE: the only version of Kafka's ACL znode JSON


class AclFormatError(ValueError):
    """Bytes that are not Kafka's ACL JSON."""


def _dump(doc):
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _load(data, what):
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, TypeError) as exc:
        raise AclFormatError(f"{what}: not JSON") from exc
    if not isinstance(doc, dict):
        raise AclFormatError(f"{what}: not a JSON object")
    if doc.get("version") != _VERSION:
        raise AclFormatError(f"{what}: unknown version {doc.get('version')!r}")
    return doc


def _entry_doc(entry):
    return {"principal": entry.principal, "permissionType": kafka_name(entry.permission),
            "operation": kafka_name(entry.operation), "host": entry.host}


def _entries(items, what):
    if not isinstance(items, list):
        raise AclFormatError(f"{what}: 'acls' is not a list")
    try:
        return frozenset(AclEntry(str(e["principal"]), str(e["host"]),
                                  parse_name(AclOperation, e["operation"]),
                                  parse_name(AclPermissionType, e["permissionType"]))
                         for e in items)
    except (KeyError, TypeError, AclBindingError) as exc:
        raise AclFormatError(f"{what}: bad ACL entry ({exc})") from exc


def _sorted(entries):
    return sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))


def encode_acls(entries):
    """One pattern's ACLs as Kafka's znode JSON."""
    return _dump({"version": _VERSION, "acls": [_entry_doc(e) for e in _sorted(entries)]})


def decode_acls(data, what="ACL znode"):
    """The frozenset of AclEntry a Kafka ACL znode holds."""
    return _entries(_load(data, what).get("acls", []), what)


def encode_acl_file(acls):
    """``{ResourcePattern: entries}`` as the data dir's ACL file."""
    resources = [{"resourceType": kafka_name(p.resource_type), "patternType": p.pattern_type.name,
                  "name": p.name, "acls": [_entry_doc(e) for e in _sorted(entries)]}
                 for p, entries in sorted(acls.items()) if entries]
    return json.dumps({"version": _VERSION, "resources": resources}, indent=1).encode("utf-8")


def decode_acl_file(data, what="ACL file"):
    """``{ResourcePattern: frozenset of AclEntry}`` from the data dir's ACL file."""
    doc = _load(data, what)
    out = {}
    try:
        for r in doc.get("resources", []):
            pattern = ResourcePattern(parse_name(ResourceType, r["resourceType"]), str(r["name"]),
                                      parse_name(PatternType, r["patternType"]))
            out[pattern] = out.get(pattern, frozenset()) | _entries(r.get("acls", []), what)
    except (KeyError, TypeError, AclBindingError) as exc:
        raise AclFormatError(f"{what}: bad resource ({exc})") from exc
    return out
