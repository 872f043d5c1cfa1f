"""The ``zuno`` command line."""

# Each module registers its commands on the app as it is imported: this order is
# the order in which `zuno --help` lists them (commands first, then groups).
# isort: off
from zuno.cli import call_cmds as call_cmds  # tools, call, batch
from zuno.cli import session_cmds as session_cmds  # sessions, show
from zuno.cli import config_cmds as config_cmds  # doctor; the config group
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

# isort: on
from zuno.cli.app import app, main

__all__ = ["app", "main"]
