"""What the lsp tests share: the sample project, the fake server, and a skip mark."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.execution.server_launch import find_program

FAKE_SERVER = Path(__file__).with_name("fake_lsp_server.py")

A_PY = '''\
def greet(name: str) -> str:
    """Say hello."""
    return "hi " + name


class Box:
    def size(self) -> int:
        return 1
'''

B_PY = """\
from a import greet

x: int = "s"
print(greet("bob"))
"""

# The emoji takes two UTF-16 code units: columns must be counted in characters.
C_PY = """\
from a import greet

pair = ("\U0001f600", greet("ann"))
"""

requires_pyright = pytest.mark.skipif(
    find_program("pyright-langserver") is None,
    reason="pyright-langserver is not installed (pip install pyright)",
)


def fake_server(mode: str) -> dict[str, Any]:
    """``lsp.servers`` entry for ``.fake`` files served by the fake server in ``mode``."""
    # Unconfined: it logs its methods and pid outside the workspace.
    return {
        ".fake": {
            "command": [sys.executable, str(FAKE_SERVER), mode],
            "install": "no way",
            "sandbox": False,
        }
    }
