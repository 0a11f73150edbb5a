"""Group commit's rendezvous in C (csrc/rounds.c), behind pure_rounds.Rounds' methods."""

from ._cnative import ffi, lib

_writing = lib.kq_rounds_writing
_enter = lib.kq_rounds_enter
_leave = lib.kq_rounds_leave
_LEAD = lib.KQ_ROUND_LEAD


class Rounds:
    __slots__ = ("_r",)

    def __init__(self):
        r = lib.kq_rounds_new()
        if r == ffi.NULL:
            raise MemoryError("kq_rounds_new")
        self._r = ffi.gc(r, lib.kq_rounds_free)

    def writing(self, delta):
        _writing(self._r, delta)

    def enter(self, gather_ns):
        return _enter(self._r, gather_ns) == _LEAD

    def leave(self):
        _leave(self._r)
