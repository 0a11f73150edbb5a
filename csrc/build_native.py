"""cffi builder for kqlite's C helpers: the extension ``kqlite._native._cnative``.

The cdef is csrc/kqlite_native.h with its preprocessor lines dropped. The ABI
number below is compiled into the extension as ``lib.KQLITE_NATIVE_ABI`` and
compared with ``EXPECTED_ABI`` in kqlite/_native/_c.py at import: a build left
over from older sources is refused (with a warning) and the pure-Python twins
are used instead of calling functions whose meaning changed.

Run directly (``python csrc/build_native.py``) to build in place without pip.
"""

import os

from cffi import FFI

KQLITE_NATIVE_ABI = 8       # bump with EXPECTED_ABI in kqlite/_native/_c.py

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["crc32c.c", "records.c", "scan.c", "walk.c", "arrow.c", "rounds.c", "summary.c"]


def _cdef():
    with open(os.path.join(HERE, "kqlite_native.h")) as f:
        lines = [line for line in f if not line.lstrip().startswith("#")]
    return "".join(lines) + f"\n#define KQLITE_NATIVE_ABI {KQLITE_NATIVE_ABI}\n"


def _rel(path):
    # setuptools wants source paths relative to setup.py's directory (the cwd
    # during a build); a direct run compiles from a temporary directory instead.
    rel = os.path.relpath(path)
    return path if __name__ == "__main__" or rel.startswith("..") else rel


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "kqlite._native._cnative",
    f'#define KQLITE_NATIVE_ABI {KQLITE_NATIVE_ABI}\n#include "kqlite_native.h"\n',
    sources=[_rel(os.path.join(HERE, s)) for s in SOURCES],
    include_dirs=[_rel(HERE)],
    depends=[_rel(os.path.join(HERE, h)) for h in ("kqlite_native.h", "kq_internal.h")],
    extra_compile_args=["-O3", "-std=gnu99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    # Build in build/cffi and install the extension next to the package sources
    # under the name `pip install -e .` gives it. os.replace swaps the file's
    # inode, so processes that have the old build loaded keep a valid mapping.
    import shutil
    root = os.path.dirname(HERE)
    built = ffibuilder.compile(tmpdir=os.path.join(root, "build", "cffi"), verbose=True)
    target = os.path.join(root, "kqlite", "_native", "_cnative.abi3.so")
    shutil.copyfile(built, target + ".tmp")
    os.chmod(target + ".tmp", 0o755)
    os.replace(target + ".tmp", target)
    print(f"installed {target}")
