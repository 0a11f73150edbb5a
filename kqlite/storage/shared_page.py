"""One page of a file mapped shared between processes, without a descriptor of its own.

``mmap.mmap`` duplicates the descriptor it maps (Python 3.11 has no way to
refuse), and an open Log must cost no more descriptors than it did (many logs
are open at once in a data dir). So the page is mapped with the C library's
``mmap`` through ctypes, from the descriptor the Log already has, and exposed as
a memoryview. :meth:`SharedPage.close` releases the view before unmapping, so a
use after close raises ValueError instead of touching unmapped memory; the
owner (sharing.SharedFiles) closes it under the Log's thread lock, which every
user of the page holds.

Where the C library cannot be reached this way (not POSIX), :func:`map_page`
answers None and the callers read and write the file instead.
"""

import ctypes
import mmap
import os

__all__ = ["SharedPage", "map_page", "PAGE_SIZE"]

PAGE_SIZE = 4096

try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _mmap = _libc.mmap
    _munmap = _libc.munmap
except (OSError, AttributeError):     # not a POSIX C library
    _mmap = _munmap = None
else:
    _mmap.restype = ctypes.c_void_p
    _mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long)
    _munmap.restype = ctypes.c_int
    _munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)

_MAP_FAILED = ctypes.c_void_p(-1).value


class SharedPage:
    """PAGE_SIZE bytes of a file, mapped MAP_SHARED; ``view`` is a writable memoryview."""

    __slots__ = ("view", "_addr")

    def __init__(self, addr):
        self._addr = addr
        self.view = memoryview((ctypes.c_char * PAGE_SIZE).from_address(addr)).cast("B")

    def close(self):
        if self._addr is not None:
            addr, self._addr = self._addr, None
            self.view.release()
            _munmap(addr, PAGE_SIZE)


def map_page(fd):
    """The first PAGE_SIZE bytes of the file open as ``fd`` (at least that long), or None
    where this platform offers no way to map them."""
    if _mmap is None:
        return None
    addr = _mmap(None, PAGE_SIZE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot map the shared state page: {os.strerror(err)}")
    return SharedPage(addr)
