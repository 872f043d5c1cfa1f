"""LSP messages as :mod:`lsprotocol`'s typed objects, and the one converter to and from JSON.

The client builds what it sends (``initialize``, ``didOpen``, the questions)
from ``lsprotocol.types`` and reads the answers and diagnostics back into them,
so a misspelt field is a type error rather than a message the server ignores.
The JSON-RPC envelope and its framing stay plain dictionaries (see
:mod:`zuno.integrations.lsp.connection`).

:mod:`lsprotocol` takes about 0.2 s to import: only the modules that run with a
live server import this one (the client, its inbound handler, the
diagnostics), never the ``lsp`` tool's module itself.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import cattrs
from lsprotocol import types
from lsprotocol.converters import get_converter

from zuno.integrations.lsp.errors import ResponseError

__all__ = ["answer_of", "converter", "to_json"]


@functools.cache
def converter() -> cattrs.Converter:
    """lsprotocol's converter (camelCase JSON, its unions and enums), made once."""
    return get_converter()


def to_json(message: object) -> Any:
    """The JSON of an lsprotocol object (its ``None`` fields left out)."""
    return converter().unstructure(message)


@functools.cache
def _result_type(method: str) -> Any:
    response = types.METHOD_TO_TYPES[method][1]
    return attrs.fields(response).result.type


def answer_of(method: str, result: Any) -> Any:
    """The ``result`` of the request ``method`` as lsprotocol objects.

    Raises:
        ResponseError: the answer does not have the shape the protocol gives it.
    """
    try:
        return converter().structure(result, _result_type(method))
    except Exception as exc:  # cattrs' validation errors, and the hooks' own
        detail = "; ".join(cattrs.transform_error(exc))
        raise ResponseError(method, 0, f"the answer is not valid LSP ({detail})") from None
