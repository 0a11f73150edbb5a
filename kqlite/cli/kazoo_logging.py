"""kazoo's logging as the cluster commands want it: quiet unless asked for.

kazoo logs every failed connection attempt while it retries; a command that reads
ZooKeeper (``kqlite cluster describe``, ``partitions``, ``up``) reports the outcome
once instead. ``--verbose`` or ``--log-level`` keep kazoo's own lines.
"""

import logging

__all__ = ["quiet_kazoo"]


def quiet_kazoo(args):
    """kazoo logs every failed connection attempt; a command reports the outcome once."""
    if not (args.verbose or args.log_level):
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
