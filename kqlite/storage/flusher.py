"""One background thread that fsyncs logs whose ``flush.ms`` has elapsed.

Kafka's "every S seconds" flush must happen even when no further append comes
to trigger it, so a timer is needed; one daemon thread serves every Log in the
process and only runs while at least one registered Log has ``flush.ms`` set.
"""

import logging
import threading
import time
import weakref

__all__ = ["register", "unregister"]

_logs = weakref.WeakSet()
_cond = threading.Condition()
_thread = None

log = logging.getLogger("kqlite.storage")


def register(target):
    global _thread
    with _cond:
        _logs.add(target)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="kqlite-flusher", daemon=True)
            _thread.start()
        _cond.notify()


def unregister(target):
    with _cond:
        _logs.discard(target)


def _run():
    while True:
        with _cond:
            current = list(_logs)
            if not current:
                _cond.wait(1.0)
                continue
            interval = min(lg.config["flush.ms"] for lg in current) / 1000.0
            _cond.wait(max(0.005, min(interval / 2, 1.0)))
        now = time.monotonic()
        for lg in current:
            try:
                lg._flush_if_due(now)
            except Exception as exc:  # a failed log reports on its next append; keep serving others
                log.error("background flush of %s failed: %s", getattr(lg, "path", lg), exc)
