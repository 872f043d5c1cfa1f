"""Zuno as a server: its tools served over MCP (stdio and HTTP)."""
