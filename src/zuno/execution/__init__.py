"""Running programs: processes, the PTY, sandboxes and the egress proxy, ripgrep, launching
servers.
"""
