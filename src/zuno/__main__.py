"""``python -m zuno``: the same as the ``zuno`` script (the command server included)."""

from zuno.launcher import main

main()
