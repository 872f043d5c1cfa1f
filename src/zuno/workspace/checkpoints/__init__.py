"""Checkpoints: a shadow git store of the workspace taken before side-effecting calls, and undo."""
