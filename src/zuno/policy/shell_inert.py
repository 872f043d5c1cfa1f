"""Which simple commands are known not to run or evaluate anything they are given.

Shell rules (:mod:`zuno.policy.shell_rules`) see the commands a parse can see. What a
command then does with its arguments is a property of that command, and this
module holds it as closed tables, so that a rule fails closed by
construction rather than by a list of known tricks:

* every bash builtin (the whole ``compgen -b`` list of bash 5.2) is in
  :data:`BUILTINS`, either inert (with the options that keep it inert:
  ``printf`` without ``-v``, ``test`` without ``-v``/``-R``, ``wait`` without
  ``-p``), a wrapper that runs the command in its arguments (``command``,
  ``builtin``, ``exec``, ``jobs -x``), or evaluating: it takes variable names,
  subscripts or text as code (``declare``, ``read``, ``let``, ``eval``, ...);
* programs known never to run another program or code from their arguments
  (``ls``, ``cat``, ``grep``, ``rm``, ...), a few of them only without the
  options that do (``git -c``, ``git submodule foreach``, ``sort
  --compress-program``, ``tar --to-command``, ``rg --pre``, ``find -exec``);
* everything else is unknown: a program the tables do not know may run
  anything (``python3``, ``make``, ``npm``, ``prlimit``, ``fakeroot``).

:func:`judge` gives one of :class:`Kind` for the words of one simple command.
An ``allow`` rule admits only inert and unknown commands (an unknown program
only because the rule names it, so the person who wrote the rule vouched for
it); a ``deny`` or ``ask`` rule asks about every command that is not inert or
a wrapper seen through.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from enum import Enum

__all__ = ["BUILTINS", "INERT_PROGRAMS", "Kind", "judge"]


class Kind(Enum):
    """What one simple command may do beyond what its words show."""

    INERT = "inert"
    """Runs and evaluates nothing it is given."""
    WRAPPER = "wrapper"
    """Runs the command given in its own arguments (seen through by the parse)."""
    EVALUATES = "evaluates"
    """A builtin that takes names, subscripts or text as code."""
    RUNS = "runs"
    """A known program given an option or subcommand that runs a program (``git -c``)."""
    UNKNOWN = "unknown"
    """A program the tables do not know: it may run anything."""


Words = Sequence[str | None]
Check = Callable[[Words], str | None]
"""Given a command's arguments, why this use is not inert, or None when it is."""


def _never(_args: Words) -> str | None:
    return None


def _hits(arg: str, option: str) -> bool:
    """Whether an argument word gives ``option``, however spelled.

    ``--long`` also by a unique prefix (``--compress=cmd`` for ``--compress-program``,
    as getopt_long and git accept) and with ``=value``; ``-x`` also with its value
    attached or inside a cluster (``-qx``); a one-dash word (``-exec``) only exactly.
    """
    if option.startswith("--"):
        name = arg.split("=", 1)[0]
        return arg.startswith(option) or (len(name) > 3 and option.startswith(name))
    if len(option) == 2:
        return arg.startswith(option) or bool(
            re.fullmatch(r"-[A-Za-z]+", arg) and option[1] in arg[1:]
        )
    return arg == option


def _options(*bad: str) -> Check:
    """Not inert when an argument gives one of the ``bad`` options (see :func:`_hits`)."""

    def check(args: Words) -> str | None:
        for arg in args:
            if arg is None:
                return "an argument the analysis cannot read"
            for option in bad:
                if _hits(arg, option):
                    return f"the option {option}"
        return None

    return check


def _tar(args: Words) -> str | None:
    # Old-style options: `tar cIf PROGRAM ...` takes -I's value from the next word.
    first = args[0] if args else ""
    if first is not None and not first.startswith("-") and set(first) & set("IF"):
        return "an old-style -I or -F option runs a program"
    return _TAR_OPTIONS(args)


def _printf(args: Words) -> str | None:
    # printf's only option is -v NAME (or -vNAME): the name is evaluated.
    first = args[0] if args else ""
    if first is None:
        return "an argument the analysis cannot read"
    if first.startswith("-") and first not in ("-", "--"):
        return "printf -v assigns to a name bash evaluates"
    return None


def _test(args: Words) -> str | None:
    # -v and -R look a variable name up, and a subscript in it is evaluated.
    if any(a is None or a in ("-v", "-R") for a in args):
        return "a -v or -R test evaluates a variable name"
    return None


def _jobs(args: Words) -> str | None:
    for arg in args:
        if arg is None or not arg.startswith("-") or arg == "--":
            return None if arg is not None else "an argument the analysis cannot read"
        if "x" in arg:
            return "jobs -x runs the command in its arguments"
    return None


_EVALUATES = "takes names, subscripts or text as code"


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The arguments of these are literal data: numbers bash parses without
# arithmetic, paths, option names, job specs.
_INERT_BUILTINS = _names(
    ": true false echo pwd cd pushd popd dirs exit logout return break continue shift kill "
    "disown fg bg suspend times type help umask ulimit caller set shopt unalias compopt"
)
# Names, subscripts or code, evaluated by bash itself.
_EVALUATING_BUILTINS = _names(
    ". source eval trap alias bind complete compgen enable fc hash history let declare "
    "typeset local export readonly read readarray mapfile getopts unset"
)

BUILTINS: dict[str, tuple[Kind, Check]] = {
    **{name: (Kind.INERT, _never) for name in _INERT_BUILTINS},
    "printf": (Kind.INERT, _printf),
    "test": (Kind.INERT, _test),
    "[": (Kind.INERT, _test),
    "wait": (Kind.INERT, _options("-p")),
    "jobs": (Kind.INERT, _jobs),
    # They run the command in their arguments; the parse follows them.
    **{name: (Kind.WRAPPER, _never) for name in ("command", "builtin", "exec")},
    **{name: (Kind.EVALUATES, _never) for name in _EVALUATING_BUILTINS},
}
"""Every bash 5.2 builtin: its kind, and what makes an inert one not inert."""


_PLAIN_PROGRAMS = _names(
    """
    ls dir vdir cat tac head tail wc grep egrep fgrep cut tr uniq comm
    join paste fold fmt column expand unexpand nl od hexdump xxd base64 base32 basenc
    md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum sum rev shuf
    csplit numfmt seq yes sleep date cal stat file du df tree which whereis
    whoami id groups uname hostname nproc uptime free ps pgrep pkill killall basename
    dirname realpath readlink pathchk mkdir rmdir rm cp mv ln touch chmod chown chgrp
    truncate dd sync mktemp tee printenv locale getconf tty stty tput clear diff cmp
    gzip gunzip zcat bzip2 bunzip2 bzcat xz unxz xzcat zstd unzstd lz4 unzip jq
    curl true false echo printf test [ pwd kill wc strings
    """
)
"""Programs that never start another program or run code given to them."""


def _git(args: Words) -> str | None:
    """git without the options and subcommands that run a program or edit its config."""
    if any(a is None for a in args):
        return "an argument the analysis cannot read"
    words = [a for a in args if a is not None]
    i = 0
    while i < len(words) and words[i].startswith("-"):
        option = words[i]
        if option.startswith(_GIT_GLOBAL_RUNNERS) or option in ("-C", "-c"):
            return f"git {option} can point git at other configuration or programs"
        i += 1
    sub = words[i] if i < len(words) else ""
    rest = words[i + 1 :]
    if sub in _GIT_RUNNING_SUBCOMMANDS:
        return f"git {sub} runs programs or edits git's configuration"
    if sub == "config" and not (
        any(w in _GIT_CONFIG_READS for w in rest) and not any(w in _GIT_CONFIG_WRITES for w in rest)
    ):
        return "git config can set a pager, editor, hook folder or alias that runs a program"
    for word in rest:
        if any(_hits(word, o) for o in _GIT_RUNNING_OPTIONS) or word.startswith("ext::"):
            return f"git {sub} {word.split('=')[0]} runs a program"
        if sub in _GIT_SHORT_RUNNERS.get(word, ()):
            return f"git {sub} {word} runs a program"
    return None


_GIT_GLOBAL_RUNNERS = (
    "-c",
    "--config-env",
    "--exec-path=",
    "--git-dir",
    "--work-tree",
    "-C",
    "--namespace",
    "--super-prefix",
    "--attr-source",
)
_GIT_RUNNING_SUBCOMMANDS = _names(
    """
    submodule bisect filter-branch filter-repo difftool mergetool send-email hook daemon
    instaweb credential credential-store credential-cache svn p4 cvsimport archimport
    cvsserver cvsexportcommit shell upload-pack receive-pack upload-archive http-backend
    fsmonitor--daemon web--browse remote-ext remote-fd quiltimport request-pull
    """
)
_GIT_CONFIG_READS = _names("--get --get-all --get-regexp --get-urlmatch -l --list --get-color")
_GIT_CONFIG_WRITES = _names(
    "--add --replace-all --unset --unset-all -e --edit --rename-section --remove-section --file -f"
)
_GIT_RUNNING_OPTIONS = (
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--extcmd",
    "--ext-diff",
    "--tool",
    "--open-files-in-pager",
    "--template",
    "--config",
    "--separate-git-dir",
    "--output",
)
_GIT_SHORT_RUNNERS = {
    "-u": ("clone", "fetch", "pull", "ls-remote", "archive"),
    "-x": ("rebase",),
    "-O": ("grep",),
    "-t": ("difftool", "mergetool"),
    "-c": ("clone", "submodule"),
}

_TAR_OPTIONS = _options(
    "--to-command", "-I", "--use-compress-program", "--checkpoint-action", "--info-script",
    "--new-volume-script", "-F", "--rsh-command", "--rmt-command",
)  # fmt: skip

_GUARDED: dict[str, Check] = {
    "git": _git,
    "sort": _options("--compress-program"),
    "tar": _tar,
    "rg": _options("--pre"),
    "zip": _options("-T", "--test", "-TT", "--unzip-command"),
    "install": _options("--strip-program", "-s", "--strip"),
    "rsync": _options("-e", "--rsh", "--rsync-path"),
    "split": _options("--filter"),
    "find": _options("-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fls", "-fprintf"),
}
"""Programs that run another program only through the options their check names."""

INERT_PROGRAMS = frozenset(_PLAIN_PROGRAMS | _GUARDED.keys())
"""Every program this module knows to be inert (some only without certain options)."""


def judge(words: Words) -> tuple[Kind, str | None]:
    """What one simple command (its words, the name first) may do, and why when not inert.

    Args:
        words: The command's words after quote removal, None where not literal.
            The name is compared without its folder (``/bin/ls`` is ``ls``).
    """
    if not words or words[0] is None:
        return Kind.UNKNOWN, "the command name is an expansion"
    name = words[0].rstrip("/").rsplit("/", 1)[-1] or words[0]
    args = words[1:]
    if name in BUILTINS:
        kind, check = BUILTINS[name]
        if kind is Kind.EVALUATES:
            return kind, f"`{name}` {_EVALUATES}"
        reason = check(args)
        if reason is None:
            return kind, None
        return (Kind.WRAPPER if name == "jobs" else Kind.EVALUATES), f"`{name}`: {reason}"
    if name in _GUARDED:
        reason = _GUARDED[name](args)
        return (Kind.INERT, None) if reason is None else (Kind.RUNS, f"`{name}`: {reason}")
    if name in _PLAIN_PROGRAMS:
        return Kind.INERT, None
    return Kind.UNKNOWN, f"`{name}` is not known to leave its arguments alone"
