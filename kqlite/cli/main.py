"""Argument parsing and dispatch for the ``kqlite`` command."""

import argparse
import logging
import sys

from .. import __version__
from . import (acls, check, cluster, consume, dump, groups, mirror, produce, quotas, serve,
               topics, transactions, ui, users)

COMMANDS = [produce, consume, topics, groups, dump, check, serve, cluster, users, acls, quotas,
            transactions, mirror, ui]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kqlite", description="kqlite: Kafka's log storage as an embedded database")
    parser.add_argument("--version", action="version", version=f"kqlite {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help="logging threshold (default: warning; info for serve)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose or args.command == "serve"  # a server logs its connections
    level = args.log_level.upper() if args.log_level else ("INFO" if verbose else "WARNING")
    logging.basicConfig(level=level,
                        format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        from ..errors import KqliteError
        if isinstance(exc, (KqliteError, OSError)):
            print(f"kqlite {args.command}: {exc}", file=sys.stderr)
            return 1
        raise
