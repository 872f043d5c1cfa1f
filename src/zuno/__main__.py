"""``python -m zuno``: the same as the ``zuno`` script (the command server included)."""

from zuno.cli.launcher import main

main()
