"""The handler tables and the versions advertised in ApiVersions agree, for the single
broker (``SUPPORTED`` with ``kqlite.server.handlers.HANDLERS``) and for the cluster broker
(``CLUSTER_SUPPORTED`` with the cluster's handlers laid over them, as ``Broker`` merges
``extra_handlers``): every advertised API has a handler, and every handler serves an
advertised API or one kqlite decodes only to refuse (SASL, ACLs, transactions:
schema/refused.py), which a client that sends it anyway gets Kafka's error for.

An advertised API without a handler would close the connection of every client that
believed ApiVersions; a handler for an API neither advertised nor deliberately refused is
half of an API added (or removed): well-behaved clients never call it.
"""

import inspect

import pytest

from kqlite.cluster.handlers import HANDLERS as CLUSTER_HANDLERS
from kqlite.protocol import API_NAMES, CLUSTER_SUPPORTED, SUPPORTED, ApiKey
from kqlite.protocol.schema import APIS, CLUSTER_ONLY
from kqlite.server.handlers import HANDLERS

TABLES = {
    "single broker": (SUPPORTED, HANDLERS),
    "cluster broker": (CLUSTER_SUPPORTED, {**HANDLERS, **CLUSTER_HANDLERS}),
}
# What each broker handles without advertising it (a cluster broker has a transaction
# coordinator too, since issue 26).
UNADVERTISED = {"single broker": frozenset(), "cluster broker": frozenset()}


def _names(keys):
    return sorted(ApiKey(k).api_name for k in keys)


@pytest.mark.parametrize("broker", TABLES)
def test_every_advertised_api_has_a_handler(broker):
    advertised, handlers = TABLES[broker]
    assert not _names(set(advertised) - set(handlers)), \
        f"the {broker} advertises APIs it has no handler for"


@pytest.mark.parametrize("broker", TABLES)
def test_every_handler_serves_an_advertised_or_refused_api(broker):
    advertised, handlers = TABLES[broker]
    unadvertised = set(handlers) - set(advertised)
    assert _names(unadvertised) == _names(UNADVERTISED[broker]), \
        f"the {broker} has handlers for APIs it neither advertises nor refuses"
    assert not set(advertised) & UNADVERTISED[broker]


@pytest.mark.parametrize("broker", TABLES)
def test_every_handler_is_a_coroutine_function(broker):
    _, handlers = TABLES[broker]
    for key, handler in handlers.items():
        assert inspect.iscoroutinefunction(handler), f"{API_NAMES[key]}: {handler!r}"


@pytest.mark.parametrize("broker", TABLES)
def test_handler_tables_are_keyed_by_api_key(broker):
    _, handlers = TABLES[broker]
    for key, handler in handlers.items():
        assert type(key) is ApiKey, f"{handler.__name__} is keyed by the bare number {key!r}"


def test_the_cluster_adds_exactly_the_inter_broker_apis_to_what_is_advertised():
    assert set(CLUSTER_SUPPORTED) - set(SUPPORTED) == CLUSTER_ONLY
    assert set(CLUSTER_ONLY) <= set(CLUSTER_HANDLERS)
    assert not CLUSTER_ONLY & set(HANDLERS), "a single broker handles an inter-broker API"


def test_advertised_ranges_are_the_codecs():
    for advertised in (SUPPORTED, CLUSTER_SUPPORTED):
        for key, versions in advertised.items():
            assert type(key) is ApiKey and versions == APIS[key].versions
