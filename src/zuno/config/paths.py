"""Where the user's configuration lives: ``zuno.json`` under the platform's config folder.

A module of its own, with no Zuno imports, so that what lies beside the user's
configuration (the trust records, the control paths) can find it without
importing the whole configuration model.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["CONFIG_NAME", "user_config_path"]

CONFIG_NAME = "zuno.json"
"""The name of a configuration file, the user's and the workspace's."""


def user_config_path() -> Path:
    """The user's configuration file (under ``$ZUNO_CONFIG_HOME`` when it is set)."""
    home = os.environ.get("ZUNO_CONFIG_HOME")
    base = Path(home) if home else Path(platformdirs.user_config_dir("zuno"))
    return base / CONFIG_NAME
