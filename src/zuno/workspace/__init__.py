"""Effects on the workspace: confined file access, real paths, checkpoints, the patch engine,
watching for changes.
"""
