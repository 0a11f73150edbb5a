"""The Kafka message layouts kqlite speaks, written in the project's schema DSL (``_dsl``).

``APIS`` maps an API key (an ``ApiKey``) to its ``Api`` (both messages, the versions kqlite
serves and the API's flexible versions). ``API_NAMES`` names every API key Kafka defines,
served or not, so that an unsupported request can still be logged by name.

Adding an API: declare it in the module of its family (data, fetch, metadata, groups,
group_admin, admin, admin_ops, security, acls_quotas, transactions; interbroker for the
cluster's), add it to that module's ``APIS`` list, and run
tests/protocol/test_schema_crosscheck.py. An API in ``APIS`` is advertised (``connection.SUPPORTED``, or ``CLUSTER_SUPPORTED`` by a cluster broker only),
so its handler comes with it (kqlite/server/handlers, kqlite/cluster/handlers;
tests/server/test_handler_table.py fails without one).

``CLUSTER_ONLY`` names the inter-broker APIs (``interbroker``): decoded and encoded like the
others, advertised only by a cluster broker. ``TRANSACTIONS`` names the transaction
coordinator's APIs (``transactions``), advertised only by a broker that has one (not by a
cluster broker yet). ``REQUEST_HEADER_V0`` is the (key, version) pairs whose request header
has no client id.
"""

from ..api_keys import ApiKey
from . import (admin, admin_ops, data, fetch, group_admin, groups, interbroker, metadata,
               security, acls_quotas, transactions)
from ._dsl import Api, F, Field, MISSING, in_range, parse_versions

__all__ = ["APIS", "API_NAMES", "CLUSTER_ONLY", "REQUEST_HEADER_V0",
           "Api", "F", "Field", "MISSING", "in_range", "parse_versions"]

APIS = {a.key: a for module in (data, fetch, metadata, groups, group_admin, admin, admin_ops,
                                security, acls_quotas, interbroker, transactions)
                for a in module.APIS}

# Kafka's ZooKeeper-mode inter-broker APIs: a single broker does not serve them, a cluster
# broker does (connection.CLUSTER_SUPPORTED).
CLUSTER_ONLY = frozenset(a.key for a in interbroker.APIS)
REQUEST_HEADER_V0 = interbroker.REQUEST_HEADER_V0

# Every API key Kafka defines, by name (api_keys.ApiKey): kept as a dict for the callers
# that name a key that may be unknown (``API_NAMES.get(key, fallback)``).
API_NAMES = {key: key.api_name for key in ApiKey}
