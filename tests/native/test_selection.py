"""Which implementation kqlite._native selects, and the ABI stamp of the C build."""

import os
import re
import subprocess
import sys

import pytest

from kqlite import _native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE = "import kqlite._native as n; print(n.IMPLEMENTATION)"


def run(code, **env):
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, full.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], env=full,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_pure_python_switch(value):
    assert run(CODE, KQLITE_PURE_PYTHON=value).stdout.strip() == "python"


@pytest.mark.parametrize("value", ["", "0"])
def test_c_is_the_default_when_built(value):
    expected = "c" if _native.c is not None else "python"
    assert run(CODE, KQLITE_PURE_PYTHON=value).stdout.strip() == expected


def test_module_surface():
    for name in ("crc32c", "crc32", "encode_records", "decode_records", "scan_batches",
                 "walk_records", "index_search"):
        assert getattr(_native, name) is getattr(
            _native.pure if _native.IMPLEMENTATION == "python" else _native.c, name)
        for impl in filter(None, (_native.pure, _native.c)):
            assert callable(getattr(impl, name))
    assert (_native.SCAN_OK, _native.SCAN_TRUNCATED, _native.SCAN_CORRUPT_CRC,
            _native.SCAN_BAD_HEADER) == (0, 1, 2, 3)
    # The walk statuses are the C error codes of csrc/kqlite_native.h.
    if _native.c is not None:
        lib = _native.c.lib
        assert (_native.WALK_VARINT, _native.WALK_LENGTH, _native.WALK_RECORD_SIZE,
                _native.WALK_COUNT, _native.WALK_TRAILING, _native.WALK_HEADER_KEY,
                _native.WALK_OVERFLOW, _native.WALK_MISSING, _native.WALK_HEADER_UTF8) == \
            (lib.KQ_ERR_VARINT, lib.KQ_ERR_LENGTH, lib.KQ_ERR_RECORD_SIZE, lib.KQ_ERR_COUNT,
             lib.KQ_ERR_TRAILING, lib.KQ_ERR_HEADER_KEY, lib.KQ_ERR_OVERFLOW,
             lib.KQ_ERR_MISSING, lib.KQ_ERR_HEADER_UTF8)
    statuses = {getattr(_native, name) for name in _native.__all__ if name.startswith("WALK_")
                and name != "WALK_TEXT"}
    assert _native.WALK_OK == 0 and len(statuses) == 10 and set(_native.WALK_TEXT) == statuses
    assert _native.pure.IMPLEMENTATION == "python"
    assert _native.IMPLEMENTATION in ("c", "python")


def test_abi_stamps_agree():
    with open(os.path.join(ROOT, "csrc", "build_native.py")) as f:
        source_abi = int(re.search(r"^KQLITE_NATIVE_ABI = (\d+)", f.read(), re.M).group(1))
    with open(os.path.join(ROOT, "kqlite", "_native", "_c.py")) as f:
        wrapper_abi = int(re.search(r"^EXPECTED_ABI = (\d+)", f.read(), re.M).group(1))
    assert source_abi == wrapper_abi
    if _native.c is not None:
        assert _native.c.lib.KQLITE_NATIVE_ABI == source_abi


def test_stale_build_warns_and_falls_back():
    # A stand-in extension stamped with another ABI must be refused, loudly.
    code = (
        "import sys, types\n"
        "fake = types.ModuleType('kqlite._native._cnative')\n"
        "fake.ffi = None\n"
        "fake.lib = types.SimpleNamespace(KQLITE_NATIVE_ABI=-1)\n"
        "sys.modules['kqlite._native._cnative'] = fake\n"
        "import kqlite._native as n\n"
        "print(n.IMPLEMENTATION, n.c)\n"
    )
    out = run(code, KQLITE_PURE_PYTHON="")
    assert out.stdout.strip() == "python None"
    assert "RuntimeWarning" in out.stderr and "ABI -1" in out.stderr
