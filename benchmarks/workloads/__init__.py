"""The workloads, in the order run.py runs them (machine limits first)."""

from . import (aio, append, authorization, broker, broker_peer, cluster, durable, in_process,
               machine, mirror, multiprocess, native, read, recovery, retention, security, spark,
               transactions)

WORKLOADS = [machine, native, append, read, durable, aio, multiprocess, retention, recovery,
             broker, broker_peer, transactions, security, authorization, cluster, in_process,
             mirror, spark]
