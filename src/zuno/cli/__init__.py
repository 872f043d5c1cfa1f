"""The ``zuno`` command line."""

from zuno.cli.app import app, main

__all__ = ["app", "main"]
