"""Entry point of a fault-test broker: ``kqlite`` with its outgoing connections bound to
the broker's own loopback address, then ``kqlite.cli`` unchanged.

Kafka has no option that sets the local address of a broker's outgoing connections (the
kernel picks 127.0.0.1 for any 127.x destination), and the proxies need it to tell which
broker opened a connection. So this wrapper gives ``asyncio.open_connection`` — which
the broker's inter-broker client (``kqlite/cluster/network/broker_client.py``) calls for every
controller channel and replica fetcher — a default ``local_addr`` of the address in
``KQLITE_FAULTS_SOURCE_IP``. Client-facing sockets and the ZooKeeper session (kazoo,
plain sockets) are untouched: each broker reaches ZooKeeper through its own proxy.

With ``KQLITE_FAULTS_POWER_LOSS=1`` the broker also keeps the undo journal of
``power_loss.py`` next to its ``--data-dir`` (its storage seam patched before kqlite
runs), so that the harness can cut its power: SIGKILL, then roll the data dir back to
what it fsynced.

    python broker_main.py serve --data-dir ... --zookeeper ...
"""

import asyncio
import os
import sys


def _bind_outgoing(source_ip):
    original = asyncio.open_connection

    async def open_connection(host=None, port=None, **kwargs):
        if "local_addr" not in kwargs and "sock" not in kwargs and \
                str(host).startswith("127."):
            kwargs["local_addr"] = (source_ip, 0)
        return await original(host, port, **kwargs)

    asyncio.open_connection = open_connection


def _data_dir(argv):
    for i, arg in enumerate(argv):
        if arg == "--data-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--data-dir="):
            return arg.split("=", 1)[1]
    raise SystemExit("broker_main.py: power-loss journaling needs --data-dir")


def _journal_storage(data_dir):
    import power_loss        # this script's directory is sys.path[0]
    power_loss.install(data_dir, power_loss.journal_dir_of(data_dir))


def main():
    if os.environ.get("KQLITE_FAULTS_POWER_LOSS") == "1":
        _journal_storage(_data_dir(sys.argv[1:]))
    source_ip = os.environ.get("KQLITE_FAULTS_SOURCE_IP")
    if source_ip:
        _bind_outgoing(source_ip)
    from kqlite.cli.main import main as kqlite_main
    return kqlite_main()


if __name__ == "__main__":
    sys.exit(main())
