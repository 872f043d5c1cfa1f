"""``python -m zuno``."""

from zuno.cli import main

main()
