"""A `kqlite serve` broker (as ``python txn_crash_broker.py DATA_DIR STEP PRODUCER_ID EPOCH
TIMEOUT_MS``) whose file-system seam SIGKILLs the process at one step of a transaction's
commit, for tests/server/test_transactions_crash.py. Without a step (``none``) it is a
plain broker. It prints ``listening on 127.0.0.1:PORT`` once it serves. It looks for
timed-out transactions every 200 ms.

The steps are recognised by what the broker writes, never by a hook in the broker:

    after-add-partitions    once the second Ongoing record of the transaction (its
                            second partition) is written to ``__transaction_state``
    after-prepare-commit    once its PrepareCommit record is written
    between-markers         before the second COMMIT marker is written (the first one is)
    before-complete-commit  before its CompleteCommit record is written

A transaction state record is recognised by the start of its value (version 0, the
producer id and epoch, the timeout, the status byte), a marker by its 78-byte control
batch (attributes 0x0030) written to a partition that is not internal.
"""

import asyncio
import os
import signal
import struct
import sys

from kqlite.format.transaction_records import TransactionStatus
from kqlite.server import Broker
from kqlite.server.coordinator.txn.config import TransactionConfig
from kqlite.storage.fs import OsFile, OsFileSystem

_MARKER_SIZE = 78
_MARKER_ATTRIBUTES = b"\x00\x30"
_ATTRIBUTES_AT = 21


class CrashingFile(OsFile):
    def __init__(self, path, fd, fs):
        super().__init__(path, fd)
        self._fs = fs

    def pwrite(self, data, pos):
        self._fs.before(self.path, bytes(data))
        written = super().pwrite(data, pos)
        self._fs.after(self.path, bytes(data))
        return written


class CrashingFS(OsFileSystem):
    def __init__(self, step, producer_id, epoch, timeout_ms):
        self.step = step
        self.markers = 0
        self.ongoing_records = 0

        def value(status):
            return struct.pack(">hqhib", 0, producer_id, epoch, timeout_ms, status)
        self.ongoing = value(TransactionStatus.ONGOING)
        self.prepare_commit = value(TransactionStatus.PREPARE_COMMIT)
        self.complete_commit = value(TransactionStatus.COMPLETE_COMMIT)

    def open(self, path, create=False):
        plain = super().open(path, create)
        return CrashingFile(plain.path, plain.fileno(), self)

    @staticmethod
    def _state(path):
        return "__transaction_state-" in path and path.endswith(".log")

    @staticmethod
    def _is_marker(path, data):
        return (path.endswith(".log") and "/__" not in path and len(data) == _MARKER_SIZE
                and data[_ATTRIBUTES_AT:_ATTRIBUTES_AT + 2] == _MARKER_ATTRIBUTES)

    def before(self, path, data):
        if self.step == "between-markers" and self._is_marker(path, data):
            self.markers += 1
            if self.markers == 2:
                _die()
        if self.step == "before-complete-commit" and self._state(path) \
                and self.complete_commit in data:
            _die()

    def after(self, path, data):
        if not self._state(path):
            return
        if self.step == "after-add-partitions" and self.ongoing in data:
            self.ongoing_records += 1
            if self.ongoing_records == 2:
                _die()
        if self.step == "after-prepare-commit" and self.prepare_commit in data:
            _die()


def _die():
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def main(data_dir, step, producer_id, epoch, timeout_ms):
    fs = None if step == "none" else CrashingFS(step, producer_id, epoch, timeout_ms)
    broker = Broker(data_dir, "127.0.0.1", 0, fs=fs,
                    transaction_config=TransactionConfig(abort_timed_out_interval_ms=200))
    await broker.start()
    print(f"listening on 127.0.0.1:{broker.port}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await broker.stop()


if __name__ == "__main__":
    data_dir, step, producer_id, epoch, timeout_ms = sys.argv[1:6]
    asyncio.run(main(data_dir, step, int(producer_id), int(epoch), int(timeout_ms)))
