"""``python -m build`` makes an sdist and a wheel that install and run, with the C
helpers or, where no C compiler is, without them.

Theory of operation: the files an sdist is made from are copied out of the checkout
(so the build's ``build/`` and ``kqlite.egg-info`` never land in it), the sdist is
built from the copy and the wheels from the unpacked sdist, as pip builds from PyPI:
a file the sdist forgets fails the wheel build or its test. Builds run in the suite's
own environment (``--no-isolation``: no download; the test extra holds setuptools and
cffi at the versions pyproject.toml's build-system asks for).

A wheel is installed into a fresh virtual environment made without pip (pip runs
from the suite's environment with ``--python``) and without its dependencies, which
the new environment reads from the suite's site-packages through a path file: a path
line puts those directories on sys.path without running their own path files, so
the checkout that the suite's editable install adds is not on it, and ``kqlite`` can
only come from the wheel. The quickstart of the README then runs in an empty
directory. With ``--soak``, a second fresh environment installs the wheel the way
the README's first command does, ``pip install`` resolving the dependencies from the
package index.
"""

import ast
import os
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What the sdist is made from: the project's files at the root and the packages. The
# sdist's own contents are MANIFEST.in's business, checked below.
_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "README.md",
            "CHANGELOG.md", "pyspark_kqlite.py", "csrc", "kqlite", "examples/quickstart.py")

# setup.py's notice when the C helpers cannot be built.
_NO_C_NOTICE = "kqlite: C helpers not built"


def _version():
    """kqlite.__version__ as kqlite/__init__.py assigns it (not the imported module's:
    the suite may run another checkout's)."""
    with open(os.path.join(ROOT, "kqlite", "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and \
                any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("kqlite/__init__.py assigns no __version__")


def _clean_env(**extra):
    """The environment of a child that must see only what it installed: no PYTHONPATH
    (it would put a checkout first), the C helpers not turned off."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KQLITE_PURE_PYTHON", "PYTHONHOME")}
    env.update(extra)
    return env


def _run(args, cwd, env=None, timeout=300):
    done = subprocess.run(args, cwd=cwd, env=env or _clean_env(), capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, \
        f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
        f"{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def _build(kind, srcdir, outdir, env=None):
    out = _run([sys.executable, "-m", "build", f"--{kind}", "--no-isolation",
                "--outdir", str(outdir), str(srcdir)], cwd=str(srcdir), env=env)
    built = [f for f in os.listdir(outdir) if f.endswith(".tar.gz" if kind == "sdist"
                                                         else ".whl")]
    assert len(built) == 1, built
    return os.path.join(outdir, built[0]), out


def _unpack(sdist, into):
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (top,) = os.listdir(into)
    return os.path.join(into, top)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """(path of the sdist, what its build printed)."""
    source = tmp_path_factory.mktemp("source")
    for name in _SOURCES:
        src, dst = os.path.join(ROOT, name), source / name
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(
                "__pycache__", "*.so", "*.pyd", "*.o", "_cnative.c"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return _build("sdist", source, tmp_path_factory.mktemp("sdist"))


def _wheel_from(sdist, tmp_path_factory, env=None):
    srcdir = _unpack(sdist, tmp_path_factory.mktemp("unpacked"))
    return _build("wheel", srcdir, tmp_path_factory.mktemp("wheel"), env)


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory):
    """(path of the wheel built from the sdist with a C compiler, its build's output)."""
    return _wheel_from(sdist[0], tmp_path_factory)


def _fresh_env(where, wheel):
    """A new virtual environment at ``where`` holding ``wheel``; its dependencies come
    from the suite's site-packages. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = os.path.join(str(where), "bin", "python")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
          "--no-index", "--no-deps", wheel], cwd=str(where))
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=str(where)).strip()
    with open(os.path.join(purelib, "suite-dependencies.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    return python


def _quickstart(python, where):
    """Run the README's quickstart with ``python`` in an empty directory; its output."""
    work = os.path.join(str(where), "work")
    os.makedirs(work)
    script = shutil.copy(os.path.join(ROOT, "examples", "quickstart.py"), work)
    return _run([python, script], cwd=work)


_WHICH = ("import importlib.metadata, kqlite, kqlite._native; "
          "print(kqlite.__file__); print(kqlite.__version__); "
          "print(importlib.metadata.version('kqlite')); "
          "print(kqlite._native.IMPLEMENTATION)")


def _installed(python, where):
    """(kqlite's file, __version__, metadata version, implementation) in ``python``."""
    return tuple(_run([python, "-c", _WHICH], cwd=str(where)).split())


def test_the_sdist_carries_the_sources_licence_and_version(sdist):
    path, output = sdist
    assert "Deprecat" not in output and "warning: no files found" not in output, output
    version = _version()
    top = f"kqlite-{version}"
    assert os.path.basename(path) == f"{top}.tar.gz"
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        pkg_info = tar.extractfile(f"{top}/PKG-INFO").read().decode()
    csrc = {f"{top}/csrc/{f}" for f in os.listdir(os.path.join(ROOT, "csrc"))
            if f.endswith((".c", ".h", ".py"))}
    assert csrc - names == set(), "C helper sources missing from the sdist"
    for name in ("LICENSE", "CHANGELOG.md", "README.md", "examples/quickstart.py",
                 "kqlite/__init__.py", "pyspark_kqlite.py"):
        assert f"{top}/{name}" in names
    assert not [n for n in names if n.endswith((".so", ".pyd", ".o"))]
    headers = pkg_info.split("\n\n", 1)[0].splitlines()
    assert f"Version: {version}" in headers
    assert "License-Expression: Apache-2.0" in headers
    assert "License-File: LICENSE" in headers
    assert not [h for h in headers if h.startswith(("License:", "Classifier: License"))]
    # The long description (the README) states the pure-Python fallback.
    assert "pure-Python twins are used" in pkg_info


def _package_files():
    """Every file of the kqlite package in the checkout that a wheel must carry: its
    modules and data (py.typed, stubs), not what a build or a run leaves there."""
    out = []
    for folder, dirs, files in os.walk(os.path.join(ROOT, "kqlite")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".so", ".pyd", ".o", ".pyc")) and name != "_cnative.c":
                out.append(os.path.relpath(os.path.join(folder, name), ROOT))
    return out


def test_the_wheel_installs_into_a_fresh_environment_and_runs_the_quickstart(
        wheel, tmp_path):
    path, output = wheel
    assert "Deprecat" not in output, output
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
    assert [n for n in names if n.startswith("kqlite/_native/_cnative.abi3.")], names
    # The extension uses the stable ABI only: one wheel for every CPython >= 3.10.
    assert f"-{_version()}-cp310-abi3-" in os.path.basename(path)
    assert set(_package_files()) - set(names) == set(), "package files left out of the wheel"
    assert "pyspark_kqlite.py" in names       # Spark's data source discovery imports it
    assert f"kqlite-{_version()}.dist-info/licenses/LICENSE" in names
    python = _fresh_env(tmp_path / "venv", path)
    where, version, dist_version, implementation = _installed(python, tmp_path)
    assert where.startswith(str(tmp_path / "venv")), where
    assert version == dist_version == _version()
    assert implementation == "c"
    _run([sys.executable, "-m", "pip", "--python", python, "check"], cwd=str(tmp_path))
    out = _quickstart(python, tmp_path)
    assert "appended 5001 records at offsets 0..5000" in out
    assert "implementation of the C helpers: c" in out


def test_without_a_c_compiler_the_sdist_installs_the_pure_python_twins(
        sdist, tmp_path_factory, tmp_path):
    path, output = _wheel_from(sdist[0], tmp_path_factory, _clean_env(CC="false"))
    assert _NO_C_NOTICE in output
    with zipfile.ZipFile(path) as whl:
        assert not [n for n in whl.namelist() if n.endswith((".so", ".pyd"))]
    python = _fresh_env(tmp_path / "venv", path)
    where, version, _dist_version, implementation = _installed(python, tmp_path)
    assert where.startswith(str(tmp_path / "venv")), where
    assert (version, implementation) == (_version(), "python")
    out = _quickstart(python, tmp_path)
    assert "implementation of the C helpers: python" in out


@pytest.mark.soak
def test_pip_installs_the_wheel_with_its_dependencies_from_the_index(wheel, tmp_path):
    """The README's first command on a built wheel: a venv with pip, ``pip install``
    fetching the dependencies, then the quickstart."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    output = _run([python, "-m", "pip", "install", wheel[0]], cwd=str(tmp_path))
    assert "Deprecat" not in output, output
    assert _installed(python, tmp_path)[3] == "c"
    assert "appended 5001 records" in _quickstart(python, tmp_path)
