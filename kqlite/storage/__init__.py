"""Storage layer: a Kafka partition directory on disk.

Contract: byte-compatible with Kafka's ``.log``/``.index``/``.timeindex`` files and
checkpoints; every OS call goes through the seam in ``fs.py``; this package
imports only ``kqlite.format``, ``kqlite._native`` and ``kqlite.errors``.

Modules: ``log`` (the Log), ``segment``, ``index``, ``scan`` (chunked batch walk),
``state`` and ``locking`` (multi-process sharing), ``checkpoint`` and ``data_dir``
(Kafka's text files), ``leader_epoch``, ``flusher`` (flush.ms), ``config``,
``cleaner`` (log compaction) and ``swap`` (its crash-safe segment replacement).
"""
