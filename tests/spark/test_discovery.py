"""Spark finds ``format("kqlite")`` by itself however kqlite is installed: its lookup
worker (pyspark/sql/worker/lookup_data_sources.py) lists top-level modules with
``pkgutil.iter_modules()`` and registers the ``DefaultSource`` of each ``pyspark_*``
one. An editable install must therefore put pyspark_kqlite on a sys.path entry, not
behind an import hook, which pkgutil does not see."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

LOOKUP = """
import pkgutil, importlib
from pyspark.sql.datasource import DataSource
found = {}
for info in pkgutil.iter_modules():
    if info.name.startswith("pyspark_"):
        mod = importlib.import_module(info.name)
        if hasattr(mod, "DefaultSource") and issubclass(mod.DefaultSource, DataSource):
            found[mod.DefaultSource.name()] = mod.__name__
print(found.get("kqlite"))
"""


def test_lookup_from_another_directory_finds_kqlite(tmp_path):
    try:
        importlib.metadata.distribution("kqlite")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("kqlite is not installed in this interpreter (only on PYTHONPATH)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", LOOKUP], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pyspark_kqlite", (
        "Spark's data source lookup does not see pyspark_kqlite outside the repository; "
        "reinstall with `pip install -e .` (pyproject.toml maps the root package dir so "
        "that the editable install adds a sys.path entry)")
