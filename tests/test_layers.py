"""The layer rules of docs/architecture.md, enforced.

The layer table in docs/architecture.md is the single statement of which
package may import which: this test parses that table and fails on any import
inside ``kqlite/`` that is not allowed by it, so the document and the code
cannot drift apart. Besides the table, two rules from the same page: the
protocol codec never touches sockets or the event loop, and the layers below
the server never import asyncio (they are called from executor threads and
from applications with no event loop).
"""

import ast
import os
import re
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "kqlite")
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")

# Layers that must stay usable without an event loop, and the codec's own rule.
FORBIDDEN_STDLIB = {
    "protocol": {"socket", "asyncio", "selectors", "ssl"},
    "format": {"asyncio", "socket"},
    "storage": {"asyncio", "socket"},
    "db": {"asyncio", "socket"},
}

_ROW = re.compile(r"^\|\s*`kqlite(?:/([\w.]+))?/?`\s*\|[^|]*\|\s*([^|]*)\|\s*$")


def layer_table(path=ARCHITECTURE):
    """{layer: set of layers it may import} from the rows, in the "Layers" section of
    ``path`` (or a file without sections), whose first
    cell is a package (`kqlite/NAME/`, or `kqlite/` for the package root's
    ``__init__``) and whose last cell lists the packages it may import."""
    table = {}
    section = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
            if section not in (None, "Layers"):
                continue
            m = _ROW.match(line.strip())
            if not m:
                continue
            name = (m.group(1) or "").removesuffix(".py")
            allowed = set(re.findall(r"`kqlite(?:/([\w.]+?))?/?`", m.group(2)))
            table[name] = {a.removesuffix(".py") for a in allowed}
    return table


def _layer_of(module_parts):
    """The layer of a module path inside kqlite (``["storage", "log"]`` -> "storage";
    the package root ``kqlite/__init__.py`` -> "")."""
    first = module_parts[0].removesuffix(".py") if module_parts else ""
    return "" if first == "__init__" else first


def imports_of(path, package_dir):
    """(line, imported kqlite layer or None, top-level module) for every import in the
    file ``path`` of the package rooted at ``package_dir``."""
    rel = os.path.relpath(path, package_dir).split(os.sep)
    here = rel[:-1]     # the package a relative import starts from
    pkg_name = os.path.basename(package_dir)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == pkg_name:
                    yield node.lineno, (_layer_of(parts[1:]) if len(parts) > 1 else "api"), None
                else:
                    yield node.lineno, None, parts[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != pkg_name:
                    yield node.lineno, None, parts[0]
                    continue
                target = parts[1:]
            else:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                target = base + (node.module.split(".") if node.module else [])
            if target:
                yield node.lineno, _layer_of(target), None
            else:   # "from .. import x" at the root: x is a layer, or a name the root exports
                for alias in node.names:
                    is_module = os.path.isdir(os.path.join(package_dir, alias.name)) or \
                        os.path.isfile(os.path.join(package_dir, alias.name + ".py"))
                    yield node.lineno, (_layer_of([alias.name]) if is_module else ""), None


def violations(package_dir, table):
    """Every import in ``package_dir`` that its layer's row does not allow."""
    found = []
    for dirpath, _dirs, files in os.walk(package_dir):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, package_dir).split(os.sep)
            layer = _layer_of(rel)
            if layer not in table:
                found.append(f"{'/'.join(rel)}: layer {layer!r} has no row in the layer table")
                continue
            for line, target, stdlib in imports_of(path, package_dir):
                where = f"{'/'.join(rel)}:{line}"
                if target is not None:
                    if target == "api":
                        target = ""
                    if target != layer and target not in table[layer]:
                        found.append(f"{where}: {layer or 'kqlite'} imports "
                                     f"{target or 'kqlite'}, which its row does not allow")
                elif stdlib in FORBIDDEN_STDLIB.get(layer, ()):
                    found.append(f"{where}: {layer} imports {stdlib}")
    return found


def test_the_table_names_every_package():
    table = layer_table()
    packages = {name.removesuffix(".py") for name in os.listdir(PACKAGE)
                if not name.startswith("__") and (name.endswith(".py") or
                                                  os.path.isdir(os.path.join(PACKAGE, name)))
                and name != "__pycache__"}
    assert packages - set(table) == set(), "packages missing from docs/architecture.md"
    for layer, allowed in table.items():
        assert allowed <= set(table), f"{layer} may import unknown layers {allowed - set(table)}"


def test_no_import_goes_up_a_layer():
    assert violations(PACKAGE, layer_table()) == []


def test_the_table_is_acyclic():
    table = layer_table()
    state = {}

    def visit(layer, path):
        if state.get(layer) == "done":
            return
        assert state.get(layer) != "open", f"cycle in the layer table: {' -> '.join(path)}"
        state[layer] = "open"
        for below in table[layer]:
            if below != layer:
                visit(below, path + [below])
        state[layer] = "done"

    for layer in table:
        visit(layer, [layer])


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
