"""The built-in tools, one module per family.

Their table (:data:`zuno.session.builtin_tools.BUILTINS`) stands beside the
runtime that registers them: a tool's module is imported the first time the
tool is described or called.
"""
