"""Broker and CLI child processes of the adoption tests, run with the C helpers (the
tests run in the pure-Python pass; the brokers need not)."""

import subprocess
import sys

from cluster_processes import ClusterBroker, child_environment, until

__all__ = ["FastBroker", "child_environment", "kqlite_cli", "until"]

# tests/cluster's broker process, which runs with the C helpers in either pass.
FastBroker = ClusterBroker


def kqlite_cli(*args, timeout=120):
    """``kqlite ARGS`` as a child process: (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "kqlite.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=child_environment())
    return done.returncode, done.stdout, done.stderr
