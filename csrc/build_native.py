"""cffi builder for kqlite's C helpers: ``kqlite._native._cnative``.

The cdef is csrc/kqlite_native.h with preprocessor lines removed; the ABI
number defined there is compiled in and checked by kqlite/_native/_c.py, so a
stale build is detected and the pure-Python twins are used instead.
"""

import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["crc.c", "records.c", "scan.c"]


def _header():
    with open(os.path.join(HERE, "kqlite_native.h")) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


ffibuilder = FFI()
ffibuilder.cdef(_header())
ffibuilder.set_source(
    "kqlite._native._cnative",
    '#include <stddef.h>\n#include <stdint.h>\n#include "kqlite_native.h"\n',
    sources=[os.path.relpath(os.path.join(HERE, s)) for s in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wno-unused-function"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
