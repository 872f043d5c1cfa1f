"""The include glob of glob and grep, as rg options that keep ignore files in force.

rg's ``--glob`` is an *override*: a file it matches is listed even when a
``.gitignore`` ignores it or it is hidden, and a folder it matches (``src/**``
matches ``src/node_modules``) is walked even when ignored. A file *type*
(``--type-add NAME:GLOB --type NAME``) is matched after the ignore files and
only against file names, so what they ignore stays ignored. The glob is
therefore cut at its last ``/``:

- its last part (the name) becomes the type, matched by rg; names starting
  with a dot are turned away by a second, negated type unless hidden files
  were asked for (a type would let them through);
- when the rest is more than "any folder" (``**/``, or no ``/`` at all, which
  gitignore reads the same), the whole path is also matched here, by a regex
  translated from the glob with rg's rules (:func:`glob_regex`).

``**/*.py`` is thus one rg run with no per-file work in Python; ``src/**/*.ts``
adds a regex match per ``.ts`` file rg lists.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GlobError", "GlobPlan", "glob_regex", "plan_glob"]

_TYPE = "zunoglob"
_HIDDEN_TYPE = "zunohidden"
_ANY_NAME = ("*", "**")


class GlobError(ValueError):
    """A glob rg would refuse: an unclosed class or brace, a dangling backslash.

    The message names the glob and says what is wrong with it, in rg's words.
    """


@dataclass(frozen=True, slots=True)
class GlobPlan:
    """How one include glob is applied.

    Attributes:
        args: rg options selecting the files by name (file types), or none.
        matches: Whether a path (rg's raw bytes, relative to the searched folder,
            without ``./``) matches the whole glob; None when the rg options
            already say exactly that.
    """

    args: tuple[str, ...]
    matches: Callable[[bytes], bool] | None


def plan_glob(glob: str, hidden: bool) -> GlobPlan:
    """The rg options and the path check that select the files ``glob`` matches.

    Args:
        glob: A gitignore-style glob (see :func:`glob_regex`).
        hidden: Whether hidden files may be selected.

    Raises:
        GlobError: A malformed glob (checked here when a regex is needed; rg
            checks the name part itself).
    """
    parts = _parts(glob[1:] if glob.startswith("/") else glob)
    if parts is None or parts[-1] == "":
        # A "/" a class may stand for, or a folder-only glob: the regex decides alone.
        return GlobPlan((), _regex_check(glob))
    if "/" not in glob:
        parts = ["**", *parts]
    while len(parts) > 2 and parts[0] == parts[1] == "**":
        parts = parts[1:]
    name = parts[-1]
    # ":" ends rg's type name (and "include:" starts a list of types): no type can say it.
    typed = name not in _ANY_NAME and ":" not in name
    args: tuple[str, ...] = ()
    if typed:
        args = (f"--type-add={_TYPE}:{name}", f"--type={_TYPE}")
        if not hidden:
            # A selected type lets hidden names through; the negated one, given later, wins.
            args += (f"--type-add={_HIDDEN_TYPE}:.*", f"--type-not={_HIDDEN_TYPE}")
    if parts[:-1] == ["**"] and (typed or name in _ANY_NAME):
        return GlobPlan(args, None)
    return GlobPlan(args, _regex_check(glob))


def _regex_check(glob: str) -> Callable[[bytes], bool]:
    pattern = glob_regex(glob)
    return lambda path: pattern.fullmatch(path) is not None


def _parts(body: str) -> list[str] | None:
    """The glob's ``/``-separated parts; None when a part may stand for a ``/`` itself.

    That is a ``/`` inside ``[...]`` or ``{...}``, an escaped ``/``, or a negated
    class (``[!x]`` matches ``/`` in rg).
    """
    parts: list[str] = []
    start = i = 0
    in_braces = in_class = False
    while i < len(body):
        c = body[i]
        if c == "\\":
            if body[i + 1 : i + 2] == "/":
                return None
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            elif c == "/":
                return None
        elif c == "[":
            if body[i + 1 : i + 2] in ("!", "^"):
                return None
            in_class = True
            i += 1 if body[i + 1 : i + 2] == "]" else 0  # a leading "]" is a member
        elif c == "{":
            in_braces = True
        elif c == "}":
            in_braces = False
        elif c == "/":
            if in_braces:
                return None
            parts.append(body[start:i])
            start = i + 1
        i += 1
    parts.append(body[start:])
    return parts


def glob_regex(glob: str) -> re.Pattern[bytes]:
    """A regex matching exactly the file paths a gitignore-style glob matches, as rg does.

    Paths are the raw bytes rg prints, relative to the searched folder,
    ``/``-separated. As in rg, ``*`` and ``?`` stay within one folder and ``?``
    is one byte, ``**`` as a whole part is any number of folders, ``[...]``
    (``!`` or ``^`` negates) is one byte and may be ``/``, ``{a,b}`` is either,
    and ``\\`` escapes the next character. A glob without a ``/`` matches
    names at any depth; one with a leading or inner ``/`` is anchored; one
    ending in ``/`` names folders and matches no file.

    Raises:
        GlobError: A malformed glob.
    """
    body = glob[1:] if glob.startswith("/") else glob
    if body.endswith("/") and not body.endswith("\\/"):
        _Translator(glob, body[:-1]).regex()  # still refused when malformed
        return re.compile(rb"(?!)")
    source = _Translator(glob, body).regex()
    if "/" not in glob:
        source = b"(?:.*/)?" + source
    return re.compile(source, re.DOTALL)


class _Translator:
    """One glob turned into regex source, token by token (rg's globset rules)."""

    def __init__(self, original: str, body: str) -> None:
        self._original = original
        self._glob = body
        self._i = 0
        self._in_braces = False

    def regex(self) -> bytes:
        out: list[bytes] = []
        glob = self._glob
        while self._i < len(glob):
            out.append(self._token())
        if self._in_braces:
            raise self._error(
                "unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"
            )
        return b"".join(out)

    def _error(self, what: str) -> GlobError:
        return GlobError(f"error parsing glob '{self._original}': {what}")

    def _token(self) -> bytes:
        glob, i = self._glob, self._i
        c = glob[i]
        self._i += 1
        if c == "\\":
            if self._i >= len(glob):
                raise self._error("dangling '\\'")
            self._i += 1
            return _literal(glob[i + 1])
        if c == "?":
            return b"[^/]"
        if c == "*":
            return self._star(i)
        if c == "[":
            return self._class()
        if c == "{":
            if self._in_braces:
                raise self._error("nested alternate groups are not allowed")
            self._in_braces = True
            return b"(?:"
        if c == "}" and self._in_braces:
            self._in_braces = False
            return b")"
        if c == "," and self._in_braces:
            return b"|"
        return _literal(c)

    def _star(self, i: int) -> bytes:
        glob = self._glob
        if self._i >= len(glob) or glob[self._i] != "*":
            return b"[^/]*"
        self._i += 1
        # "**" is folders only as a whole part (in braces, a whole alternative's part).
        stops = "/,}" if self._in_braces else "/"
        starts = i == 0 or glob[i - 1] in ("/{," if self._in_braces else "/")
        ends = self._i == len(glob) or glob[self._i] in stops
        if not (starts and ends):
            return b"[^/]*"
        if self._i < len(glob) and glob[self._i] == "/":
            self._i += 1  # the "/" after "**" belongs to the folders it matches
            return b"(?:.*/)?"
        return b".*"  # "dir/**", or "**" alone: everything below

    def _class(self) -> bytes:
        glob = self._glob
        j = self._i
        negated = j < len(glob) and glob[j] in "!^"
        j += 1 if negated else 0
        items: list[bytes] = []
        first = True
        while True:
            if j >= len(glob):
                raise self._error("unclosed character class; missing ']'")
            c = glob[j]
            if c == "]" and not first:
                break
            first = False
            if j + 2 < len(glob) and glob[j + 1] == "-" and glob[j + 2] != "]":
                low, high = c, glob[j + 2]
                if low > high:
                    raise self._error(f"invalid range; '{low}' > '{high}'")
                j += 3
            else:
                low = high = c
                j += 1
            # A class is one byte: a character of several bytes never matches (as in rg).
            if ord(low) < 128:
                top = chr(min(ord(high), 127))
                items.append(_class_byte(low) + (b"-" + _class_byte(top) if top != low else b""))
        self._i = j + 1
        body = b"".join(items)
        if negated:
            return b"[^" + body + b"]" if body else b"(?s:.)"
        return b"[" + body + b"]" if body else b"(?!)"


def _literal(c: str) -> bytes:
    return re.escape(c.encode("utf-8", errors="surrogateescape"))


def _class_byte(c: str) -> bytes:
    return b"\\x%02x" % ord(c)
