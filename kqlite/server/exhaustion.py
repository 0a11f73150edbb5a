"""Running out of disk space or file descriptors: one clear log line per episode.

Theory of operation: a full disk (ENOSPC, EDQUOT) or a full descriptor table (EMFILE,
ENFILE) is not a fault of one partition or one client, and it ends when the operator
frees space or descriptors, not when the broker restarts. While it lasts, every request
that needs the resource fails (the partition answers KAFKA_STORAGE_ERROR, as Kafka
answers a storage exception; the acceptor waits), and a busy broker would otherwise log
thousands of identical lines or tracebacks that bury the cause.

So each resource has at most one open *episode*: the first failure logs an error naming
the resource, the operation and the fix; later failures are only counted
(``failures``, a metric). The episode ends when one of the operations that failed in it
(a partition's append or read, the acceptor) succeeds again, which is logged once with
the number of failed operations. Nothing here retries: the next request simply tries
again, and a log that a failed write left unusable is reopened by its partition
(local_partition.py), so the partition works again without a restart.

Called from storage threads and the event loop alike, hence the lock; the check on
every success is a lock-free read of an (almost always empty) dict.
"""

import errno
import logging
import threading
import time

__all__ = ["ResourceAlarms", "DISK_SPACE", "DESCRIPTORS", "exhausted_resource"]

DISK_SPACE = "disk space"
DESCRIPTORS = "file descriptors"

_RESOURCE_OF_ERRNO = {
    errno.ENOSPC: DISK_SPACE,
    errno.EDQUOT: DISK_SPACE,
    errno.EMFILE: DESCRIPTORS,
    errno.ENFILE: DESCRIPTORS,
}

_REMEDY = {
    DISK_SPACE: "free space in the data dir's file system (or lower retention)",
    DESCRIPTORS: "raise the descriptor limit (ulimit -n), or lower max.connections or "
                 "the number of open logs",
}

log = logging.getLogger("kqlite.server")


def exhausted_resource(exc):
    """The resource whose exhaustion caused ``exc`` (an exception, its cause or its
    context: storage wraps OSErrors in StorageError), or None."""
    seen = 0
    while exc is not None and seen < 8:      # a chain is short; a cycle must not hang us
        resource = _RESOURCE_OF_ERRNO.get(getattr(exc, "errno", None))
        if resource is not None:
            return resource
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class _Episode:
    __slots__ = ("started", "failures", "failed_keys")

    def __init__(self):
        self.started = time.monotonic()
        self.failures = 0
        self.failed_keys = set()


class ResourceAlarms:
    """Episodes of resource exhaustion, broker-wide (see the module docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._episodes = {}          # resource -> _Episode
        self.failures = {DISK_SPACE: 0, DESCRIPTORS: 0}   # since start, for metrics

    def check(self, exc, key, what):
        """If ``exc`` comes from an exhausted resource, record the failure of ``key``
        (a partition, "accept") doing ``what`` and return the resource; else None."""
        resource = exhausted_resource(exc)
        if resource is not None:
            self.failed(resource, key, what, exc)
        return resource

    def failed(self, resource, key, what, exc):
        with self._lock:
            self.failures[resource] += 1
            episode = self._episodes.get(resource)
            first = episode is None
            if first:
                episode = self._episodes[resource] = _Episode()
            episode.failures += 1
            episode.failed_keys.add(key)
        if first:
            log.error("out of %s: %s failed: %s. Requests that need it fail (partitions "
                      "answer KAFKA_STORAGE_ERROR) and are tried again as they come, "
                      "without a restart; acknowledged data is not affected. To recover, "
                      "%s. Further failures are counted, not logged, until it works again.",
                      resource, what, _reason(exc), _REMEDY[resource])

    def recovered(self, key):
        """``key`` just did what it failed to do: ends the episodes it failed in."""
        if not self._episodes:
            return
        ended = []
        with self._lock:
            for resource, episode in list(self._episodes.items()):
                if key in episode.failed_keys:
                    del self._episodes[resource]
                    ended.append((resource, episode))
        for resource, episode in ended:
            log.warning("%s available again (%s works): %d operation(s) failed over "
                        "%.1f s while it was exhausted", resource, _describe(key),
                        episode.failures, time.monotonic() - episode.started)

    def exhausted(self):
        """The resources in an open episode now."""
        return sorted(self._episodes)


def _reason(exc):
    """The OSError's own words ("[Errno 28] No space left on device: path")."""
    cause = exc
    for _ in range(8):
        if cause is None or getattr(cause, "errno", None) in _RESOURCE_OF_ERRNO:
            break
        cause = cause.__cause__ or cause.__context__
    return str(cause if cause is not None else exc)


def _describe(key):
    if isinstance(key, tuple) and len(key) == 2:
        return f"partition {key[0]}-{key[1]}"
    return str(key)
