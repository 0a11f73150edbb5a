"""kqlite's public API is typed, and its annotations are true (issue 32).

``mypy --strict`` checks the public modules and tests/typing/usage_example.py, a typed
program that uses every exported name and the calls users make on them ([tool.mypy] in
pyproject.toml lists both; the modules below the API are not annotated yet, and their
own errors are not reported). The example also runs: its checks of what each call
returned hold only if what the annotations promise is what the calls give. The same in
both modes: scripts/test runs it once, in the pure-Python pass (tests/conftest.py).
"""

import os
import subprocess
import sys

import pytest

import usage_example

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_public_api_passes_mypy_strict(tmp_path):
    # A cache of its own: each run checks from scratch (a few seconds).
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file",
         os.path.join(ROOT, "pyproject.toml"), "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_the_typed_example_runs(tmp_path):
    usage_example.main(str(tmp_path))


def test_the_checked_files_are_the_strict_modules():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        mypy = tomllib.load(f)["tool"]["mypy"]
    strict = {m for o in mypy["overrides"] if o.get("ignore_errors") is False
              for m in o["module"]}
    files = {f[:-3].replace("/", ".").removesuffix(".__init__") for f in mypy["files"]
             if f.startswith("kqlite/")}
    assert files == strict
    assert all(os.path.exists(os.path.join(ROOT, f)) for f in mypy["files"])
    assert os.path.exists(os.path.join(ROOT, "kqlite", "py.typed"))


def test_the_keyword_options_are_typed_as_the_config_rules_say():
    """LogOptions (the **options of Log.open and LogConfig) has one key per config,
    typed by its rule: a STRING of a fixed set of values is that Literal."""
    from typing import Literal, get_args, get_origin, get_type_hints

    from kqlite.storage.config import LogOptions
    from kqlite.storage.config_rules import RULES
    listed = str | list[str] | tuple[str, ...]
    expected = {"INT": int, "LONG": int, "BOOLEAN": bool, "DOUBLE": float, "LIST": listed,
                "STRING": str}
    hints = get_type_hints(LogOptions)
    for name, rule in RULES.items():
        hint = hints.pop(name.replace(".", "_"))
        if get_origin(hint) is Literal:
            assert rule.type == "STRING" and set(get_args(hint)) == set(rule.valid.split(", "))
        else:
            assert hint == expected[rule.type], name
    assert hints == {}
