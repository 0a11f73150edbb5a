"""Broker and CLI child processes of the adoption tests, run with the C helpers (the
tests run in the pure-Python pass; the brokers need not)."""

import os
import subprocess
import sys

from cluster_processes import ClusterBroker, until

__all__ = ["FastBroker", "child_environment", "kqlite_cli", "until"]


def child_environment():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("KQLITE_PURE_PYTHON", None)
    return env


class FastBroker(ClusterBroker):
    """tests/cluster's broker process, with the C helpers."""

    def environment(self):
        return child_environment()


def kqlite_cli(*args, timeout=120):
    """``kqlite ARGS`` as a child process: (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "kqlite.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=child_environment())
    return done.returncode, done.stdout, done.stderr
