"""``proxy`` network mode: a closed namespace whose only way out is Zuno's proxy.

:mod:`.rules` decides what a call may reach, :mod:`.proxy` serves one call's
connections, :mod:`.ledger` records them, and :func:`bridged` /
:func:`proxy_environment` are what a sandbox backend adds to a command's
launch (the bridge in front of the argv, the proxy variables in its
environment).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["BRIDGE", "PROXY_PORT", "PROXY_URL", "SOCKS_CONNECT", "bridged", "proxy_environment"]

BRIDGE = Path(__file__).with_name("_bridge.py")
"""The script that hands the call's listener to Zuno, then execs the command."""

SOCKS_CONNECT = Path(__file__).with_name("_socks_connect.py")
"""The SSH ``ProxyCommand`` that reaches a host through the call's SOCKS5 proxy."""

PROXY_PORT = 3128
"""The loopback port of the proxy inside each call's own network namespace."""

PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
"""The proxy as a command sees it, on the loopback of its own namespace."""

_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "npm_config_proxy",
    "npm_config_https_proxy",
    "PIP_PROXY",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
)


def bridged(argv: Sequence[str], fd: int, python: str | None = None) -> list[str]:
    """argv behind the bridge, which receives the call's socket pair end as fd."""
    return [
        python or sys.executable,
        "-I",
        "-S",
        str(BRIDGE),
        str(fd),
        str(PROXY_PORT),
        "--",
        *argv,
    ]


def proxy_environment(env: Mapping[str, str], python: str | None = None) -> dict[str, str]:
    """env with every proxy variable naming the call's proxy, and no proxy exceptions.

    ``git`` over SSH goes through the proxy too: unless env sets its own,
    ``GIT_SSH_COMMAND`` is ``ssh`` with :data:`SOCKS_CONNECT` (run by python,
    this interpreter by default) as its ``ProxyCommand``.
    """
    out = {k: v for k, v in env.items() if k.lower() != "no_proxy"}
    out.update(dict.fromkeys(_VARIABLES, PROXY_URL))
    socks = f"socks5h://127.0.0.1:{PROXY_PORT}"
    out["ALL_PROXY"] = out["all_proxy"] = socks
    out["ZUNO_NETWORK"] = "proxy"
    out["ZUNO_SOCKS_PORT"] = str(PROXY_PORT)
    helper = shlex.join([python or sys.executable, "-I", "-S", str(SOCKS_CONNECT), "%h", "%p"])
    out.setdefault("GIT_SSH_COMMAND", shlex.join(["ssh", "-o", f"ProxyCommand={helper}"]))
    return out
