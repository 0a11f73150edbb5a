"""Storage layer: a Kafka partition directory on disk.

Contract: byte-compatible with Kafka's ``.log``/``.index``/``.timeindex`` files and
checkpoints; every OS call goes through the seam in ``fs.py``; this package
imports only ``kqlite.format``, ``kqlite._native`` and ``kqlite.errors``.

Modules: ``log`` (the Log facade; its docstring maps the modules that implement it:
``segments``, ``loader``, ``sharing``, ``appending``, ``reads``, ``retention``,
``offset_checkpoints``, ``cleanable``), ``segment``, ``index``, ``scan`` (the one
segment walker), ``isolation`` (how far a read may go), ``state`` and ``locking``
(multi-process sharing), ``checkpoint`` and ``data_dir`` (Kafka's text files),
``leader_epoch``, ``flusher`` (flush.ms), ``config``, ``cleaner`` (log compaction)
and ``swap`` (its crash-safe segment replacement), ``verify`` (kqlite check),
``producer_state`` (idempotent producers).

Public names here: :class:`Isolation` (a read's limit) and :class:`BatchHeader`
(what ``Log.batch_headers`` yields: ``kqlite.format``'s one header type).
"""

from ..format.header import BatchHeader as BatchHeader
from .isolation import Isolation as Isolation

__all__ = ["Isolation", "BatchHeader"]
