"""Build kqlite. Metadata lives in pyproject.toml; this file only wires the cffi
C helpers (csrc/build_native.py) in.

The C helpers are optional: when they cannot be built (no compiler, no
headers) the install still succeeds and kqlite uses the pure-Python twins.
``pip install -e .`` and ``pip install .`` both build them.
"""

import glob
import importlib.util
import os
import shutil
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext

NOTICE = "kqlite: C helpers not built ({}); using the pure-Python twins"


class OptionalBuildExt(build_ext):
    """build_ext that reports a failed C build instead of failing the install."""

    def run(self):
        try:
            super().run()
        except Exception as exc:
            print(NOTICE.format(exc))

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(NOTICE.format(exc))

    def copy_file(self, infile, outfile, *args, **kwargs):
        if not self.inplace:
            return super().copy_file(infile, outfile, *args, **kwargs)
        if not os.path.exists(infile):          # its build failed and was reported
            return outfile, 0
        # Editable installs copy the extension into the source tree, where running
        # interpreters may have the previous build mapped: install a new file by
        # rename rather than rewriting that one in place (SIGBUS), and remove
        # builds for other interpreter tags that would shadow this one.
        tmp = outfile + ".tmp"
        shutil.copyfile(infile, tmp)
        shutil.copymode(infile, tmp)
        os.replace(tmp, outfile)
        stem = os.path.basename(outfile).split(".")[0]
        for other in glob.glob(os.path.join(os.path.dirname(outfile), stem + ".*")):
            if other != outfile and other.endswith((".so", ".pyd")):
                os.remove(other)
        return outfile, 1


def _cffi_modules():
    # cffi is a build requirement, so it is missing only from unusual setups
    # (e.g. --no-build-isolation without it); they still get a working install.
    if importlib.util.find_spec("cffi") is None:
        print(NOTICE.format("cffi is not installed"))
        return []
    return ["csrc/build_native.py:ffibuilder"]


def _wheel_options():
    # cffi builds the extension against the stable ABI (_cnative.abi3.so), so one wheel
    # serves every CPython from 3.10 (requires-python) on: tag it cp310-abi3. cffi
    # leaves the stable ABI out on debug and free-threaded builds, and so does this.
    if hasattr(sys, "gettotalrefcount") or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return {}
    return {"bdist_wheel": {"py_limited_api": "cp310"}}


setup(
    cffi_modules=_cffi_modules(),
    cmdclass={"build_ext": OptionalBuildExt},
    options=_wheel_options(),
)
