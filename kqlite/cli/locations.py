"""Where the security commands (``kqlite acls``, ``kqlite quotas``) find what they manage,
one of three places, as Kafka's tools reach them:

- ``--data-dir DIR``: a single broker's data dir (each command its own store over it);
- ``--zookeeper HOST:PORT[/CHROOT]``: a cluster's ZooKeeper (:class:`ZooKeeperLocation`,
  a connected kazoo client);
- ``--bootstrap-server HOST:PORT[,...]``: any broker through its APIs
  (:class:`BrokerLocation`, the CLI's admin client), logged in as ``--command-config``
  says (TLS and SASL, admin_client.py).

:func:`add_location_options` declares the options, :func:`check_location` refuses the
combinations argparse cannot (a ``--command-config`` without a broker), and
:func:`open_location` opens the place or says why it cannot.
"""

import sys

__all__ = ["DEFAULT_TIMEOUT", "add_location_options", "check_location", "open_location",
           "ZooKeeperLocation", "BrokerLocation"]

DEFAULT_TIMEOUT = 10.0


def add_location_options(parser, apis):
    """The three places, one of them required; ``apis`` names what a broker is asked
    through (for the help text)."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", metavar="DIR", help="a single broker's data dir")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="a cluster's zookeeper.connect")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help=f"a broker, through {apis}")
    parser.add_argument("--command-config", metavar="FILE",
                        help="with --bootstrap-server: the client's security properties "
                             "(security.protocol, sasl.*, ssl.*), as Kafka's tools take them")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"give up reaching ZooKeeper or the broker after this long "
                             f"(default {DEFAULT_TIMEOUT:g})")


def check_location(args):
    """A usage error's text, or None."""
    if args.command_config is not None and args.bootstrap_server is None:
        return "--command-config goes with --bootstrap-server"
    return None


def open_location(args, command, make):
    """``(store, None)`` from ``make(args)``, or ``(None, exit status)`` once the reason
    is printed: 2 for a ``--bootstrap-server`` or ``--command-config`` that cannot be
    used, 1 for a place that cannot be reached."""
    from .admin_client import AdminConfigError
    try:
        return make(args), None
    except AdminConfigError as exc:
        print(f"kqlite {command}: {exc}", file=sys.stderr)
        return None, 2
    except Exception as exc:          # noqa: BLE001 -- unreachable: reported, status 1
        print(f"kqlite {command}: {exc}", file=sys.stderr)
        return None, 1


class ZooKeeperLocation:
    """A cluster's ZooKeeper: ``self.zk``, connected within ``--timeout``."""

    def __init__(self, args):
        from ..cluster.zookeeper.snapshot import connect
        from .kazoo_logging import quiet_kazoo
        quiet_kazoo(args)
        self.zk = connect(args.zookeeper, args.timeout)

    def close(self):
        self.zk.stop()
        self.zk.close()


class BrokerLocation:
    """A broker asked through :meth:`call` at a version within ``VERSIONS``;
    ``--command-config`` that cannot be used raises admin_client.AdminConfigError."""

    VERSIONS = None
    CLIENT_ID = "kqlite-admin"

    def __init__(self, args):
        from .admin_client import AdminClient, read_command_config
        self.client = AdminClient(args.bootstrap_server,
                                  security=read_command_config(args.command_config),
                                  timeout=args.timeout, client_id=self.CLIENT_ID)

    def call(self, api_key, body):
        return self.client.call(api_key, body, versions=self.VERSIONS)

    def close(self):
        self.client.close()
