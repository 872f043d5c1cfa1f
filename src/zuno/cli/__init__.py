"""The ``zuno`` command line."""

from zuno.cli import agent_cmds as agent_cmds  # registers commands
from zuno.cli import chat as chat  # registers commands
from zuno.cli import fleet_cmds as fleet_cmds  # registers commands
from zuno.cli import gc as gc  # registers commands
from zuno.cli import mcp_cmds as mcp_cmds  # registers commands
from zuno.cli import memory_cmds as memory_cmds  # registers commands
from zuno.cli import network_cmds as network_cmds  # registers commands
from zuno.cli import server_cmds as server_cmds  # registers commands
from zuno.cli import trust_cmds as trust_cmds  # registers commands
from zuno.cli import undo_cmds as undo_cmds  # registers commands
from zuno.cli.app import app, main

__all__ = ["app", "main"]
