"""The ``zuno`` command line: one module per family of commands, joined in :mod:`zuno.cli.main`."""
