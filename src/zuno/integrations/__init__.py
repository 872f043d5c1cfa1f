"""Zuno as a client of other programs: MCP servers, language servers, the web."""
