"""The ``kqlite`` command. Each subcommand lives in its own module; ``main`` parses
arguments and dispatches. This is the top layer: it may import every other layer but the
Spark data source (docs/architecture.md's layer table)."""

from .main import main

__all__ = ["main"]
