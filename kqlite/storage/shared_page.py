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

A process can also sleep until another one changes a 32-bit word of the page
(:func:`wait_word`, :func:`wake_word`): Linux futexes, which work across
processes on a shared file mapping (the kernel keys them by file and offset,
so two mappings of the page, in one process or two, meet on the same word).
Elsewhere :data:`CAN_WAIT` is False and the callers poll instead.
"""

import ctypes
import errno
import mmap
import os
import platform
import sys

__all__ = ["SharedPage", "map_page", "PAGE_SIZE", "CAN_WAIT", "wait_word", "wake_word"]

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

# The futex system call's number where we know it (it differs by architecture).
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98,
              "i386": 240, "i686": 240, "armv7l": 240, "ppc64le": 221, "ppc64": 221,
              "s390x": 238}.get(platform.machine().lower()) if sys.platform == "linux" else None
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1     # not FUTEX_PRIVATE_FLAG: the waiters are other processes
_WAKE_ALL = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_syscall = None
if _SYS_FUTEX is not None and _mmap is not None:
    try:
        _syscall = _libc.syscall
    except AttributeError:
        pass
    else:
        _syscall.restype = ctypes.c_long
        _syscall.argtypes = (ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)

CAN_WAIT = _syscall is not None


def wait_word(view, offset, value, timeout):
    """Sleep while the u32 at ``offset`` of a SharedPage's ``view`` holds ``value``: until
    :func:`wake_word` on it (from any process), ``timeout`` seconds, or a signal. Returns
    at once when the word already differs. Callers look again at what they wait for: a
    return says only that it may have changed. False when the sleep ended by the timeout
    (True for a wake, a word that differed, a signal). ValueError once the page is
    closed."""
    sec = int(timeout)
    ts = _Timespec(sec, int((timeout - sec) * 1e9))
    if _syscall(_SYS_FUTEX, ctypes.addressof(view.obj) + offset, _FUTEX_WAIT, value,
                ctypes.byref(ts), None, 0) == 0:
        return True
    return ctypes.get_errno() != errno.ETIMEDOUT


def wake_word(view, offset):
    """Wake every process sleeping in :func:`wait_word` on the u32 at ``offset``."""
    _syscall(_SYS_FUTEX, ctypes.addressof(view.obj) + offset, _FUTEX_WAKE, _WAKE_ALL,
             None, None, 0)


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
