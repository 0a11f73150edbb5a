"""Broker and CLI child processes of the adoption tests, run with the C helpers (the
tests run in the pure-Python pass; the brokers need not): tests/cluster's
:class:`ClusterBroker`, which runs with the C helpers in either pass."""

import subprocess
import sys

from cluster_processes import ClusterBroker, child_environment, until

__all__ = ["ClusterBroker", "child_environment", "kqlite_cli", "start_registered", "until",
           "wait_registered"]


def wait_registered(zk, broker_ids):
    """Wait until every broker of ``broker_ids`` is registered in ZooKeeper (``zk``, a
    kazoo client of the cluster's chroot): until then the controller places no replica
    on it."""
    wanted = {str(b) for b in broker_ids}
    until(lambda: wanted <= set(zk.get_children("/brokers/ids")),
          f"brokers {', '.join(sorted(wanted))} registered")


def start_registered(brokers, zk):
    """Start ``brokers`` (ClusterBroker) together, wait for each to listen and to register."""
    for b in brokers:
        b.start()
    for b in brokers:
        b.wait_listening()
    wait_registered(zk, [b.broker_id for b in brokers])
    return brokers


def kqlite_cli(*args, timeout=120):
    """``kqlite ARGS`` as a child process: (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "kqlite.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=child_environment())
    return done.returncode, done.stdout, done.stderr
