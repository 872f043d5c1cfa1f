"""Configuration: loading and merging zuno.json, its sections, trust of workspace configs,
narrowing.
"""
