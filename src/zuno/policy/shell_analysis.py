"""What a shell command would run, from a real parse (for permission rules).

A ``shell`` (or ``execute``) rule matches what bash would run, not the text
of the command. The command is parsed with tree-sitter-bash, and the tree
gives two answers:

* **plain**: the words of the command when the WHOLE command is exactly one
  simple command whose every word is a literal after quote removal: no
  parameter, arithmetic or tilde expansion, no command or process
  substitution, no globs or brace expansion, no assignments in front, no
  redirections or here-documents, no separators. Only such a command can be
  covered by an ``allow`` rule, and only when its words start with the rule's
  words (:func:`zuno.policy.shell_rules.command_rule_matches`). Each word's
  source text is also checked against a whitelist of quoting forms bash leaves
  literal, so a misreading by the parser can never widen an allow.
* **commands**: every simple command found anywhere in the tree (inside
  substitutions, subshells, function bodies, pipelines, here-documents) with
  its normalised name (quotes and backslashes removed, directory dropped:
  ``\\rm``, ``'r'm``, ``/bin/rm`` all give ``rm``). Wrappers are seen through
  (``env``, ``command``, ``exec``, ``sudo``, ``nice``, ``timeout 5``,
  ``xargs``, ``find -exec``, ...: :mod:`zuno.policy.shell_wrappers`) and
  ``bash -c``/``sh -c`` strings are parsed recursively. ``deny`` and ``ask``
  rules match any of them.
* **unseen**: why some command in it may do more than its words show, judged
  by the closed tables of :mod:`zuno.policy.shell_inert` (a program not known to be
  inert, a builtin that evaluates data, ``git -c``). An ``allow`` rule never
  covers a builtin that evaluates data, a known program told to run one, or a
  wrapper; while a ``deny`` or ``ask`` rule on commands is in force, an unseen
  command is asked about (:func:`zuno.policy.shell_rules.command_unseen`).

Some commands hide what they run: a command name that is an expansion
(``$X rm``), ``eval`` and ``source``, a shell reading a script or stdin,
arithmetic and ``${x@P}`` (both can run a command substitution held in a
variable's value), text that does not parse. Such a command is **opaque**:
it matches every ``deny`` and ``ask`` rule, and no ``allow`` rule.

Why tree-sitter-bash: it is maintained by the tree-sitter organisation,
ships binary wheels (no compiler at install time), covers the whole bash
grammar (arithmetic, here-documents, ``case``, ``[[``, process substitution)
and marks text it cannot parse, which is mapped to opaque. bashlex, a port
of bash's own parser, had its last release in January 2023, raises
``NotImplementedError`` on arithmetic and does not look inside ``${...}``.
tree-sitter-bash's one known misreading that matters here, a
backslash-newline inside a word (``r\\<newline>m``), is covered by analysing
the command both as written and with line continuations removed.

What this cannot see: what a program does by its own logic (``python -c``,
``make``, a script in the workspace); those are unseen, so asked about under a
``deny`` rule, and once approved the sandbox is the boundary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from zuno.policy.shell_inert import Kind, judge
from zuno.policy.shell_words import (
    ASSIGNMENT_START,
    command_name,
    descendants,
    fully_read,
    literal,
    node_text,
    parse,
    plain_words,
    word_edge,
)
from zuno.policy.shell_wrappers import (
    FD_EXEC,
    FIND_EXEC,
    OTHER_SHELLS,
    SHELL_ARG_OPTIONS,
    SHELL_WHEN_EMPTY,
    SHELLS,
    STRING_RUNNERS,
    Wrapper,
    is_runner,
    takes_value,
    wrapper_for,
)

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["CommandAnalysis", "SimpleCommand", "analyse"]

_MAX_DEPTH = 12
"""Nested ``bash -c`` strings and wrappers followed before giving up (opaque)."""
_MAX_LENGTH = 200_000
"""Longer commands are not parsed: opaque."""

# Builtins whose arguments are code or can run code held in data.
_CODE_BUILTINS = frozenset(
    {"eval", "source", ".", "trap", "alias", "let", "bind", "complete", "compgen", "enable"}
    | {"fc", "hash"}
)
# Builtins taking variable names: a name like `a[$(cmd)]` runs cmd.
_NAME_BUILTINS = frozenset(
    {"read", "getopts", "wait", "unset", "printf", "test", "[", "mapfile", "readarray"}
)
# Builtins declaring variables: an argument like `a[$(cmd)]=1` runs cmd.
_DECLARATIONS = frozenset({"declare", "typeset", "local", "export", "readonly"})
# Variables whose value bash itself runs or expands as a prompt (PS4 under set -x).
_CODE_VARIABLES = frozenset(
    {"PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "BASH_ENV", "ENV", "SHELLOPTS"}
    | {"BASHOPTS", "BASH_ALIASES", "BASH_CMDS"}
)
_UNESCAPED_BLANK = re.compile(r"(?<!\\)(?:\\\\)*[ \t\n]")
_CONTINUATION = re.compile(rb"(?<!\\)((?:\\\\)*)\\\n")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "case", "esac"}
    | {"while", "until", "for", "select", "function", "[["}
)
_UNQUOTED_LEAVES = frozenset(
    {"word", "simple_expansion", "variable_name", "special_variable_name", "number"}
)
_KEYWORDS = _RESERVED | {"[", "]", "]]", "in"}
_GRAMMAR = frozenset(
    {"test_command", "compound_statement", "negated_command", "if_statement", "elif_clause"}
    | {"else_clause", "while_statement", "for_statement", "c_style_for_statement"}
    | {"case_statement", "do_group", "function_definition", "select_statement"}
)
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command found in the tree."""

    name: str
    """The normalised command name: quotes removed, directory dropped."""
    words: tuple[str | None, ...]
    """Every word after quote removal, the name as written first; None where not literal."""


@dataclass(frozen=True, slots=True)
class CommandAnalysis:
    """What a shell command would run, as far as a parse can tell."""

    plain: tuple[str, ...] | None
    """The words when the whole command is one plain simple command, else None."""
    commands: tuple[SimpleCommand, ...]
    """Every simple command anywhere in the command, wrappers seen through."""
    opaque: str | None
    """Why the analysis cannot see everything the command runs, or None."""
    unseen: str | None = None
    """Why some command in it may do more than its words show (a program not known to be
    inert, a builtin evaluating data, ``git -c``), or None: see :mod:`zuno.policy.shell_inert`."""
    allowable: bool = False
    """Whether an allow rule naming the plain command may cover it: plain, and neither a
    builtin evaluating data, nor a program told to run a program, nor a wrapper."""


@dataclass
class _Findings:
    commands: list[SimpleCommand] = field(default_factory=list[SimpleCommand])
    opaque: str | None = None
    unseen: str | None = None

    def hide(self, reason: str) -> None:
        if self.opaque is None:
            self.opaque = reason

    def unsee(self, reason: str) -> None:
        if self.unseen is None:
            self.unseen = reason


class _Walker:
    """Collects the simple commands of one tree, and what hides others."""

    def __init__(self, findings: _Findings, depth: int, source: bytes = b"") -> None:
        self.found = findings
        self.depth = depth
        self.src = source

    def _bounded(self, nodes: list[Node]) -> None:
        """Hide the command unless each word starts and ends where bash's would.

        tree-sitter-bash splits some words that bash keeps whole (``}rm``,
        ``a#/rm``) and joins some that bash splits; either way its reading
        is not bash's, and the command names it gives cannot be trusted.
        """
        for node in nodes:
            if not (
                word_edge(self.src, node.start_byte, before=True)
                and word_edge(self.src, node.end_byte, before=False)
            ):
                self.found.hide("the parser read this command differently from bash")
                return

    def walk(self, node: Node) -> None:
        kind = node.type
        if kind == "ERROR" or node.is_missing:
            self.found.hide("the command does not parse")
        elif kind in _UNQUOTED_LEAVES and _UNESCAPED_BLANK.search(node_text(node)):
            # bash ends a word at an unescaped blank or newline; a parse that
            # does not (`ls<newline>\rm x` read as one command) is not bash's.
            self.found.hide("the parser read this command differently from bash")
        elif kind in _KEYWORDS and node.parent is not None and node.parent.type in _GRAMMAR:
            # A reserved word is a word of its own in bash: `[?m` or `{}` is a
            # command name there, not a test or a group.
            self._bounded([node])
        elif kind == "command":
            self._command(node)
        elif kind == "declaration_command":
            self._declaration(node)
        elif kind == "unset_command":
            self._bounded(node.named_children)
            self._words([node.children[0].type, *map(literal, node.named_children)])
        elif kind == "test_command":
            self._test(node)
        elif kind in ("arithmetic_expansion", "c_style_for_statement") or (
            kind == "compound_statement" and node.child_count and node.children[0].type == "(("
        ):
            self._arithmetic(node)
        elif kind == "expansion":
            self._expansion(node)
        elif kind == "subscript":
            self._subscript(node)
        elif kind == "variable_assignment":
            self._assignment(node)
        elif kind == "array":
            self._array(node)
        elif kind == "command_substitution" and re.match(r"`.*\\", node_text(node), re.S):
            # Inside backquotes bash removes a level of backslashes before
            # parsing: the parse of the text is not what runs.
            self.found.hide("backslashes inside a backquote substitution")
        for child in node.children:
            self.walk(child)

    def _command(self, node: Node) -> None:
        name = node.child_by_field_name("name")
        self._bounded(
            [c for c in node.children if c.type in ("command_name", "variable_assignment")]
            + node.children_by_field_name("argument")
        )
        if name is None:
            return  # only assignments or redirections
        # bash reads these as an assignment or a reserved word, not a name.
        text = node_text(name)
        if ASSIGNMENT_START.match(text) or text in _RESERVED:
            self.found.hide("the parser read this command differently from bash")
        words = [literal(name)]
        words += [literal(arg) for arg in node.children_by_field_name("argument")]
        self._words(words)

    def _declaration(self, node: Node) -> None:
        keyword = node.children[0].type
        self._bounded(node.named_children)
        words: list[str | None] = []
        for child in node.named_children:
            if child.type in ("variable_assignment", "variable_name"):
                continue  # checked where the walk meets them
            value = literal(child)
            words.append(value)
            if value is None or "[" in value or value.partition("=")[0] in _CODE_VARIABLES:
                self.found.hide(f"`{keyword}` with this argument can run code held in data")
            # -i makes later assignments arithmetic, -n makes the name a reference.
            elif value.startswith(("-", "+")) and ("i" in value or "n" in value):
                self.found.hide(f"`{keyword} {value}` evaluates data as code")
        self.found.commands.append(SimpleCommand(keyword, (keyword, *words)))
        self.found.unsee(f"`{keyword}` takes names, subscripts or text as code")

    def _assignment(self, node: Node) -> None:
        name = node.child_by_field_name("name")
        if name is not None and name.type == "subscript":
            name = name.child_by_field_name("name")
        text = node_text(name) if name is not None else ""
        if not _IDENTIFIER.fullmatch(text):
            # bash reads `@x=...` as a command word, not as an assignment.
            self.found.hide("the parser read this command differently from bash")
        elif text in _CODE_VARIABLES:
            self.found.hide(f"bash runs the value of {text} as code")

    def _array(self, node: Node) -> None:
        # `a=([x]=1)`: an indexed array's subscript is arithmetic on x's value.
        if any(node_text(c).startswith("[") for c in node.named_children):
            self.found.hide("an array subscript is evaluated as arithmetic")

    def _test(self, node: Node) -> None:
        ops = {node_text(n) for n in descendants(node) if n.type == "test_operator"}
        if "-v" in ops:
            self.found.hide("a -v test evaluates a variable name (and its subscript) as code")
        if node.child_count and node.children[0].type == "[[" and ops & _ARITHMETIC_TESTS:
            self.found.hide("an arithmetic test in [[ ]] evaluates variables as code")

    def _arithmetic(self, node: Node) -> None:
        # An identifier in arithmetic is evaluated recursively: a value like
        # `a[$(cmd)]` runs cmd. Only arithmetic on bare numbers is transparent.
        for n in descendants(node):
            if n.is_named and n.child_count == 0 and n.type != "number":
                self.found.hide("arithmetic evaluates variables' values as code")
                return

    def _expansion(self, node: Node) -> None:
        tokens = [c.type for c in node.children]
        if len(tokens) > 1 and tokens[1] == "!":
            self.found.hide("an indirect expansion ${!...} can run code held in data")
        elif "@" in tokens:
            self.found.hide("a ${...@...} transformation can run code held in data")
        elif ":" in tokens:
            at = tokens.index(":")
            rest = node.children[at + 1 :]
            if any(c.is_named and c.type != "number" for c in rest):
                self.found.hide("a ${x:offset} expansion evaluates its offset as arithmetic")

    def _subscript(self, node: Node) -> None:
        index = node.child_by_field_name("index")
        text = node_text(index) if index is not None else ""
        if not (text.isdigit() or text in ("@", "*")):
            self.found.hide("an array subscript is evaluated as arithmetic")

    def _words(self, words: list[str | None]) -> None:
        """One simple command given by its words: record it, see through wrappers."""
        if not words:
            return
        if self.depth > _MAX_DEPTH:
            self.found.hide("commands nested too deeply to follow")
            return
        raw = words[0]
        if raw is None:
            self.found.hide("the command name is an expansion")
            return
        name = command_name(raw)
        self.found.commands.append(SimpleCommand(name, tuple(words)))
        args = words[1:]
        kind, reason = judge(words)
        if kind is not Kind.INERT and kind is not Kind.WRAPPER and not is_runner(name):
            self.found.unsee(reason or f"`{name}` may do more than its words show")
        if name in _CODE_BUILTINS:
            self.found.hide(f"`{name}` runs text as code")
        elif name in OTHER_SHELLS:
            self.found.hide(f"`{name}` runs code in a syntax the rules do not parse")
        elif name in _NAME_BUILTINS:
            self._names(name, args)
        elif name in _DECLARATIONS:
            self._declared(name, args)
        elif name in SHELLS:
            self._shell(name, args)
        elif name in STRING_RUNNERS:
            self._string_runner(STRING_RUNNERS[name], args, name)
        elif name == "watch":
            self._watch(args)
        elif name == "find":
            self._find(args)
        elif name in ("fd", "fdfind"):
            self._fd(args)
        wrapper = wrapper_for(name)
        if wrapper is not None and (name != "jobs" or kind is Kind.WRAPPER):
            self._wrapped(name, wrapper, args)

    def _declared(self, keyword: str, args: list[str | None]) -> None:
        """``declare`` and its kin given as words (``builtin declare ...``)."""
        for value in args:
            if value is None or "[" in value or value.partition("=")[0] in _CODE_VARIABLES:
                self.found.hide(f"`{keyword}` with this argument can run code held in data")
            elif value.startswith(("-", "+")) and ("i" in value or "n" in value):
                self.found.hide(f"`{keyword} {value}` evaluates data as code")

    def _inner(self) -> _Walker:
        return _Walker(self.found, self.depth + 1)

    def _names(self, name: str, args: list[str | None]) -> None:
        # Variable names given as data: `read 'a[$(cmd)]'` runs cmd.
        if name in ("mapfile", "readarray") and any(a is None or a.startswith("-C") for a in args):
            self.found.hide(f"`{name} -C` runs a callback given as text")
            return
        if name in ("test", "["):
            if "-v" in args:
                self.found.hide(f"`{name} -v` evaluates a variable name as code")
            return
        if name == "printf":
            first = args[0] if args else ""
            if first is None:
                self.found.hide("`printf` gets an argument the analysis cannot read")
                return
            if not first.startswith("-v"):
                return
            # `printf -v NAME` or `printf -vNAME`: the name is evaluated.
            args = [first[2:] if first != "-v" else (args[1] if len(args) > 1 else "")]
        if any(a is None or "[" in a or a in _CODE_VARIABLES for a in args):
            self.found.hide(f"`{name}` with this variable name can run code")

    def _shell(self, name: str, args: list[str | None]) -> None:
        i, has_c = 0, False
        while i < len(args):
            arg = args[i]
            if arg is None:
                self.found.hide(f"`{name}` gets an argument the analysis cannot read")
                return
            if arg == "--" or not arg.startswith(("-", "+")) or arg in ("-", "+"):
                i += arg == "--"
                break
            if arg in SHELL_ARG_OPTIONS:
                i += 1
            elif not arg.startswith("--") and "c" in arg[1:]:
                has_c = True
            i += 1
        if not has_c or i >= len(args):
            self.found.hide(f"`{name}` runs a script or stdin the rules cannot see")
            return
        self._inner().source(args[i], f"`{name} -c`")

    def _string_runner(self, letter: str, args: list[str | None], name: str) -> None:
        """A command string given as an option's value: ``su -c``, ``script -qc``, ``--command``."""
        given = False
        for i, arg in enumerate(args):
            if arg is None:
                self.found.hide(f"`{name}` gets an argument the analysis cannot read")
                return
            value: str | None = None
            if arg.startswith("--command="):
                value = arg.partition("=")[2]
            elif takes_value(arg, frozenset({"--command"})):
                value = args[i + 1] if i + 1 < len(args) else ""
            elif re.fullmatch(r"-[^-].*", arg) and letter in arg[1:]:
                # A cluster of short options: `-qc CMD`, `-ecCMD`.
                attached = arg[arg.index(letter, 1) + 1 :]
                value = attached or (args[i + 1] if i + 1 < len(args) else "")
            if value is not None:
                given = True
                self._inner().source(value, f"`{name} -{letter}`")
        if not given and name in SHELL_WHEN_EMPTY:
            self.found.hide(f"`{name}` without -{letter} starts a shell reading stdin")

    def _watch(self, args: list[str | None]) -> None:
        # watch runs its arguments joined by spaces through `sh -c`.
        if any(a is None for a in args):
            self.found.hide("`watch` gets an argument the analysis cannot read")
            return
        rest: list[str] = []
        skip = False
        for arg in filter(None, args):
            if skip or (arg.startswith("-") and not rest):
                # Options come first; these take the next word as their value.
                skip = not skip and arg in ("-n", "--interval", "-q", "--equexit")
                continue
            rest.append(arg)
        if rest:
            self._inner().source(" ".join(rest), "`watch`")

    def _find(self, args: list[str | None]) -> None:
        if any(a is None for a in args):
            self.found.hide("`find` gets an argument the analysis cannot read")
            return
        i = 0
        while i < len(args):
            if args[i] in FIND_EXEC:
                end = i + 1
                while end < len(args) and args[end] not in (";", "+"):
                    end += 1
                self._inner()._words(list(args[i + 1 : end]))
                i = end
            i += 1

    def _fd(self, args: list[str | None]) -> None:
        for i, arg in enumerate(args):
            if arg is None:
                self.found.hide("`fd` gets an argument the analysis cannot read")
                return
            if arg in FD_EXEC:
                self._inner()._words(list(args[i + 1 :]))
                return

    def _wrapped(self, name: str, wrapper: Wrapper, args: list[str | None]) -> None:
        i, unsure = 0, False
        positionals = wrapper.positionals
        while i < len(args):
            arg = args[i]
            if arg is None:
                self.found.hide(f"`{name}` gets an argument the analysis cannot read")
                return
            if arg == "--":
                i += 1
                break
            if name == "env" and (re.fullmatch(r"-[^-]*S.*", arg) or arg.startswith("--s")):
                self.found.hide("`env -S` splits a string into a command")
                return
            if arg.startswith("-") and (arg != "-" or name == "env"):
                if takes_value(arg, wrapper.arg_options):
                    i += 1
                elif "=" not in arg and not wrapper.is_flag(arg):
                    unsure = True  # an option this table does not know may take a value
            elif wrapper.assignments and "=" in arg:
                if arg.partition("=")[0] in _CODE_VARIABLES:
                    self.found.hide(f"bash runs the value of {arg.partition('=')[0]} as code")
            elif positionals:
                positionals -= 1
            else:
                break
            i += 1
        rest = list(args[i:])
        if not rest:
            if name in SHELL_WHEN_EMPTY:
                self.found.hide(f"`{name}` without a command starts a shell reading stdin")
            return
        self._inner()._words(rest)
        if unsure and len(rest) > 1:
            self._inner()._words(rest[1:])

    def source(self, text: str | None, where: str) -> None:
        """Analyse a command string given to a shell."""
        if text is None:
            self.found.hide(f"{where} gets a string the analysis cannot read")
            return
        if self.depth > _MAX_DEPTH:
            self.found.hide("commands nested too deeply to follow")
            return
        _collect(text, self.found, self.depth)


def _collect(text: str, found: _Findings, depth: int) -> Node | None:
    """Add the commands of one command string to ``found``; its tree if it parsed."""
    if len(text) > _MAX_LENGTH:
        found.hide("the command is too long to analyse")
        return None
    try:
        source = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        found.hide("the command is not valid text")
        return None
    if _CONTINUATION.search(source):
        # tree-sitter-bash splits a word at a backslash-newline where bash
        # joins it: parse the text bash parses, with the continuations
        # removed. Only in a comment does bash keep one (the next line runs).
        if b"#" in source:
            found.hide("a line continuation next to a comment")
        source = _CONTINUATION.sub(rb"\1", source)
    root = parse(source)
    if root.has_error:
        found.hide("the command does not parse")
    elif not fully_read(root, source):
        found.hide("the parser read this command differently from bash")
    _Walker(found, depth, source).walk(root)
    return root


@lru_cache(maxsize=512)
def analyse(command: str) -> CommandAnalysis:
    """Parse a shell command and say what it would run (cached)."""
    found = _Findings()
    try:
        root = _collect(command, found, 0)
    except RecursionError:
        found.hide("the command is nested too deeply to analyse")
        root = None
    plain = None
    if root is not None and found.opaque is None and "\\\n" not in command:
        plain = plain_words(root, command.encode("utf-8", "surrogateescape"))
    allowable = False
    if plain is not None:
        kind, _ = judge(plain)
        allowable = kind in (Kind.INERT, Kind.UNKNOWN) and not is_runner(command_name(plain[0]))
    return CommandAnalysis(plain, tuple(found.commands), found.opaque, found.unseen, allowable)
