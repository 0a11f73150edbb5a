"""The ACL authorizer: Kafka's ``AclAuthorizer``, over ACLs kept in a store.

Theory of operation. A broker configured with ``authorizer.class.name`` set to Kafka's
``kafka.security.authorizer.AclAuthorizer`` (or kqlite's name for it, :data:`CLASS_NAMES`)
holds one :class:`AclAuthorizer`. It answers every check from an index of the ACLs
(acl_index.py) that follows the store (acl_store.py: the data dir's file on a single
broker; ZooKeeper's ``/kafka-acl`` znodes in a cluster, whose change notifications every
broker follows); the ACL APIs write through it to the store.

One check, ``authorize(context, operation, resource)``, is Kafka's ``authorizeAction``:

    1. the principal is one of ``super.users``                    -> allowed
    2. no ACL applies to the resource (for anyone): the LITERAL
       name, the LITERAL ``*``, the PREFIXED patterns starting it -> ``allow.everyone.if.no.acl.found``
    3. an applicable DENY matches                                 -> denied
    4. an applicable ALLOW matches, with implication              -> allowed
    5. otherwise                                                  -> denied

An ACL matches when its principal is the request's (type and name) or the wildcard
``User:*`` (which Kafka's ``matchingAclExists`` lets match a principal of any type), its
host is the client's address or ``*``, and its operation is the one asked or ALL. Implication applies
to ALLOW only (Kafka's ``allowAclExists``): DESCRIBE is granted by DESCRIBE, READ, WRITE,
DELETE or ALTER; DESCRIBE_CONFIGS by DESCRIBE_CONFIGS or ALTER_CONFIGS. So a DENY READ
leaves DESCRIBE allowed.

``authorize_by_resource_type(context, operation, type)`` (only an idempotent InitProducerId
asks it: WRITE on some topic) is Kafka's ``authorizeByResourceType``: a super user is
allowed; a matching DENY on the LITERAL ``*`` denies; ``allow.everyone.if.no.acl.found``
allows; then an ALLOW (no implication) on a literal name or prefix allows unless a DENY
cancels it (the same literal name, or a DENY prefix that starts the allowed name or
prefix); the literal ``*`` is never cancelled that way.

Every refused check the request asked for itself goes to the audit log (audit.py), at most
so many lines a second; probes and filters (``log_if_denied=False``) never do.

The ACL APIs (Kafka's ``createAcls``, ``deleteAcls``, ``acls``): :meth:`create_acls`
stores valid bindings (bindings.py: ``binding_problem``), grouped by pattern, one
read-modify-write each; :meth:`delete_acls` applies each filter to the patterns this
broker knows plus the ones a filter names exactly (even if this broker has not heard of
them yet), as Kafka's does; :meth:`acls` lists what the index holds (it may lag another
broker's write by a notification).
"""

import logging

from ...protocol.acl import AclOperation as Op, AclPermissionType, PatternType
from ...protocol.security import USER_TYPE, KafkaPrincipal
from .acl_index import AclIndex
from .audit import AuditLog
from .authorizer import Authorizer
from .bindings import (WILDCARD_HOST, WILDCARD_RESOURCE, AclBinding, binding_problem,
                       parse_principal)

__all__ = ["AclAuthorizer", "CLASS_NAMES", "KAFKA_CLASS_NAME", "KQLITE_CLASS_NAME",
           "parse_super_users"]

log = logging.getLogger("kqlite.authorizer")

KAFKA_CLASS_NAME = "kafka.security.authorizer.AclAuthorizer"   # Kafka's authorizer.class.name
KQLITE_CLASS_NAME = "kqlite.AclAuthorizer"
CLASS_NAMES = (KAFKA_CLASS_NAME, KQLITE_CLASS_NAME)

_WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_DEBUG = logging.DEBUG

# Kafka's allowAclExists: the ALLOW operations that grant each operation.
_GRANTED_BY = {op: frozenset((op, Op.ALL)) for op in Op}
_GRANTED_BY[Op.DESCRIBE] = frozenset((Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL))
_GRANTED_BY[Op.DESCRIBE_CONFIGS] = frozenset((Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL))


def parse_super_users(text):
    """Kafka's ``super.users``: principals separated by ``;`` (blanks ignored)."""
    return frozenset(parse_principal(p.strip()) for p in (text or "").split(";") if p.strip())


class AclAuthorizer(Authorizer):
    """Kafka's AclAuthorizer (see the module docstring). ``super_users``: principals
    (KafkaPrincipal) allowed everything; ``store``: the AclStore, or None to take the
    broker's (``Broker.acl_store``) at :meth:`start`."""

    manages_acls = True

    def __init__(self, *, super_users=(), allow_everyone_if_no_acl_found=False, store=None,
                 audit=None):
        self.super_users = frozenset(KafkaPrincipal(*p) for p in super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self.store = store
        self.audit = audit or AuditLog()
        self.index = AclIndex()

    # -- Lifecycle ---------------------------------------------------------------------------

    async def start(self, broker):
        if self.store is None:
            self.store = broker.acl_store
        acls = await self.store.start(self._changed)
        self.index.replace_all(acls)
        log.info("ACL authorizer: %d ACLs on %d resource patterns, %d super users",
                 len(self.index), len(acls), len(self.super_users))

    async def stop(self):
        if self.store is not None:
            await self.store.stop()

    def _changed(self, changes):
        for pattern, entries in changes.items():
            if self.index.replace(pattern, entries):
                log.info("ACLs of %s %s %r now: %s", pattern.resource_type.name,
                         pattern.pattern_type.name, pattern.name,
                         ", ".join(sorted(map(_entry_text, entries))) or "none")

    # -- Checks ------------------------------------------------------------------------------

    def authorize(self, context, operation, resource, *, log_if_denied=True):
        principal = context.principal
        if principal in self.super_users:
            return True
        applicable = self.index.matching(resource.resource_type, resource.name)
        if not applicable:
            allowed = self.allow_everyone_if_no_acl_found
        else:
            allowed = _allowed(applicable, principal, context.client_host, operation)
        if not allowed:
            if log_if_denied:
                self.audit.denied(context, operation, resource.resource_type,
                                  PatternType.LITERAL.name, resource.name)
        elif self.audit.logger.isEnabledFor(_DEBUG):
            self.audit.allowed(context, operation, resource.resource_type,
                               PatternType.LITERAL.name, resource.name)
        return allowed

    def authorize_by_resource_type(self, context, operation, resource_type):
        principal = context.principal
        if principal in self.super_users:
            return True
        allowed = self._by_resource_type(principal, context.client_host, operation,
                                         resource_type)
        if not allowed:
            self.audit.denied(context, operation, resource_type, PatternType.UNKNOWN.name,
                              "NONE")
        return allowed

    def _by_resource_type(self, principal, host, operation, resource_type):
        """Kafka's ``authorizeByResourceType`` after the super-user check (module
        docstring)."""
        names = {(p, k): set() for p in (_ALLOW, _DENY)
                 for k in (PatternType.LITERAL, PatternType.PREFIXED)}
        for pattern, entries in self.index.of_type(resource_type):
            for e_principal, e_host, e_operation, e_permission in entries:
                if e_principal in (principal, _WILDCARD_PRINCIPAL) and \
                        e_host in (host, WILDCARD_HOST) and e_operation in (operation, Op.ALL):
                    names[(e_permission, pattern.pattern_type)].add(pattern.name)
        deny_literals = names[(_DENY, PatternType.LITERAL)]
        deny_prefixes = names[(_DENY, PatternType.PREFIXED)]
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True

        def cancelled(name):
            return any(name[:n] in deny_prefixes for n in range(len(name) + 1))
        return (any(not cancelled(p) for p in names[(_ALLOW, PatternType.PREFIXED)])
                or any(n == WILDCARD_RESOURCE or (n not in deny_literals and not cancelled(n))
                       for n in names[(_ALLOW, PatternType.LITERAL)]))

    # -- The ACL APIs ------------------------------------------------------------------------

    def acls(self, binding_filter):
        """The bindings ``binding_filter`` matches, as this broker knows them now."""
        return self.index.bindings(binding_filter)

    async def create_acls(self, bindings):
        """Store ``bindings``; one result per binding, in order: None when stored, else
        ``(error name, message)``."""
        results = [binding_problem(b) for b in bindings]
        wanted = {}
        for i, (binding, problem) in enumerate(zip(bindings, results)):
            if problem is None:
                wanted.setdefault(binding.pattern, []).append(i)

        def adding(indexes):
            new = frozenset(bindings[i].entry for i in indexes)
            return lambda current: current | new
        if wanted:
            stored = await self.store.update({p: adding(ix) for p, ix in wanted.items()})
            for pattern, indexes in wanted.items():
                outcome = stored[pattern]
                if isinstance(outcome, BaseException):
                    for i in indexes:
                        results[i] = ("UNKNOWN_SERVER_ERROR", str(outcome))
                else:
                    self._changed({pattern: outcome})
        return results

    async def delete_acls(self, filters):
        """Remove what each of ``filters`` matches; per filter, the list of
        ``(binding, None or (error name, message))`` it removed (a binding two filters
        match is reported by the first)."""
        patterns = set(self.index.as_dict())
        for f in filters:
            patterns.update(f.exact_patterns())
        matching = {p: [i for i, f in enumerate(filters) if f.matches_pattern(p)]
                    for p in patterns}
        matching = {p: ix for p, ix in matching.items() if ix}
        removed = {}        # AclBinding -> index of the first filter that matched it

        def removing(pattern, indexes):
            def change(current):
                gone = set()
                for entry in current:
                    for i in indexes:
                        if filters[i].matches_entry(entry):
                            removed.setdefault(AclBinding(pattern, entry), i)
                            gone.add(entry)
                            break
                return current - gone
            return change
        failures = {}
        if matching:
            stored = await self.store.update({p: removing(p, ix) for p, ix in matching.items()})
            for pattern, outcome in stored.items():
                if isinstance(outcome, BaseException):
                    failures[pattern] = ("UNKNOWN_SERVER_ERROR", str(outcome))
                else:
                    self._changed({pattern: outcome})
        results = [[] for _ in filters]
        for binding, i in sorted(removed.items()):
            results[i].append((binding, failures.get(binding.pattern)))
        return results


def _allowed(applicable, principal, host, operation):
    """Steps 3 to 5 of the module docstring over the applicable ACLs (the hot path: every
    request asks)."""
    granted_by = _GRANTED_BY[operation]
    allowed = False
    for e_principal, e_host, e_operation, e_permission in applicable:
        if (e_principal != principal and e_principal != _WILDCARD_PRINCIPAL) or \
                (e_host != host and e_host != WILDCARD_HOST):
            continue
        if e_permission is _DENY:
            if e_operation == operation or e_operation is Op.ALL:
                return False
        elif not allowed and e_operation in granted_by:
            allowed = True
    return allowed


def _entry_text(entry):
    return f"{entry.principal} {entry.permission.name} {entry.operation.name} from {entry.host}"

