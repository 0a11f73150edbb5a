"""Kafka's AclAuthorizer rules, one test per branch, on the authorizer itself over a store
held in memory (no broker): super users, allow.everyone.if.no.acl.found, deny winning,
implication for ALLOW only, LITERAL, the literal wildcard and PREFIXED patterns, hosts,
principal types; authorize_by_resource_type; the audit log; the ACL APIs' create, delete
and filters (kafka-security.md, sections 4.1, 4.2 and 4.7)."""

import asyncio
import logging

import pytest

from kqlite.protocol.acl import (CLUSTER, AclOperation as Op, AclPermissionType as Perm,
                                 PatternType as P, Resource, ResourcePattern, ResourceType as R)
from kqlite.protocol.security import KafkaPrincipal, SecurityProtocol
from kqlite.server.authorization import AclAuthorizer, parse_super_users
from kqlite.server.authorization.acl_store import AclStore
from kqlite.server.authorization.audit import AuditLog, LineBudget
from kqlite.server.authorization.bindings import (AclBinding, AclBindingFilter, AclEntry,
                                                  binding_problem)
from kqlite.server.request_context import RequestContext

ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


class MemoryStore(AclStore):
    """ACLs in a dict; ``changed_elsewhere`` plays another broker's write."""

    def __init__(self, acls=None):
        self.acls = dict(acls or {})
        self.on_change = None
        self.updates = 0

    async def start(self, on_change):
        self.on_change = on_change
        return dict(self.acls)

    async def update(self, changes):
        self.updates += 1
        out = {}
        for pattern, change in changes.items():
            entries = frozenset(change(self.acls.get(pattern, frozenset())))
            if entries:
                self.acls[pattern] = entries
            else:
                self.acls.pop(pattern, None)
            out[pattern] = entries
        return out

    def changed_elsewhere(self, pattern, entries):
        self.acls[pattern] = frozenset(entries)
        self.on_change({pattern: frozenset(entries)})


def context(principal=ALICE, host=HOST, api_key=0):
    kind, name = principal.split(":", 1)
    return RequestContext(KafkaPrincipal(kind, name), "PLAINTEXT", SecurityProtocol.PLAINTEXT,
                          host, 5555, "test-client", api_key, 9, 1)


def acl(principal=ALICE, operation=Op.READ, permission=Perm.ALLOW, host="*"):
    return AclEntry(principal, host, operation, permission)


def literal(name, resource_type=R.TOPIC):
    return ResourcePattern(resource_type, name, P.LITERAL)


def prefixed(name, resource_type=R.TOPIC):
    return ResourcePattern(resource_type, name, P.PREFIXED)


def authorizer(acls=None, **options):
    a = AclAuthorizer(store=MemoryStore(acls), **options)
    asyncio.run(a.start(None))
    return a


def allowed(a, operation, name, principal=ALICE, host=HOST, resource_type=R.TOPIC):
    return a.authorize(context(principal, host), operation, Resource(resource_type, name))


# -- One check ------------------------------------------------------------------------------

def test_a_super_user_is_allowed_everything_even_against_a_deny():
    a = authorizer({literal("t"): {acl(operation=Op.ALL, permission=Perm.DENY)}},
                   super_users=parse_super_users(" User:alice ; User:broker"))
    assert allowed(a, Op.DELETE, "t")
    assert a.authorize(context(), Op.CLUSTER_ACTION, CLUSTER)
    assert not allowed(a, Op.READ, "t", principal=BOB)


@pytest.mark.parametrize("allow_everyone", [False, True])
def test_no_acl_for_anyone_answers_allow_everyone_if_no_acl_found(allow_everyone):
    a = authorizer({literal("other"): {acl(BOB)}}, allow_everyone_if_no_acl_found=allow_everyone)
    assert allowed(a, Op.WRITE, "t") is allow_everyone


def test_one_acl_for_anyone_closes_the_resource_to_everyone_else():
    a = authorizer({literal("t"): {acl(BOB)}}, allow_everyone_if_no_acl_found=True)
    assert allowed(a, Op.READ, "t", principal=BOB)
    assert not allowed(a, Op.READ, "t")
    assert allowed(a, Op.READ, "open")


def test_deny_wins_over_allow():
    a = authorizer({literal("t"): {acl(operation=Op.ALL), acl(operation=Op.WRITE,
                                                               permission=Perm.DENY)}})
    assert allowed(a, Op.READ, "t")
    assert not allowed(a, Op.WRITE, "t")


def test_a_deny_of_all_denies_every_operation():
    a = authorizer({literal("t"): {acl(operation=Op.ALL), acl(operation=Op.ALL,
                                                               permission=Perm.DENY)}})
    assert not any(allowed(a, op, "t") for op in (Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS))


@pytest.mark.parametrize("granting", [Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER,
                                      Op.ALL])
def test_describe_is_implied_by_read_write_delete_alter(granting):
    a = authorizer({literal("t"): {acl(operation=granting)}})
    assert allowed(a, Op.DESCRIBE, "t")


@pytest.mark.parametrize("granting", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_describe_is_not_implied_by_the_others(granting):
    a = authorizer({literal("t"): {acl(operation=granting)}})
    assert not allowed(a, Op.DESCRIBE, "t")


def test_describe_configs_is_implied_by_alter_configs_and_nothing_implies_upwards():
    a = authorizer({literal("t"): {acl(operation=Op.ALTER_CONFIGS)},
                    literal("u"): {acl(operation=Op.DESCRIBE)}})
    assert allowed(a, Op.DESCRIBE_CONFIGS, "t")
    assert not allowed(a, Op.READ, "u")
    assert not allowed(a, Op.DESCRIBE_CONFIGS, "u")


def test_implication_applies_to_allow_only_a_deny_read_leaves_describe():
    a = authorizer({literal("t"): {acl(operation=Op.ALL),
                                   acl(operation=Op.READ, permission=Perm.DENY)}})
    assert not allowed(a, Op.READ, "t")
    assert allowed(a, Op.DESCRIBE, "t")


def test_the_literal_wildcard_applies_to_every_name_of_its_type_only():
    a = authorizer({literal("*"): {acl(operation=Op.WRITE)}})
    assert allowed(a, Op.WRITE, "anything")
    assert not allowed(a, Op.READ, "anything")
    assert not allowed(a, Op.READ, "g", resource_type=R.GROUP)


def test_a_deny_on_the_wildcard_beats_an_allow_on_the_name():
    a = authorizer({literal("t"): {acl(operation=Op.READ)},
                    literal("*"): {acl(operation=Op.READ, permission=Perm.DENY)}})
    assert not allowed(a, Op.READ, "t")


def test_a_prefixed_pattern_applies_to_every_name_it_starts_and_the_name_itself():
    a = authorizer({prefixed("orders"): {acl(operation=Op.READ)},
                    prefixed("orders-eu"): {acl(operation=Op.READ, permission=Perm.DENY)}})
    assert allowed(a, Op.READ, "orders")
    assert allowed(a, Op.READ, "orders-us")
    assert not allowed(a, Op.READ, "orders-eu-1")
    assert not allowed(a, Op.READ, "order")
    assert not allowed(a, Op.READ, "x-orders")


def test_a_literal_name_is_not_a_prefix():
    a = authorizer({literal("orders"): {acl(operation=Op.READ)}})
    assert not allowed(a, Op.READ, "orders-1")


def test_hosts_match_exactly_or_by_wildcard():
    a = authorizer({literal("t"): {acl(operation=Op.READ, host=HOST)},
                    literal("u"): {acl(operation=Op.READ),
                                   acl(operation=Op.READ, permission=Perm.DENY,
                                       host=OTHER_HOST)}})
    assert allowed(a, Op.READ, "t", host=HOST)
    assert not allowed(a, Op.READ, "t", host=OTHER_HOST)
    assert allowed(a, Op.READ, "u", host=HOST)
    assert not allowed(a, Op.READ, "u", host=OTHER_HOST)


def test_principals_match_by_type_and_name_and_the_wildcard_matches_every_type():
    a = authorizer({literal("t"): {acl("User:*", Op.READ)},
                    literal("u"): {acl("User:svc", Op.READ)}})
    assert allowed(a, Op.READ, "t", principal="User:anyone")
    # Kafka's matchingAclExists compares the ACL's principal with the wildcard only.
    assert allowed(a, Op.READ, "t", principal="Group:ops")
    assert allowed(a, Op.READ, "u", principal="User:svc")
    assert not allowed(a, Op.READ, "u", principal="Group:svc")


def test_acls_of_another_principal_do_not_apply():
    a = authorizer({literal("t"): {acl(BOB, Op.ALL)}})
    assert not allowed(a, Op.READ, "t")


def test_a_change_from_the_store_applies_to_the_next_check():
    store = MemoryStore()
    a = AclAuthorizer(store=store)
    asyncio.run(a.start(None))
    assert not allowed(a, Op.READ, "t")
    store.changed_elsewhere(literal("t"), {acl(operation=Op.READ)})
    assert allowed(a, Op.READ, "t")
    store.changed_elsewhere(literal("t"), set())
    assert not allowed(a, Op.READ, "t")


# -- authorize_by_resource_type (an idempotent InitProducerId: WRITE on some topic) ---------

def by_type(a, principal=ALICE, host=HOST):
    return a.authorize_by_resource_type(context(principal, host), Op.WRITE, R.TOPIC)


def test_by_type_a_super_user_is_allowed():
    assert by_type(authorizer(super_users=parse_super_users("User:alice")))


def test_by_type_a_deny_on_the_literal_wildcard_denies_even_allow_everyone():
    a = authorizer({literal("*"): {acl(operation=Op.WRITE, permission=Perm.DENY)},
                    literal("t"): {acl(operation=Op.WRITE)}},
                   allow_everyone_if_no_acl_found=True)
    assert not by_type(a)


def test_by_type_allow_everyone_allows():
    assert by_type(authorizer({literal("t"): {acl(operation=Op.WRITE, permission=Perm.DENY)}},
                              allow_everyone_if_no_acl_found=True))


def test_by_type_without_any_deny_an_allow_anywhere_allows():
    assert by_type(authorizer({prefixed("p"): {acl(operation=Op.WRITE)}}))
    assert by_type(authorizer({literal("t"): {acl(operation=Op.ALL)}}))
    assert not by_type(authorizer({literal("t"): {acl(operation=Op.READ)}}))
    assert not by_type(authorizer({literal("t"): {acl(BOB, Op.WRITE)}}))
    assert not by_type(authorizer())


def test_by_type_a_literal_allow_cancelled_by_its_own_deny_or_a_dominating_prefix():
    deny = acl(operation=Op.WRITE, permission=Perm.DENY)
    allow = acl(operation=Op.WRITE)
    assert not by_type(authorizer({literal("t"): {allow, deny}}))
    assert not by_type(authorizer({literal("team-a"): {allow}, prefixed("team"): {deny}}))
    assert by_type(authorizer({literal("team-a"): {allow}, prefixed("other"): {deny}}))


def test_by_type_a_prefix_allow_cancelled_only_by_a_dominating_deny_prefix():
    deny = acl(operation=Op.WRITE, permission=Perm.DENY)
    allow = acl(operation=Op.WRITE)
    assert not by_type(authorizer({prefixed("team-a"): {allow}, prefixed("team"): {deny}}))
    assert by_type(authorizer({prefixed("team"): {allow}, prefixed("team-a"): {deny}}))
    # A literal deny does not cancel a prefix.
    assert by_type(authorizer({prefixed("team"): {allow}, literal("team"): {deny}}))


def test_by_type_the_literal_wildcard_allow_is_never_cancelled_by_a_name():
    assert by_type(authorizer({literal("*"): {acl(operation=Op.WRITE)},
                               prefixed("a"): {acl(operation=Op.WRITE,
                                                   permission=Perm.DENY)}}))


# -- The audit log --------------------------------------------------------------------------

def test_refusals_asked_for_are_audited_and_probes_are_not(caplog):
    a = authorizer({literal("t"): {acl(BOB)}})
    with caplog.at_level(logging.INFO, logger="kqlite.authorizer"):
        caplog.clear()
        a.authorize(context(), Op.READ, Resource.topic("t"))
        a.authorize(context(), Op.READ, Resource.topic("t"), log_if_denied=False)
        a.authorized_operations(context(), Resource.topic("t"))
    lines = [r.getMessage() for r in caplog.records if r.name == "kqlite.authorizer"]
    assert lines == ["Principal = User:alice is Denied operation = Read from host = 10.0.0.1 "
                     "on resource = Topic:LITERAL:t for request = Produce "
                     "(client id 'test-client')"]


def test_the_audit_log_is_rate_limited_and_says_how_many_it_left_out(caplog):
    now = [100.0]
    audit = AuditLog(3, clock=lambda: now[0])
    a = AclAuthorizer(store=MemoryStore(), audit=audit)
    asyncio.run(a.start(None))
    with caplog.at_level(logging.INFO, logger="kqlite.authorizer"):
        caplog.clear()
        for _ in range(10):
            a.authorize(context(), Op.READ, Resource.topic("t"))
        now[0] += 1.0
        a.authorize(context(), Op.READ, Resource.topic("t"))
    lines = [r.getMessage() for r in caplog.records if r.name == "kqlite.authorizer"]
    assert len(lines) == 5
    assert lines[4] == "7 more refusals were not logged (more than 3 a second)"


def test_the_line_budget_table():
    budget = LineBudget(2)
    assert [budget.take(t) for t in (5.0, 5.1, 5.2, 5.9, 6.0, 6.5, 6.6)] == [
        (True, 0), (True, 0), (False, 0), (False, 0), (True, 2), (True, 0), (False, 0)]


# -- The ACL APIs' side ---------------------------------------------------------------------

def test_create_stores_valid_bindings_grouped_by_pattern_and_refuses_the_others():
    store = MemoryStore()
    a = AclAuthorizer(store=store)
    asyncio.run(a.start(None))
    good = [AclBinding(literal("t"), acl()), AclBinding(literal("t"), acl(BOB)),
            AclBinding(prefixed("p"), acl(operation=Op.WRITE))]
    bad = [AclBinding(literal("kafka", R.CLUSTER), acl()),
           AclBinding(literal(""), acl()),
           AclBinding(literal("a/b"), acl()),
           AclBinding(literal("t"), acl("alice"))]
    results = asyncio.run(a.create_acls(good + bad))
    assert results == [None, None, None,
                       ("INVALID_REQUEST",
                        "The only valid name for the CLUSTER resource is kafka-cluster"),
                       ("INVALID_REQUEST", "Invalid empty resource name"),
                       ("INVALID_REQUEST", "Failed to create ACL"),
                       ("UNKNOWN_SERVER_ERROR", None)]
    assert store.updates == 1
    assert store.acls == {literal("t"): {acl(), acl(BOB)}, prefixed("p"): {acl(operation=Op.WRITE)}}
    assert allowed(a, Op.WRITE, "pq")


def test_a_binding_with_any_is_not_concrete():
    assert binding_problem(AclBinding(literal("t"), acl(operation=Op.ANY))) == \
        ("UNKNOWN_SERVER_ERROR", None)
    assert binding_problem(AclBinding(ResourcePattern(R.TOPIC, "t", P.MATCH), acl())) == \
        ("UNKNOWN_SERVER_ERROR", None)


def test_delete_reports_each_binding_under_the_first_filter_that_matched_it():
    store = MemoryStore({literal("t"): {acl(), acl(BOB)}, prefixed("t"): {acl()},
                         literal("*"): {acl(BOB, Op.WRITE)}})
    a = AclAuthorizer(store=store)
    asyncio.run(a.start(None))
    alice_only = AclBindingFilter(principal=ALICE)
    everything_on_t = AclBindingFilter(R.TOPIC, "t", P.MATCH)
    first, second = asyncio.run(a.delete_acls([alice_only, everything_on_t]))
    assert [b for b, _ in first] == [AclBinding(literal("t"), acl()),
                                     AclBinding(prefixed("t"), acl())]
    assert [b for b, _ in second] == [AclBinding(literal("*"), acl(BOB, Op.WRITE)),
                                      AclBinding(literal("t"), acl(BOB))]
    assert store.acls == {}
    assert len(a.index) == 0


def test_delete_by_an_exact_filter_reaches_acls_this_broker_has_not_heard_of():
    store = MemoryStore()
    a = AclAuthorizer(store=store)
    asyncio.run(a.start(None))
    store.acls[literal("t")] = frozenset({acl()})          # written elsewhere, not notified
    (removed,) = asyncio.run(a.delete_acls([AclBindingFilter(R.TOPIC, "t", P.ANY)]))
    assert [b for b, _ in removed] == [AclBinding(literal("t"), acl())]
    assert store.acls == {}


@pytest.mark.parametrize("binding_filter, expected", [
    (AclBindingFilter(), {"lit-t", "lit-*", "pre-te", "grp-t"}),
    (AclBindingFilter(R.TOPIC), {"lit-t", "lit-*", "pre-te"}),
    (AclBindingFilter(R.TOPIC, "t", P.ANY), {"lit-t"}),
    (AclBindingFilter(R.TOPIC, "te", P.ANY), {"pre-te"}),
    (AclBindingFilter(R.TOPIC, "test", P.MATCH), {"lit-*", "pre-te"}),
    (AclBindingFilter(R.TOPIC, "t", P.MATCH), {"lit-t", "lit-*"}),
    (AclBindingFilter(R.TOPIC, None, P.PREFIXED), {"pre-te"}),
    (AclBindingFilter(R.TOPIC, "t", P.LITERAL), {"lit-t"}),
    (AclBindingFilter(principal="User:*"), {"lit-*"}),
    (AclBindingFilter(host="10.0.0.1"), {"grp-t"}),
    (AclBindingFilter(operation=Op.WRITE), {"pre-te"}),
    (AclBindingFilter(permission=Perm.DENY), {"grp-t"}),
])
def test_filters_match_as_kafkas(binding_filter, expected):
    acls = {"lit-t": AclBinding(literal("t"), acl()),
            "lit-*": AclBinding(literal("*"), acl("User:*")),
            "pre-te": AclBinding(prefixed("te"), acl(operation=Op.WRITE)),
            "grp-t": AclBinding(literal("t", R.GROUP), acl(permission=Perm.DENY, host=HOST))}
    assert {k for k, b in acls.items() if binding_filter.matches(b)} == expected
