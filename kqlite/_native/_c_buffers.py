"""How the cffi wrappers hand buffers to C, shared by _c.py and the wrappers it gathers
(_c_seek.py, _c_summary.py, _c_values.py), none of which imports another.

``bytes`` go to C directly; anything else (bytearray, memoryview, mmap) through
``ffi.from_buffer``, whose cdata the caller releases before returning so that an mmap
can be closed right after a call. Scratch arrays come from an allocator that does not
clear them: C writes every element it reports.
"""

from ._cnative import ffi

__all__ = ["pointer", "alloc", "release", "unpack"]

release = ffi.release
unpack = ffi.unpack
alloc = ffi.new_allocator(should_clear_after_alloc=False)
_from_buffer = ffi.from_buffer


def pointer(data):
    """(C pointer, byte length, cdata to release or None) for a contiguous buffer."""
    if type(data) is bytes:
        return data, len(data), None
    try:
        cdata = _from_buffer(data)
    except (TypeError, ValueError, BufferError):
        if isinstance(data, str):
            raise TypeError("a bytes-like object is required, not 'str'") from None
        data = memoryview(data).tobytes()        # non-contiguous views
        return data, len(data), None
    return cdata, len(cdata), cdata
