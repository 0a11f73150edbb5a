"""What kill -9 leaves of an open Log, for tests that reopen after a simulated crash."""

from kqlite.storage import flusher


def abandon(log):
    """Drop ``log`` the way a dead process does: its descriptors and locks go, nothing
    is written or fsynced on the way out.

    It happens under the log's lock, with the handle marked closed first: the lock
    hand-off thread (kqlite/storage/lock_handoff.py) may unlock a kept write lock at
    any moment, and must never find the shared state page unmapped under it."""
    flusher.unregister(log)
    with log._lock:
        log._closed = True
        log._segments.close_all()
        log._shared.release()
        if log._data_dir is not None:
            log._data_dir.release(clean=False)     # the data dir's files close with the process
