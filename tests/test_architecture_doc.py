"""docs/architecture.md names every module of kqlite, and the docs name only modules that
exist, so the map cannot go stale in either direction.

- Every ``.py`` module under ``kqlite/`` is named in docs/architecture.md: by its path
  (``kqlite/storage/log.py``) anywhere in the page, or by its file name in a row of the
  table of its package in "What each folder owns" (the rows under the heading
  ``### `kqlite/storage/` ``); a package's ``__init__.py`` is named by its package's
  path too.
- Every module the page names exists: each ``kqlite/...`` path (a ``.py`` module or a
  package folder) anywhere in the page, and each file name in a package's table.
- Every ``kqlite/...py`` path in docs/*.md and README.md exists, and every other path of a
  Python file they name (``rules/election.py``, ``tests/...``, ``log.py``) is the end of
  the path of some Python file of the repository, so a renamed or moved module leaves no
  old name behind.
"""

import glob
import os
import re
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
FOLDERS_SECTION = "What each folder owns"

# A path of kqlite, not part of a longer path or a file name (``.kqlite/topics/`` is a
# data dir's folder, ``/var/lib/kqlite/x`` a user's).
_KQLITE_PATH = re.compile(r"(?<![\w./-])(kqlite(?:/\w+)*(?:/|\.py\b))")
# Any path of a Python file: ``log.py``, ``rules/election.py``, ``tests/x/test_y.py``.
_PY_PATH = re.compile(r"(?<![\w./-])((?:\w+/)*\w+\.py)\b")
_PACKAGE_HEADING = re.compile(r"^### `(kqlite/(?:\w+/)*)`\s*$")
_MODULE_ROW = re.compile(r"^\|\s*`(\w+\.py)`\s*\|")


def modules(root=ROOT):
    """Every module of ``root/kqlite``, as a path from ``root`` with ``/``."""
    found = []
    for dirpath, dirs, files in os.walk(os.path.join(root, "kqlite")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                found.append("/".join(rel.split(os.sep)))
    return sorted(found)


def named_in_page(text):
    """The kqlite paths the page names: ``kqlite/...`` paths anywhere, and the modules of
    the package tables of "What each folder owns" as paths (``kqlite/db/layout.py``)."""
    named = set(_KQLITE_PATH.findall(text))
    section, package = None, None
    for line in text.splitlines():
        if line.startswith("## "):
            section, package = line[3:].strip(), None
        if section != FOLDERS_SECTION:
            continue
        heading = _PACKAGE_HEADING.match(line)
        if heading:
            package = heading.group(1)
            continue
        row = _MODULE_ROW.match(line)
        if row and package is not None:
            named.add(package + row.group(1))
    return named


def unnamed_modules(text, root=ROOT):
    """The modules of kqlite the page does not name."""
    named = named_in_page(text)
    missing = []
    for module in modules(root):
        package = module.rsplit("/", 1)[0] + "/"
        if module in named or (module.endswith("/__init__.py") and package in named):
            continue
        missing.append(module)
    return missing


def missing_paths(text, root=ROOT):
    """The kqlite paths the page names that do not exist under ``root``."""
    return sorted(p for p in named_in_page(text)
                  if not (os.path.isdir(os.path.join(root, p)) if p.endswith("/")
                          else os.path.isfile(os.path.join(root, p))))


def python_files(root=ROOT):
    """Every Python file of the repository (tracked or not), as paths from ``root``."""
    found = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in
                   ("__pycache__", "node_modules", "build", "dist")]
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                found.append("/".join(rel.split(os.sep)))
    return found


def stale_python_paths(text, files):
    """The paths of Python files ``text`` names that are no file of ``files``: a
    ``kqlite/`` path must be one of them exactly, any other the end of one."""
    stale = set()
    for path in _PY_PATH.findall(text):
        if path.startswith("kqlite/"):
            if path not in files:
                stale.add(path)
        elif not any(f == path or f.endswith("/" + path) for f in files):
            stale.add(path)
    return sorted(stale)


def _page():
    with open(ARCHITECTURE, encoding="utf-8") as f:
        return f.read()


def _docs():
    """{path from the root: text} of docs/*.md and README.md."""
    paths = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + \
        [os.path.join(ROOT, "README.md")]
    out = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            out[os.path.relpath(path, ROOT)] = f.read()
    return out


def test_every_module_is_named_in_the_architecture_page():
    assert unnamed_modules(_page()) == [], \
        "modules missing from docs/architecture.md (add each to its package's table)"


def test_every_module_the_architecture_page_names_exists():
    assert missing_paths(_page()) == [], "docs/architecture.md names modules that do not exist"


def test_every_package_has_its_table():
    """Each package of kqlite has its section in "What each folder owns"."""
    headings = {m.group(1) for m in map(_PACKAGE_HEADING.match, _page().splitlines()) if m}
    packages = {m.rsplit("/", 1)[0] + "/" for m in modules() if m.endswith("/__init__.py")}
    assert packages - headings == set(), "packages without a table in docs/architecture.md"
    assert headings - packages == set(), "tables for packages that do not exist"


def test_the_docs_name_only_python_files_that_exist():
    files = set(python_files())
    stale = {doc: found for doc, text in _docs().items()
             if (found := stale_python_paths(text, files))}
    assert stale == {}, "docs naming Python files that do not exist"


def test_a_missing_and_a_stale_module_are_reported(tmp_path):
    for path in ("kqlite/__init__.py", "kqlite/errors.py", "kqlite/db/__init__.py",
                 "kqlite/db/layout.py", "kqlite/db/groups.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    page = textwrap.dedent("""\
        # Architecture
        `kqlite/errors.py` and the root `kqlite/` are named here; so is `kqlite/db/old.py`.
        ## What each folder owns
        ### `kqlite/db/`
        | module | holds |
        |---|---|
        | `layout.py` | names |
        | `gone.py` | a module that moved |
        ## Lock order
        | `groups.py` | a row outside the section names nothing |
        """)
    assert unnamed_modules(page, str(tmp_path)) == ["kqlite/db/groups.py"]
    assert missing_paths(page, str(tmp_path)) == ["kqlite/db/gone.py", "kqlite/db/old.py"]


def test_a_stale_path_in_the_docs_is_reported():
    files = {"kqlite/cluster/rules/election.py", "tests/test_layers.py", "setup.py"}
    text = ("`kqlite/cluster/rules/election.py`, `rules/election.py`, `election.py`, "
            "`tests/test_layers.py` and `setup.py` exist; `cluster/replica_state.py`, "
            "`kqlite/cluster/election.py` and `state.py` do not. The data dir's "
            "`.kqlite/topics/x.py` and `/var/lib/kqlite/y.py` are no modules' paths.")
    assert stale_python_paths(text, files) == [
        "cluster/replica_state.py", "kqlite/cluster/election.py", "state.py"]
