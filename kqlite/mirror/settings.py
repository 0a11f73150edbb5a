"""A mirror's settings, checked before anything is asked of a cluster.

Theory of operation. :class:`MirrorSettings` is what ``kqlite mirror`` parses and what
the library entry point (:func:`kqlite.mirror.run_mirror`) takes. Its defaults are MM2's
where MM2 has one (``offset.lag.max`` 100, the topic and group excludes, the policy,
at-least-once delivery: ``exactly_once`` off, as MM2's ``exactly.once.source.support``),
and shorter intervals where MM2's suit a long-running Connect cluster (refresh 10 s, not
600 s; checkpoints every 5 s, not 60 s). :meth:`MirrorSettings.validate` refuses what
cannot be used with :class:`~kqlite.mirror.selection.MirrorConfigError`.
"""

import dataclasses
import re
from typing import Optional

from .client import parse_servers
from .selection import MirrorConfigError, group_filter, topic_filter

__all__ = ["MirrorSettings", "MODES", "POLICIES"]

MODES = ("mm2", "preserve")
POLICIES = ("default", "identity")
_ALIAS = re.compile(r"[A-Za-z0-9_\-]+")


@dataclasses.dataclass
class MirrorSettings:
    source: str
    target: str
    topics: str = ".*"
    exclude: Optional[str] = None
    groups: str = ".*"
    groups_exclude: Optional[str] = None
    # "" chooses: preserve when the target can hold mirror topics, else mm2
    # (preserve.chosen_mode).
    mode: str = ""
    policy: str = "default"
    source_alias: str = "source"
    target_alias: str = "target"
    replication_factor: int = -1
    offset_lag_max: int = 100
    offset_syncs_location: str = "source"
    sync_group_offsets: bool = False
    emit_heartbeats: bool = True
    emit_checkpoints: bool = True
    refresh_interval: float = 10.0
    checkpoint_interval: float = 5.0
    heartbeat_interval: float = 1.0
    sync_flush_interval: float = 5.0
    fetch_max_wait_ms: int = 500
    # One target batch per partition per round: under Kafka's default max.message.bytes
    # (1 MiB plus the batch overhead).
    max_batch_bytes: int = 1_000_000
    timeout: float = 30.0
    # MM2 mode: each round's records, positions and target offset syncs in one target
    # transaction (kqlite/mirror/transactions.py); mirror_id names the mirror in its
    # transactional id, so the same mirror started again fences the old one.
    exactly_once: bool = False
    mirror_id: str = "mirror"

    def validate(self) -> "MirrorSettings":
        for what, servers in (("source", self.source), ("target", self.target)):
            try:
                parse_servers(servers)
            except ValueError as exc:
                raise MirrorConfigError(f"--{what}: {exc}") from None
        topic_filter(self.topics, self.exclude)
        group_filter(self.groups, self.groups_exclude)
        if self.mode and self.mode not in MODES:
            raise MirrorConfigError(f"mode {self.mode!r}: this kqlite mirrors in "
                                    f"{', '.join(MODES)} mode")
        if self.policy not in POLICIES:
            raise MirrorConfigError(f"policy {self.policy!r}: default or identity")
        for what, alias in (("source", self.source_alias), ("target", self.target_alias)):
            if not _ALIAS.fullmatch(alias):
                raise MirrorConfigError(f"{what} alias {alias!r}: letters, digits, _ and - "
                                        f"only (the policy's separator is '.')")
        if not _ALIAS.fullmatch(self.mirror_id):
            raise MirrorConfigError(f"mirror id {self.mirror_id!r}: letters, digits, _ and - "
                                    f"only")
        if self.exactly_once and self.mode == "preserve":
            raise MirrorConfigError("--exactly-once is for mm2 mode: preserve mode copies "
                                    "each batch once at its source offset already")
        if self.source_alias == self.target_alias:
            raise MirrorConfigError("the source and target aliases must differ")
        if self.offset_syncs_location not in ("source", "target"):
            raise MirrorConfigError("offset syncs location: source or target")
        if self.max_batch_bytes < 1024:
            raise MirrorConfigError("max batch bytes must be at least 1024")
        if self.offset_lag_max < 0:
            raise MirrorConfigError("offset.lag.max must be >= 0")
        return self
