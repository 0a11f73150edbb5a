"""Every ACL a broker knows, indexed so that one check reads only the ACLs that can apply.

Theory of operation. The store (acl_store.py, or ZooKeeper in a cluster) holds a set of
entries per resource pattern; :class:`AclIndex` holds the same sets in memory, replaced
whole whenever the store says a pattern changed (:meth:`AclIndex.replace`), so nothing
here can disagree with the store for longer than a change notification takes. Nothing is
cached beyond that: every check is evaluated afresh from these sets.

A check names one concrete resource. The ACLs that can apply to it (Kafka's
``AclAuthorizer.matchingAcls``) are those of three kinds of pattern of the same resource
type: the LITERAL pattern of that exact name, the LITERAL wildcard ``*``, and every
PREFIXED pattern whose name starts the resource's name. Per resource type the index keeps
a dict of literal names and a dict of prefixes with the set of prefix lengths in use, so
:meth:`AclIndex.matching` costs two lookups plus one per distinct prefix length: it does
not grow with the number of ACLs, only with the number that apply.

For the checks, each entry is kept as a tuple ``(principal, host, operation, permission)``
whose principal is a ``KafkaPrincipal`` (what a request's context carries, so a check
compares tuples, never text); the entries as stored (``AclEntry``) are kept beside them
for listing.
"""

from ...protocol.acl import PatternType, ResourcePattern
from .bindings import WILDCARD_RESOURCE, AclBinding, AclBindingError, parse_principal

__all__ = ["AclIndex"]


class _TypeIndex:
    """The patterns of one resource type."""
    __slots__ = ("literal", "prefixed", "prefix_lengths")

    def __init__(self):
        self.literal = {}          # name -> tuple of entries
        self.prefixed = {}         # prefix -> tuple of entries
        self.prefix_lengths = ()   # the distinct lengths of the prefixes, ascending

    def set(self, pattern_type, name, entries):
        table = self.literal if pattern_type == PatternType.LITERAL else self.prefixed
        if entries:
            table[name] = tuple(c for c in map(_compiled, entries) if c is not None)
        else:
            table.pop(name, None)
        if pattern_type == PatternType.PREFIXED:
            self.prefix_lengths = tuple(sorted({len(p) for p in self.prefixed}))

    def matching(self, name):
        found = self.literal.get(name, ())
        wildcard = self.literal.get(WILDCARD_RESOURCE)
        if wildcard is not None and name != WILDCARD_RESOURCE:
            found = found + wildcard
        if self.prefix_lengths:
            prefixed = self.prefixed
            for length in self.prefix_lengths:
                if length > len(name):
                    break
                more = prefixed.get(name[:length])
                if more is not None:
                    found = found + more
        return found


def _compiled(entry):
    """An AclEntry as a check compares it; None for a principal that is no ``Type:name``
    (never stored by the ACL APIs; it can match no request)."""
    try:
        principal = parse_principal(entry.principal)
    except AclBindingError:
        return None
    return principal, entry.host, entry.operation, entry.permission


class AclIndex:
    """The ACLs of every resource pattern (see the module docstring)."""

    def __init__(self, acls=None):
        self._patterns = {}        # ResourcePattern -> frozenset of AclEntry
        self._types = {}           # ResourceType -> _TypeIndex
        for pattern, entries in (acls or {}).items():
            self.replace(pattern, entries)

    def __len__(self):
        return sum(len(entries) for entries in self._patterns.values())

    def replace(self, pattern, entries):
        """Make ``entries`` (AclEntry values; empty: none) the ACLs of ``pattern``; True
        when that changed them."""
        entries = frozenset(entries)
        if self._patterns.get(pattern, frozenset()) == entries:
            return False
        if entries:
            self._patterns[pattern] = entries
        else:
            self._patterns.pop(pattern, None)
        index = self._types.setdefault(pattern.resource_type, _TypeIndex())
        index.set(pattern.pattern_type, pattern.name, entries)
        return True

    def replace_all(self, acls):
        """Make ``acls`` (``{pattern: entries}``) every ACL there is; returns the patterns
        whose ACLs changed."""
        changed = [p for p in set(self._patterns) | set(acls)
                   if self.replace(p, acls.get(p, ()))]
        return changed

    def entries(self, pattern):
        """The ACLs of ``pattern`` (a frozenset, empty when there are none)."""
        return self._patterns.get(pattern, frozenset())

    def as_dict(self):
        return dict(self._patterns)

    def matching(self, resource_type, name):
        """The entries, as checks compare them, of every pattern that applies to the
        resource ``name`` of ``resource_type`` (a tuple; the same entry twice if two
        patterns hold it)."""
        index = self._types.get(resource_type)
        return index.matching(name) if index is not None else ()

    def of_type(self, resource_type):
        """``(pattern, entries as checks compare them)`` of every pattern of
        ``resource_type``."""
        index = self._types.get(resource_type)
        if index is None:
            return []
        return ([(ResourcePattern(resource_type, n, PatternType.LITERAL), e)
                 for n, e in index.literal.items()]
                + [(ResourcePattern(resource_type, n, PatternType.PREFIXED), e)
                   for n, e in index.prefixed.items()])


    def bindings(self, binding_filter):
        """Every AclBinding ``binding_filter`` matches, ordered by pattern then entry."""
        out = []
        for pattern in sorted(self._patterns):
            if not binding_filter.matches_pattern(pattern):
                continue
            out.extend(AclBinding(pattern, e) for e in sorted(self._patterns[pattern])
                       if binding_filter.matches_entry(e))
        return out
