"""Zuno."""
