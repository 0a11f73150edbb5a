"""The layer rules of docs/architecture.md, enforced.

The tables in docs/architecture.md are the single statement of which package may import
which: this test parses them and fails on any import that they do not allow, so the
document and the code cannot drift apart.

- "Layers": which package of ``kqlite/`` may import which. Besides the table, two rules
  from the same section: the protocol codec never touches sockets or the event loop,
  and the layers below the server never import asyncio (they are called from executor
  threads and from applications with no event loop); ``kqlite/aio/``, the embedded API
  for asyncio, imports no socket, ssl or selectors.
- "Inside kqlite/cluster": the import order of the cluster's subpackages (and of its
  top-level modules): an upward import between them fails.
- No import cycles among the modules of any package. In each package the nodes are its
  modules, its subpackages (each one node, whatever it holds) and its ``__init__``; an
  edge is an import, by any module inside a node, of anything inside another node.
  Every ``import`` and ``from ... import`` statement of a kqlite module counts, wherever
  it stands: at module level, in a class, in a function. A function-local import still
  makes its module depend on the other one (it runs later, that is all), so moving an
  import into a function does not break a ring: the shared piece must move to a module
  both can import. Imports of anything outside kqlite never count.
"""

import ast
import os
import re
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "kqlite")
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
CLUSTER_SECTION = "Inside kqlite/cluster"

# Layers that must stay usable without an event loop, and the codec's own rule.
FORBIDDEN_STDLIB = {
    "protocol": {"socket", "asyncio", "selectors", "ssl"},
    "format": {"asyncio", "socket"},
    "storage": {"asyncio", "socket"},
    "db": {"asyncio", "socket"},
    # The embedded API on an event loop (kqlite.aio) is no network client.
    "aio": {"socket", "selectors", "ssl"},
}


def layer_table(path=ARCHITECTURE, section="Layers", package="kqlite"):
    """{layer: set of layers it may import} from the rows, in the section ``section`` of
    ``path`` (or a file without sections), whose first cell is a part of ``package``
    (`PACKAGE/NAME/`, `PACKAGE/NAME.py`, or `PACKAGE/` for the package's own
    ``__init__``) and whose last cell lists the parts it may import."""
    name = re.escape(package)
    row = re.compile(rf"^\|\s*`{name}(?:/([\w.]+))?/?`\s*\|[^|]*\|\s*([^|]*)\|\s*$")
    cell = re.compile(rf"`{name}(?:/([\w.]+?))?/?`")
    table = {}
    current = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                current = line[3:].strip()
            if current not in (None, section):
                continue
            m = row.match(line.strip())
            if not m:
                continue
            layer = (m.group(1) or "").removesuffix(".py")
            table[layer] = {a.removesuffix(".py") for a in cell.findall(m.group(2))}
    return table


def _module_parts(path, package_dir):
    """The dotted name of the file ``path`` as parts, from the package rooted at
    ``package_dir``: ``kqlite/storage/log.py`` -> ``["kqlite", "storage", "log"]``; an
    ``__init__.py`` stands for its package."""
    rel = os.path.relpath(path, os.path.dirname(package_dir))[:-len(".py")].split(os.sep)
    return rel[:-1] if rel[-1] == "__init__" else rel


def _is_module(package_dir, parts):
    """Whether ``parts`` (from the package root) name a module or a package."""
    base = os.path.join(os.path.dirname(package_dir), *parts)
    return os.path.isdir(base) or os.path.isfile(base + ".py")


def imports_of(path, package_dir):
    """(line, imported module, other) for every import statement in the file ``path`` of
    the package rooted at ``package_dir``, wherever it stands. ``imported module`` is the
    dotted name as parts (``from .. import errors`` in ``kqlite/storage/log.py`` gives
    ``["kqlite", "errors"]``; a name imported from a module gives that module), or None
    for an import from outside the package, whose top-level name is then ``other``."""
    pkg_name = os.path.basename(package_dir)
    here = _module_parts(path, package_dir)
    package = here if os.path.basename(path) == "__init__.py" else here[:-1]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == pkg_name:
                    yield node.lineno, parts, None
                else:
                    yield node.lineno, None, parts[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != pkg_name:
                    yield node.lineno, None, parts[0]
                    continue
            else:
                parts = package[:len(package) - (node.level - 1)] + \
                    (node.module.split(".") if node.module else [])
            for alias in node.names:
                sub = parts + [alias.name]
                yield node.lineno, sub if _is_module(package_dir, sub) else parts, None


def _part_of(parts, scope):
    """The part of ``scope`` (a package, as parts) that the module ``parts`` belongs to:
    the name of its subpackage or top-level module, "" for the scope's own ``__init__``,
    None when the module is outside the scope."""
    if parts[:len(scope)] != scope:
        return None
    rest = parts[len(scope):]
    return rest[0] if rest else ""


def violations(package_dir, table, inside=None):
    """Every import in ``package_dir`` that its layer's row does not allow. With
    ``inside`` (a subpackage's name), the layers are the parts of that subpackage and only
    imports between them are judged (the subpackage's table, e.g. the cluster's)."""
    scope = [os.path.basename(package_dir)] + ([inside] if inside else [])
    top = os.path.join(package_dir, inside) if inside else package_dir
    found = []
    for dirpath, _dirs, files in os.walk(top):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = "/".join(os.path.relpath(path, package_dir).split(os.sep))
            layer = _part_of(_module_parts(path, package_dir), scope)
            if layer not in table:
                found.append(f"{rel}: layer {layer!r} has no row in the layer table")
                continue
            for line, module, other in imports_of(path, package_dir):
                where = f"{rel}:{line}"
                if module is not None:
                    target = _part_of(module, scope)
                    if target is not None and target != layer and target not in table[layer]:
                        found.append(f"{where}: {layer or scope[-1]} imports "
                                     f"{target or scope[-1]}, which its row does not allow")
                elif not inside and other in FORBIDDEN_STDLIB.get(layer, ()):
                    found.append(f"{where}: {layer} imports {other}")
    return sorted(set(found))


def import_cycles(package_dir):
    """One line per tangle of imports among the parts of a package (parts that all reach
    one another; see the module docstring), showing a shortest ring through it and where
    each of its imports is, e.g. ``kqlite/cli: cluster -> cluster_up -> cluster
    (cluster.py:14, cluster_up.py:284)``."""
    edges = {}        # package parts -> {(node, node): "file:line" of the first import}
    for dirpath, _dirs, files in os.walk(package_dir):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            here = _module_parts(path, package_dir)
            rel = "/".join(os.path.relpath(path, package_dir).split(os.sep))
            for line, module, _other in imports_of(path, package_dir):
                if module is None:
                    continue
                # Every package holding both modules sees an edge between its parts.
                for depth in range(1, len(here) + 1):
                    scope = here[:depth]
                    a, b = _part_of(here, scope), _part_of(module, scope)
                    if b is None or a is None:
                        break
                    if a != b:
                        where = os.path.relpath(rel, "/".join(scope[1:])) if depth > 1 else rel
                        edges.setdefault(tuple(scope), {}).setdefault(
                            (a or "__init__", b or "__init__"), f"{where}:{line}")
                        break
    found = []
    for scope, pairs in sorted(edges.items()):
        for ring in _rings(pairs):
            steps = ", ".join(pairs[(x, y)] for x, y in zip(ring, ring[1:]))
            found.append(f"{'/'.join(scope)}: {' -> '.join(ring)} ({steps})")
    return found


def _rings(pairs):
    """A shortest ring through the smallest node of each strongly connected set of more
    than one node, in the graph of ``pairs`` ({(a, b): ...})."""
    after = {}
    for a, b in pairs:
        after.setdefault(a, set()).add(b)
        after.setdefault(b, set())

    def reach(start):
        seen, todo = {start}, [start]
        while todo:
            for n in after[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    reached = {n: reach(n) for n in after}
    rings, done = [], set()
    for start in sorted(after):
        if start in done:
            continue
        group = {n for n in reached[start] if start in reached[n]}
        done |= group
        if len(group) < 2:
            continue
        paths, todo = {start: [start]}, [start]
        while todo:                         # breadth first: the shortest way back
            node = todo.pop(0)
            if start in after[node]:
                rings.append(paths[node] + [start])
                break
            for n in sorted(after[node] & group):
                if n not in paths:
                    paths[n] = paths[node] + [n]
                    todo.append(n)
    return rings


def _assert_acyclic(table, what):
    state = {}

    def visit(layer, path):
        if state.get(layer) == "done":
            return
        assert state.get(layer) != "open", f"cycle in {what}: {' -> '.join(path)}"
        state[layer] = "open"
        for below in table[layer]:
            if below != layer:
                visit(below, path + [below])
        state[layer] = "done"

    for layer in table:
        visit(layer, [layer])


def _parts_of(directory):
    """The subpackages and top-level modules of ``directory``, without ``.py``."""
    return {name.removesuffix(".py") for name in os.listdir(directory)
            if not name.startswith("__") and (name.endswith(".py") or
                                              os.path.isdir(os.path.join(directory, name)))
            and name != "__pycache__"}


def test_the_table_names_every_package():
    table = layer_table()
    assert _parts_of(PACKAGE) - set(table) == set(), "packages missing from docs/architecture.md"
    for layer, allowed in table.items():
        assert allowed <= set(table), f"{layer} may import unknown layers {allowed - set(table)}"


def test_no_import_goes_up_a_layer():
    assert violations(PACKAGE, layer_table()) == []


def test_the_table_is_acyclic():
    _assert_acyclic(layer_table(), "the layer table")


def test_the_cluster_table_names_every_part_of_the_cluster():
    table = layer_table(section=CLUSTER_SECTION, package="kqlite/cluster")
    parts = _parts_of(os.path.join(PACKAGE, "cluster"))
    assert parts - set(table) == set(), "kqlite/cluster parts missing from docs/architecture.md"
    assert set(table) - parts - {""} == set(), "rows for kqlite/cluster parts that do not exist"
    for layer, allowed in table.items():
        assert allowed <= set(table), f"{layer} may import unknown parts {allowed - set(table)}"


def test_no_import_goes_up_inside_the_cluster():
    table = layer_table(section=CLUSTER_SECTION, package="kqlite/cluster")
    assert violations(PACKAGE, table, inside="cluster") == []


def test_the_cluster_table_is_acyclic():
    _assert_acyclic(layer_table(section=CLUSTER_SECTION, package="kqlite/cluster"),
                    "the kqlite/cluster table")


def test_no_package_has_an_import_cycle():
    assert import_cycles(PACKAGE) == []


@pytest.fixture
def toy(tmp_path):
    """A package with the shape of kqlite: three layers and a table."""
    pkg = tmp_path / "kqlite"
    for sub in ("errors.py", "storage/__init__.py", "storage/log.py", "server/__init__.py",
                "server/broker.py", "protocol/__init__.py", "__init__.py"):
        (pkg / sub).parent.mkdir(parents=True, exist_ok=True)
        (pkg / sub).write_text("")
    doc = tmp_path / "architecture.md"
    doc.write_text(textwrap.dedent("""\
        ## Layers
        | package | job | may import |
        |---|---|---|
        | `kqlite/errors.py` | errors | — |
        | `kqlite/storage/` | logs | `kqlite/errors.py` |
        | `kqlite/protocol/` | codec | `kqlite/errors.py` |
        | `kqlite/server/` | broker | `kqlite/storage/`, `kqlite/protocol/`, `kqlite/errors.py` |
        | `kqlite/` | re-exports | `kqlite/storage/`, `kqlite/errors.py` |
        ## Other
        | `kqlite/storage/` | a second table about the same folder | nothing here |
        """))
    return pkg, doc


def test_an_upward_import_is_reported(toy):
    pkg, doc = toy
    table = layer_table(str(doc))
    assert table["storage"] == {"errors"} and table[""] == {"storage", "errors"}
    (pkg / "server" / "broker.py").write_text("from ..storage.log import x\nimport asyncio\n")
    (pkg / "storage" / "log.py").write_text("from ..errors import E\nfrom .. import errors\n")
    assert violations(str(pkg), table) == []
    (pkg / "storage" / "log.py").write_text("from ..server import broker\n")
    (pkg / "protocol" / "__init__.py").write_text("import kqlite.storage.log\nimport socket\n")
    found = violations(str(pkg), table)
    assert any("storage/log.py:1: storage imports server" in v for v in found), found
    assert any("protocol/__init__.py:1: protocol imports storage" in v for v in found), found
    assert any("protocol/__init__.py:2: protocol imports socket" in v for v in found), found


def test_a_package_without_a_row_is_reported(toy):
    pkg, doc = toy
    (pkg / "cluster").mkdir()
    (pkg / "cluster" / "__init__.py").write_text("")
    found = violations(str(pkg), layer_table(str(doc)))
    assert found == ["cluster/__init__.py: layer 'cluster' has no row in the layer table"]


@pytest.fixture
def toy_cluster(tmp_path):
    """A cluster package with the shape of kqlite/cluster: rules below replica below the
    node, and its table beside the package-wide one."""
    pkg = tmp_path / "kqlite"
    for sub in ("__init__.py", "errors.py", "cluster/__init__.py", "cluster/rules/__init__.py",
                "cluster/rules/election.py", "cluster/replica/__init__.py",
                "cluster/replica/partition.py", "cluster/node.py"):
        (pkg / sub).parent.mkdir(parents=True, exist_ok=True)
        (pkg / sub).write_text("")
    doc = tmp_path / "architecture.md"
    doc.write_text(textwrap.dedent("""\
        ## Layers
        | package | job | may import |
        |---|---|---|
        | `kqlite/errors.py` | errors | — |
        | `kqlite/cluster/` | the cluster | `kqlite/errors.py` |
        ## Inside kqlite/cluster
        | package | job | may import |
        |---|---|---|
        | `kqlite/cluster/` | the layout | — |
        | `kqlite/cluster/rules/` | pure rules | — |
        | `kqlite/cluster/replica/` | partitions | `kqlite/cluster/rules/` |
        | `kqlite/cluster/node.py` | broker | `kqlite/cluster/rules/`, `kqlite/cluster/replica/` |
        """))
    return pkg, doc


def test_an_upward_import_inside_the_cluster_is_reported(toy_cluster):
    pkg, doc = toy_cluster
    table = layer_table(str(doc), section=CLUSTER_SECTION, package="kqlite/cluster")
    assert table == {"": set(), "rules": set(), "replica": {"rules"},
                     "node": {"rules", "replica"}}
    assert layer_table(str(doc))["cluster"] == {"errors"}
    cluster = pkg / "cluster"
    (cluster / "replica" / "partition.py").write_text(
        "from ...errors import E\nfrom ..rules import election\nfrom . import x\n")
    (cluster / "node.py").write_text("from .replica.partition import P\n"
                                     "import kqlite.cluster.rules.election\n")
    assert violations(str(pkg), table, inside="cluster") == []
    (cluster / "rules" / "election.py").write_text(
        "def f():\n    from ..replica.partition import P\n")
    (cluster / "replica" / "__init__.py").write_text("from kqlite.cluster import node\n")
    (cluster / "fetcher").mkdir()
    (cluster / "fetcher" / "__init__.py").write_text("")
    found = violations(str(pkg), table, inside="cluster")
    assert found == [
        "cluster/fetcher/__init__.py: layer 'fetcher' has no row in the layer table",
        "cluster/replica/__init__.py:1: replica imports node, which its row does not allow",
        "cluster/rules/election.py:2: rules imports replica, which its row does not allow",
    ], found


def test_an_import_cycle_is_reported(toy_cluster):
    pkg, _doc = toy_cluster
    cluster = pkg / "cluster"
    (cluster / "replica" / "partition.py").write_text("from ..rules import election\n")
    (cluster / "replica" / "roles.py").write_text("from . import partition\n")
    assert import_cycles(str(pkg)) == []
    # Two modules of one package, one of the imports inside a function.
    (cluster / "replica" / "partition.py").write_text(
        "from ..rules import election\n\n\ndef f():\n    from .roles import R\n")
    # Two subpackages: a ring between them, whichever modules hold the imports.
    (cluster / "rules" / "election.py").write_text("from ..node import N\n")
    (cluster / "node.py").write_text("from .rules.election import e\n")
    assert import_cycles(str(pkg)) == [
        "kqlite/cluster: node -> rules -> node (node.py:1, rules/election.py:1)",
        "kqlite/cluster/replica: partition -> roles -> partition (partition.py:5, roles.py:1)",
    ]
