"""The ``glob`` and ``grep`` tools: finding files and searching their contents.

Both are thin: typed arguments, a call into :mod:`zuno.execution.ripgrep` (which runs the
real rg, orders the answer and stops early), and model-visible text. Paths are
shown relative to the workspace, results are sorted by path then line so the
same tree always gives the same answer, and a limit that cut the answer is
always said out loud so the model knows to narrow the search.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field, field_validator

from zuno.contract.output import bound_text
from zuno.contract.tool import ArgumentsRejected, Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import INSPECTION, Declaration
from zuno.execution.ripgrep import Query
from zuno.execution.ripgrep._locate import RipgrepUnavailable, find_ripgrep
from zuno.execution.ripgrep._search import (
    FileCount,
    Line,
    RipgrepError,
    SearchResult,
    count_matches,
    files_with_matches,
    list_files,
    search_lines,
)
from zuno.execution.ripgrep._select import Exclusion
from zuno.policy.search_fence import file_link_refusal, search_exclusion
from zuno.workspace.real_paths import is_inside, special_file_kind

__all__ = ["GlobArgs", "GlobTool", "GrepArgs", "GrepTool"]

_MAX_LINE_CHARS = 500
"""Matching lines are cut here: one minified line must not fill the model window."""

_NARROW_GREP = "the search: a more specific pattern, a path or an include glob"


def _one_line(value: str | None) -> str | None:
    """Reject a glob holding a line break (one glob is one line, as in a .gitignore)."""
    if value is not None and ("\n" in value or "\r" in value):
        raise ValueError("must be a single line")
    return value


def _plain_text(value: str | None) -> str | None:
    """Reject text no process argument can carry (NUL, lone surrogates)."""
    if value is None:
        return value
    if "\x00" in value:
        raise ValueError("must not contain a NUL character (in a regex, write \\x00)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
    return value


class GlobArgs(ToolArgs):
    """Arguments of the glob tool."""

    pattern: str = Field(
        min_length=1,
        max_length=1000,
        description=(
            "Glob matched against file paths relative to `path`, gitignore-style: "
            "'*.py' matches at any depth, 'src/**/*.ts' only under src/, "
            "'*.{js,ts}' either extension."
        ),
    )
    path: str | None = Field(
        default=None,
        max_length=4096,
        description="Directory to search, relative to the workspace (default: all of it).",
    )
    limit: int = Field(
        default=200,
        ge=1,
        le=2000,
        description="Most paths returned (1-2000); the number left out is reported.",
    )

    @field_validator("pattern", "path")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        return _plain_text(value)

    @field_validator("pattern")
    @classmethod
    def _single_line(cls, value: str) -> str | None:
        return _one_line(value)


class GrepArgs(ToolArgs):
    """Arguments of the grep tool."""

    pattern: str = Field(
        min_length=1,
        max_length=1000,
        description=(
            "Regex to search file contents for (Rust/ripgrep syntax, e.g. 'fn\\s+\\w+', "
            "'log.*Error'; escape literal braces); a plain string with fixed_strings."
        ),
    )
    path: str | None = Field(
        default=None,
        max_length=4096,
        description="File or directory to search, relative to the workspace (default: all of it).",
    )
    include: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Only search files matching this glob, e.g. '*.py', '*.{ts,tsx}', 'src/**'.",
    )
    ignore_case: bool = Field(default=False, description="Match case-insensitively.")
    fixed_strings: bool = Field(
        default=False, description="Treat pattern as a literal string, not a regex."
    )
    context: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Lines shown before and after each match (0-10; content mode only).",
    )
    output_mode: Literal["content", "files", "count"] = Field(
        default="content",
        description=(
            "'content': matching lines as path:line:text; 'files': paths of matching files; "
            "'count': path:count of matching lines per file."
        ),
    )
    hidden: bool = Field(
        default=False,
        description="Also search hidden files and folders (.git is never searched).",
    )
    limit: int = Field(
        default=100,
        ge=1,
        le=1000,
        description=(
            "Most results (1-1000): matching lines in content mode, files otherwise; "
            "the number left out is reported."
        ),
    )

    @field_validator("pattern", "path", "include")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        return _plain_text(value)

    @field_validator("include")
    @classmethod
    def _single_line(cls, value: str | None) -> str | None:
        return _one_line(value)


_SearchArgs = TypeVar("_SearchArgs", GlobArgs, GrepArgs)


class _RipgrepTool(Tool[_SearchArgs]):
    """What glob and grep share: read-only, ruled by the searched path, rg needed."""

    declaration: ClassVar[Declaration] = INSPECTION
    rule_argument: ClassVar[str | None] = "path"
    rule_match: ClassVar[Literal["path", "prefix", "glob"]] = "path"

    def rule_subject(self, args: _SearchArgs, workspace: Path) -> str | None:
        """The searched path; the workspace (``.``) when no path was given."""
        return super().rule_subject(args, workspace) if args.path is not None else "."

    def touched_paths(self, args: _SearchArgs) -> list[str]:
        """The searched path; the workspace (``.``) when no path was given."""
        return [args.path if args.path is not None else "."]

    def startup_check(self) -> None:
        """A missing or too old rg is a startup error, never a slower fallback."""
        find_ripgrep()


class GlobTool(_RipgrepTool[GlobArgs]):
    """Find files by glob pattern, through ``rg --files``."""

    name: ClassVar[str] = "glob"
    description: ClassVar[str] = (
        "Find files by name pattern. Returns paths relative to the workspace, one per line, "
        "sorted by path. Files ignored by .gitignore/.ignore/.rgignore, .git/ and paths "
        "permission rules deny are skipped; hidden files are listed only when the pattern "
        "names a dot-entry (e.g. '.github/**/*.yml'). Lists files only, not directories."
    )
    args_model = GlobArgs

    async def run(self, args: GlobArgs, ctx: ToolContext) -> ToolResult:
        """List the files matching the pattern, bounded by ``limit``."""
        root = _existing(args.path, ctx)
        if not root.is_dir():
            raise ToolError(f"{args.path!r} is a file; glob needs a directory to search in")
        hidden = _names_hidden(args.pattern)
        exclusion = _exclusion(self.name, root, ctx)
        try:
            found = await list_files(
                root, glob=args.pattern, hidden=hidden, limit=args.limit, exclusion=exclusion
            )
        except RipgrepError as exc:
            raise ToolError(f"invalid glob {args.pattern!r}: {exc.message}") from exc
        except RipgrepUnavailable as exc:
            raise ToolError(str(exc)) from exc
        prefix = _prefix(root, ctx.workspace)
        paths = [prefix + p for p in found.items]
        lines = list(paths)
        if not paths:
            lines.append(f"No files match {args.pattern!r} in {_shown_root(root, ctx)}.")
        if found.truncated:
            lines.append(_more_files(found, "the pattern or path"))
        data: dict[str, Any] = {
            "files": found.shown,
            "total": found.total,
            "truncated": found.truncated,
            "paths": paths,
        }
        return _bounded(lines, data, ctx, "glob")


class GrepTool(_RipgrepTool[GrepArgs]):
    """Search file contents with a regex, through ripgrep."""

    name: ClassVar[str] = "grep"
    description: ClassVar[str] = (
        "Search file contents with a regex (ripgrep). Results are sorted by path then line; "
        "paths are relative to the workspace. Files ignored by .gitignore/.ignore/.rgignore, "
        "hidden files (unless hidden=true), .git/, binary and special files, and paths "
        "permission rules deny are skipped. Long lines are cut at "
        f"{_MAX_LINE_CHARS} characters. Use output_mode 'files' or 'count' to survey "
        "before reading lines."
    )
    args_model = GrepArgs

    async def run(self, args: GrepArgs, ctx: ToolContext) -> ToolResult:
        """Search, then render the answer in the requested output mode."""
        root = _existing(args.path, ctx)
        if not root.is_dir():
            linked = _link_refusal(self.name, root, ctx)
            if linked is not None:
                raise ToolError(f"cannot search {args.path}: {linked}; ask the user to look at it")
        query = Query(
            args.pattern,
            fixed_strings=args.fixed_strings,
            ignore_case=args.ignore_case,
            include=args.include,
            hidden=args.hidden,
            exclusion=_exclusion(self.name, root, ctx) if root.is_dir() else None,
        )
        prefix = _prefix(root if root.is_dir() else root.parent, ctx.workspace)
        try:
            if args.output_mode == "content":
                found = await search_lines(
                    root,
                    query,
                    limit=args.limit,
                    context=args.context,
                    max_line_chars=_MAX_LINE_CHARS,
                )
                lines, data = _render_lines(found, prefix, args.context > 0)
            elif args.output_mode == "files":
                found_files = await files_with_matches(root, query, limit=args.limit)
                lines, data = _render_files(found_files, prefix)
            else:
                found_counts = await count_matches(root, query, limit=args.limit)
                lines, data = _render_counts(found_counts, prefix)
        except RipgrepError as exc:
            hint = "" if args.fixed_strings else "\n(for a literal string, set fixed_strings=true)"
            raise ToolError(f"rg rejected the search: {exc.message}{hint}") from exc
        except RipgrepUnavailable as exc:
            raise ToolError(str(exc)) from exc
        if not lines:
            skipped = "binary files" if args.hidden else "hidden and binary files"
            lines.append(
                f"No matches for {args.pattern!r} in {_shown_root(root, ctx)} "
                f"(files ignored by .gitignore or .ignore, and {skipped}, are skipped)."
            )
        if data.get("unreadable"):
            lines.append("[some files could not be read and were skipped]")
        data["mode"] = args.output_mode
        return _bounded(lines, data, ctx, "grep")


def _render_lines(
    found: SearchResult[Line], prefix: str, separate: bool
) -> tuple[list[str], dict[str, Any]]:
    out: list[str] = []
    previous: Line | None = None
    for line in found.items:
        # "--" between groups that are not adjacent, as grep and rg print with context.
        if (
            separate
            and previous is not None
            and (line.path != previous.path or line.number > previous.number + 1)
        ):
            out.append("--")
        mark = ":" if line.is_match else "-"
        cut = f" [... {line.omitted_chars} more characters]" if line.omitted_chars else ""
        out.append(f"{prefix}{line.path}{mark}{line.number}{mark}{line.text}{cut}")
        previous = line
    if found.truncated:
        out.append(
            f"[{found.total - found.shown} more matching lines not shown "
            f"({found.total} in {found.files} files); narrow {_NARROW_GREP}]"
        )
    data: dict[str, Any] = {
        "matches": found.shown,
        "total": found.total,
        "files": found.files,
        "truncated": found.truncated,
        "unreadable": found.unreadable,
        "lines": [
            {
                "path": prefix + line.path,
                "line": line.number,
                "text": line.text,
                "match": line.is_match,
            }
            for line in found.items
        ],
    }
    return out, data


def _render_files(found: SearchResult[str], prefix: str) -> tuple[list[str], dict[str, Any]]:
    paths = [prefix + p for p in found.items]
    out = list(paths)
    if found.truncated:
        out.append(_more_files(found, _NARROW_GREP))
    data: dict[str, Any] = {
        "files": found.shown,
        "total": found.total,
        "truncated": found.truncated,
        "unreadable": found.unreadable,
        "paths": paths,
    }
    return out, data


def _render_counts(found: SearchResult[FileCount], prefix: str) -> tuple[list[str], dict[str, Any]]:
    out = [f"{prefix}{item.path}:{item.count}" for item in found.items]
    if found.truncated:
        out.append(_more_files(found, _NARROW_GREP))
    data: dict[str, Any] = {
        "files": found.shown,
        "total": found.total,
        "truncated": found.truncated,
        "unreadable": found.unreadable,
        "counts": {prefix + item.path: item.count for item in found.items},
    }
    return out, data


def _more_files(found: SearchResult[Any], narrow: str) -> str:
    return (
        f"[{found.total - found.shown} more files not shown ({found.total} in all); "
        f"narrow {narrow}]"
    )


def _existing(path: str | None, ctx: ToolContext) -> Path:
    """The path to search, absolute: an existing folder or regular file.

    A missing path is the model's error to fix. A special file (a named pipe,
    ``/dev/zero``) is refused: rg would wait on it, or read it forever. So is a
    tree holding ``/proc`` (``/`` or a folder in it): its files are processes'
    memory and environments, and some never end.
    """
    root = ctx.resolve(path) if path is not None else Path(os.path.normpath(ctx.workspace))
    try:
        st = root.stat()
    except (OSError, ValueError):
        raise ToolError(
            f"{path!r} does not exist (resolved to {root}); "
            "give an existing file or directory, relative to the workspace"
        ) from None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise ArgumentsRejected(
            f"{path!r} is a {special_file_kind(st.st_mode)}, not a regular file or folder; "
            "only files and folders are searched"
        )
    real = os.path.realpath(root)
    if real == "/" or is_inside(real, "/proc"):
        raise ArgumentsRejected(
            f"searching {real} is refused: it holds /proc, where processes' memory and "
            "environments are; search a narrower folder"
        )
    return root


def _exclusion(tool: str, root: Path, ctx: ToolContext) -> Exclusion:
    """What the session's permission rules keep this search from (see
    :mod:`zuno.policy.search_fence`).
    """
    permissions = ctx.permissions
    rules = permissions.rules if permissions is not None else []
    workspace = os.path.realpath(ctx.workspace)
    return search_exclusion(rules, tool, os.path.realpath(root), workspace)


def _link_refusal(tool: str, file: Path, ctx: ToolContext) -> str | None:
    """Why one file is not searched: a hard link whose other name the rules may cover."""
    permissions = ctx.permissions
    rules = permissions.rules if permissions is not None else []
    return file_link_refusal(rules, tool, str(file), os.path.realpath(ctx.workspace))


def _prefix(directory: Path, workspace: Path) -> str:
    """What to put before rg's paths (relative to ``directory``) to make them workspace paths."""
    ws = Path(os.path.normpath(workspace))
    try:
        relative = directory.relative_to(ws)
    except ValueError:
        # Outside the workspace: absolute paths are the only unambiguous ones.
        return directory.as_posix().rstrip("/") + "/"
    text = relative.as_posix()
    return "" if text == "." else text + "/"


def _shown_root(root: Path, ctx: ToolContext) -> str:
    prefix = _prefix(root, ctx.workspace).rstrip("/")
    return prefix or "the workspace"


def _names_hidden(pattern: str) -> bool:
    """Whether a glob names a dot-entry explicitly, which asks for hidden files."""
    return any(part.startswith(".") and part not in (".", "..") for part in pattern.split("/"))


def _bounded(lines: list[str], data: dict[str, Any], ctx: ToolContext, name: str) -> ToolResult:
    text = "\n".join(lines)
    bounded = bound_text(text, ctx.limits)
    if bounded.truncated:
        # Only now is an artifact worth a file: keep the whole answer for the read tool.
        bounded = bound_text(text, ctx.limits, ctx.artifact_path(name), label=f"{name} output")
    data["output_truncated"] = bounded.truncated
    return ToolResult(output=bounded.text, data=data, artifact=bounded.artifact)
