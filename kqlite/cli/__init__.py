"""The ``kqlite`` command. Each subcommand lives in its own module; ``main`` parses
arguments and dispatches. This is the top layer: it may import everything."""

from .main import main

__all__ = ["main"]
