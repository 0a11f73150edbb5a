"""A request handler never touches a Log or the Database (docs/architecture.md, "The
partition seam"): what storage holds, a handler asks of the replica manager
(``broker.replicas``), of a partition or of the coordinator, which do the storage work
in a storage thread. Checked on the parsed source of every module under
kqlite/server/handlers, so a comment or a string can neither break nor satisfy it:

- no import of ``kqlite.storage`` (the Log and its parts) or of the ``kqlite`` package
  root (``kqlite.Log``, ``kqlite.open``), and from ``kqlite.db`` only the names in
  ``ALLOWED``, which do no I/O;
- no attribute named ``db`` or ``_db``: the Database is reached only through one.
"""

import ast
from pathlib import Path

import kqlite.server.handlers

HANDLERS = Path(kqlite.server.handlers.__file__).parent
PACKAGE = "kqlite.server.handlers"

# (module, name) a handler may import from kqlite.db, and why it is not storage.
ALLOWED = {
    ("kqlite.db.topic_names", "InvalidTopicError"): "Kafka's topic-name rules, pure",
    ("kqlite.db.topic_names", "check_topic_name"): "Kafka's topic-name rules, pure",
}
_DATABASE_ATTRIBUTES = {"db", "_db"}


def _imported(node, package):
    """``[(module, name or None)]`` that an import statement brings in, absolute."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    if node.level:
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module
    return [(module, alias.name) for alias in node.names]


def _below_the_seam(module, name):
    """Whether importing ``name`` from ``module`` reaches storage."""
    full = f"{module}.{name}" if name else module
    for target in (module, full):
        if target == "kqlite" and name is None:
            return True                       # import kqlite: the public storage API
        if target == "kqlite.storage" or target.startswith("kqlite.storage."):
            return True
        if target == "kqlite.db" or target.startswith("kqlite.db."):
            return (module, name) not in ALLOWED
    return module == "kqlite" and name in ("Log", "open", "Database")


def violations(source, package=PACKAGE, filename="<handler>"):
    """What in ``source`` (a module of ``package``) touches storage, as readable lines."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for module, name in _imported(node, package):
                if _below_the_seam(module, name):
                    what = f"{module}.{name}" if name else module
                    found.append((node.lineno, f"{filename}:{node.lineno} imports {what}"))
        elif isinstance(node, ast.Attribute) and node.attr in _DATABASE_ATTRIBUTES:
            found.append((node.lineno, f"{filename}:{node.lineno} reads .{node.attr}"))
    return [line for _lineno, line in sorted(found)]


def test_no_handler_touches_a_log_or_the_database():
    modules = sorted(HANDLERS.glob("*.py"))
    assert len(modules) >= 9
    found = []
    for path in modules:
        found += violations(path.read_text(), filename=str(path.relative_to(HANDLERS.parent)))
    assert found == []


def test_the_check_sees_storage_however_it_is_reached_and_only_in_code():
    source = '''
"""A handler that says broker.db in its docstring."""
import kqlite
from kqlite import Log
from ...storage.legacy_offsets import legacy_offsets_before
from ... import storage
from ...db.offsets import OffsetStore
from ...db.topic_names import check_topic_name
from ...format.offset_records import OffsetAndMetadata

# broker.db.leased_log(topic, 0) in a comment is not a use.
async def handler(broker, conn, request):
    with broker.db.leased_log("t", 0) as log:
        return log.end_offset
    return partition._db
'''
    assert violations(source) == [
        "<handler>:3 imports kqlite",
        "<handler>:4 imports kqlite.Log",
        "<handler>:5 imports kqlite.storage.legacy_offsets.legacy_offsets_before",
        "<handler>:6 imports kqlite.storage",
        "<handler>:7 imports kqlite.db.offsets.OffsetStore",
        "<handler>:13 reads .db",
        "<handler>:15 reads ._db",
    ]
