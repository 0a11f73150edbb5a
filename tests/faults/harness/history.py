"""A Jepsen-style history: every invocation and completion of the workload, in order.

An operation is recorded twice: once when a worker *invokes* it, once when it completes
as ``ok`` (it happened, with what it returned), ``fail`` (it certainly did not happen) or
``info`` (unknown: a timeout, a lost connection, a delivery error librdkafka could not
classify). Workers are threads; :class:`History` is the only shared object and takes a
lock per append.

Values of the three functions (``key`` names a log: ``"topic/partition"``):

=========  ======================  ===========================================
f          invoke value            ok value
=========  ======================  ===========================================
send       ``(key, v)``            ``(key, v, offset)``
poll       ``None``                ``{key: [(offset, v), ...]}`` in read order
assign     ``[key, ...]``          ``[key, ...]`` (positions reset to the start)
=========  ======================  ===========================================

A ``fail``/``info`` send keeps the invoke value plus an error text:
``(key, v, error)``.
"""

import dataclasses
import threading
import time

__all__ = ["Op", "History", "INVOKE", "OK", "FAIL", "INFO"]

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


@dataclasses.dataclass(frozen=True)
class Op:
    process: int          # the worker: each producer and each consumer has its own
    type: str             # INVOKE, OK, FAIL or INFO
    f: str                # "send", "poll" or "assign"
    value: object
    time: float = 0.0     # seconds since the history began (for reports only)
    index: int = -1       # position in the history

    def __str__(self):
        return f"{self.index:6d} {self.time:8.3f} p{self.process} {self.type:6s} {self.f} " \
               f"{self.value!r}"


class History:
    """An append-only, thread-safe list of :class:`Op`."""

    def __init__(self):
        self._ops = []
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def add(self, process, type_, f, value):
        with self._lock:
            op = Op(process, type_, f, value, time.monotonic() - self._start, len(self._ops))
            self._ops.append(op)
            return op

    def ops(self):
        with self._lock:
            return list(self._ops)

    def __len__(self):
        return len(self._ops)

    def excerpt(self, predicate, limit=20):
        """The text of up to ``limit`` ops that satisfy ``predicate`` (for bug reports)."""
        return "\n".join(str(op) for op in self.ops() if predicate(op))[:limit * 200]
