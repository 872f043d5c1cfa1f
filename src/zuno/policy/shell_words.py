"""How bash reads the words of a command, from tree-sitter-bash's tree.

:mod:`zuno.policy.shell_rules` walks the tree; this module answers the questions
about single words and the whole text that it asks: the value of a word after
quote removal (or None where bash would expand it), where bash lets a word
start and end, whether the parser read every byte, and the words of a command
that is one plain simple command.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

__all__ = [
    "ASSIGNMENT_START",
    "command_name",
    "descendants",
    "fully_read",
    "literal",
    "node_text",
    "parse",
    "plain_words",
    "word_edge",
]

# A word bash leaves literal: unquoted characters that are not special,
# backslash escapes, single quotes, double quotes with nothing expanded.
_PLAIN_WORD = re.compile(
    r"""(?:[^\s\x00-\x1f\x7f|&;()<>$`\\'"*?\[{}!]|\\[^\n]|'[^']*'|"[^"$`\\]*")+\Z"""
)
ASSIGNMENT_START = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[|\+?=)")
"""The start of a ``NAME=`` or ``NAME[`` assignment word."""
_BEFORE_HEREDOC = re.compile(rb"[ \t]+<<")
_TILDE = re.compile(r"(?:^|[=:])~")
_LITERAL_NODES = frozenset({"word", "raw_string", "string", "concatenation", "number"})


_parser_lock = threading.Lock()
_parser: Parser | None = None
"""Made by the first parse: a command that matches no shell rule never loads the grammar."""


def parse(source: bytes) -> Node:
    """The root of tree-sitter-bash's tree for ``source`` (the grammar is loaded once)."""
    global _parser
    # A tree-sitter Parser is not safe to share between threads.
    with _parser_lock:
        if _parser is None:
            import tree_sitter_bash
            from tree_sitter import Language, Parser

            _parser = Parser(Language(tree_sitter_bash.language()))
        return _parser.parse(source).root_node


def node_text(node: Node) -> str:
    """A node's source text (bytes that are not UTF-8 kept as surrogates)."""
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _unquoted(text: str) -> str | None:
    """The value of an unquoted word, or None when bash would expand it."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 < len(text) and text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        if c in "*?[$`" or (c == "~" and i == 0):
            return None
        if c == "{" and re.match(r"\{[^{}]*(?:,|\.\.)[^{}]*\}", text[i:]):
            return None
        out.append(c)
        i += 1
    return "".join(out)


def _double_quoted(text: str) -> str | None:
    inner = text[1:-1]
    if re.search(r"(?<!\\)(?:\\\\)*[$`]", inner):
        return None
    return re.sub(r"\\([$`\"\\])|\\\n", lambda m: m.group(1) or "", inner)


def literal(node: Node) -> str | None:
    """A word's value after quote removal, or None when it is not a literal."""
    kind = node.type
    if kind == "command_name":
        named = node.named_children
        return literal(named[0]) if len(named) == 1 and node.child_count == 1 else None
    if kind == "word":
        return _unquoted(node_text(node))
    if kind == "number":
        text = node_text(node)
        return text if text.isdigit() else None
    if kind == "raw_string":
        return node_text(node)[1:-1]
    if kind == "string":
        return _double_quoted(node_text(node))
    if kind == "concatenation":
        parts: list[str] = []
        for child in node.children:
            value = literal(child) if child.is_named else None
            if value is None:
                return None
            parts.append(value)
        return "".join(parts)
    return None


def command_name(word: str) -> str:
    """A command word without its folder: ``/bin/rm`` is ``rm``."""
    return word.rstrip("/").rsplit("/", 1)[-1] or word


_DELIMITERS = frozenset(b" \t\n;&|()<>`")


def word_edge(source: bytes, offset: int, *, before: bool) -> bool:
    """Whether a word may start (``before``) or end at this byte offset in bash."""
    at = offset - 1 if before else offset
    if at < 0 or at >= len(source):
        return True
    if source[at] not in _DELIMITERS:
        return False
    backslashes = 0
    while at - 1 - backslashes >= 0 and source[at - 1 - backslashes] == 0x5C:
        backslashes += 1
    return backslashes % 2 == 0  # an escaped delimiter is part of the word


def descendants(node: Node) -> list[Node]:
    """Every node below ``node``."""
    out: list[Node] = []
    stack = list(node.children)
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def fully_read(root: Node, source: bytes) -> bool:
    """Whether every byte but blanks belongs to a token of the tree.

    tree-sitter-bash can skip text bash reads as a word (``\\ `` at the
    start of a command): a command made of skipped text would go unseen.
    """
    covered = bytearray(len(source))
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type == "heredoc_body":
            covered[node.start_byte : node.end_byte] = b"\x01" * (node.end_byte - node.start_byte)
        else:
            stack.extend(node.children)
    for at, (byte, seen) in enumerate(zip(source, covered, strict=True)):
        if seen or byte in b" \t\n":
            continue
        # tree-sitter-bash drops a lone `-` argument right before `<<`
        # (`python3 - <<EOF`); it names no command, so it hides none.
        if not (
            byte == 0x2D
            and source[at - 1 : at] in (b" ", b"\t")
            and _BEFORE_HEREDOC.match(source, at + 1)
        ):
            return False
    return True


def plain_words(root: Node, source: bytes) -> tuple[str, ...] | None:
    """The words when the whole text is one simple command of literal words."""
    if root.has_error or len(root.children) != 1 or root.children[0].type != "command":
        return None
    command = root.children[0]
    words: list[str] = []
    end = 0
    for child in command.children:
        node = child.named_children[0] if child.type == "command_name" else child
        if child.type == "command_name" and child.child_count != 1:
            return None
        if node.type not in _LITERAL_NODES or not child.is_named:
            return None
        raw = node_text(node)
        value = literal(node)
        if value is None or not _PLAIN_WORD.match(raw):
            return None
        if not words and (ASSIGNMENT_START.match(raw) or raw.startswith("#")):
            return None
        if (words and raw.startswith("#")) or _TILDE.search(raw):
            return None  # a comment, or a tilde bash would expand
        gap = source[end : child.start_byte]
        if (words and not gap) or gap.strip(b" \t" if words else b" \t\n"):
            return None  # every word stands alone, separated only by blanks
        words.append(value)
        end = child.end_byte
    if source[end:].strip(b" \t\n") or not words:
        return None
    return tuple(words)
