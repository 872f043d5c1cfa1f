"""Programs that run a command given in their own arguments, as shell rules follow them.

:mod:`zuno.policy.shell_rules` sees through these: ``nice -n 5 rm x`` runs ``rm``,
``bash -c 'rm x'`` runs the string's commands. Each entry says how the
program's options are laid out, so the command after them can be found. A
program missing here is not a hole: :mod:`zuno.policy.shell_inert` calls it
unknown, and a deny rule then asks about it. Being here makes a deny
precise (``prlimit rm x`` is denied, not asked about).

Some of them start an interactive shell when given no command (``unshare``,
``script``, ``fakeroot``, ``chroot DIR``, ``sudo -s``): that shell reads its
commands from stdin, where no rule can see them (:data:`SHELL_WHEN_EMPTY`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "FD_EXEC",
    "FIND_EXEC",
    "OTHER_SHELLS",
    "SHELLS",
    "SHELL_ARG_OPTIONS",
    "SHELL_WHEN_EMPTY",
    "STRING_RUNNERS",
    "WRAPPERS",
    "Wrapper",
    "is_runner",
    "takes_value",
    "wrapper_for",
]

SHELLS = frozenset({"bash", "sh", "dash", "ash", "rbash"})
"""Shells whose -c string is parsed here as bash."""
OTHER_SHELLS = frozenset({"zsh", "ksh", "mksh", "yash", "posh", "fish", "tcsh", "csh", "pwsh"})
"""Shells with their own syntax (zsh runs ``=rm`` as /usr/bin/rm): what they run is not seen."""
SHELL_ARG_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
"""Shell options that take the next word as their argument."""
STRING_RUNNERS = {"su": "c", "runuser": "c", "script": "c", "flock": "c", "sg": "c"}
"""Programs that take a command string as the value of a short option (and ``--command``)."""
SHELL_WHEN_EMPTY = frozenset(
    {"unshare", "nsenter", "chroot", "fakeroot", "firejail", "script", "su", "runuser", "sg"}
    | {"setarch", "linux32", "linux64", "i386", "x86_64", "uname26", "busybox", "newgrp"}
    | {"sudo", "doas"}
)
"""Programs that start an interactive shell when no command follows their options."""
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
"""find's actions that run a command up to ``;`` or ``+``."""
FD_EXEC = frozenset({"-x", "--exec", "-X", "--exec-batch"})
"""fd's options that run the rest of the words."""


@dataclass(frozen=True, slots=True)
class Wrapper:
    """A program that runs the command given in its own arguments."""

    arg_options: frozenset[str] = frozenset()
    """Options that take the next word as their value (long ones also by a unique prefix)."""
    positionals: int = 0
    """Words between the options and the command (``timeout DURATION``)."""
    assignments: bool = False
    """``NAME=value`` words may precede the command (``env``)."""
    flags: frozenset[str] = frozenset()
    """Options known to take no value: single letters (clusters of them count) and long ones."""

    def is_flag(self, arg: str) -> bool:
        """Whether an option word is known to take no value (``-iv``, ``--fork``)."""
        if arg.startswith("--"):
            return arg in self.flags
        return len(arg) > 1 and all(f"-{letter}" in self.flags for letter in arg[1:])


def _w(
    options: str = "", positionals: int = 0, assignments: bool = False, flags: str = ""
) -> Wrapper:
    return Wrapper(frozenset(options.split()), positionals, assignments, frozenset(flags.split()))


_SETARCH = _w("--uname-2.6")
_LOADER = _w("--library-path --preload --audit --argv0 --inhibit-rpath --glibc-hwcaps-mask")

WRAPPERS: dict[str, Wrapper] = {
    "command": _w(),
    "builtin": _w(),
    "exec": _w("-a"),
    "jobs": _w(flags="-l -n -p -r -s -x"),
    "nohup": _w(),
    "time": _w("-f --format -o --output", flags="-p -v -a -q --portability --verbose --append"),
    "coproc": _w(),
    "setsid": _w(flags="-c -f -w --ctty --fork --wait"),
    "unbuffer": _w(),
    "busybox": _w(),
    "firejail": _w(),
    "catchsegv": _w(),
    "eatmydata": _w(),
    "proxychains": _w("-f"),
    "proxychains4": _w("-f"),
    "torsocks": _w("-u -p -a -P"),
    "env": _w(
        "-u --unset -C --chdir",
        assignments=True,
        flags="- -i -0 -v --ignore-environment --null --debug",
    ),
    "sudo": _w(
        "-u --user -g --group -h --host -p --prompt -C --close-from -D --chdir -r --role "
        "-t --type -T --command-timeout -U --other-user -R --chroot"
    ),
    "doas": _w("-u -C"),
    "nice": _w("-n --adjustment"),
    "ionice": _w("-c --class -n --classdata -p --pid -P --pgid -u --uid"),
    "timeout": _w(
        "-s --signal -k --kill-after",
        positionals=1,
        flags="-v --verbose --preserve-status --foreground",
    ),
    "stdbuf": _w("-i -o -e --input --output --error"),
    "chrt": _w("-T -P -D", positionals=1),
    "taskset": _w("", positionals=1),
    "flock": _w("-w --timeout -E --conflict-exit-code", positionals=1),
    "chroot": _w("--userspec --groups", positionals=1),
    "unshare": _w(
        "--map-user --map-group --setuid --setgid --wd -R --root -w -S -G",
        flags="-m -u -i -n -p -U -C -T -f -r -c --fork --mount-proc --map-root-user "
        "--map-current-user --kill-child",
    ),
    "nsenter": _w("-t --target -S -G --setuid --setgid -r -w --wd"),
    "strace": _w("-e -o -p -s -u -E -a -b -I -O -P -S -X"),
    "ltrace": _w("-e -o -p -s -u -a -A -D -F -n"),
    "xargs": _w(
        "-I -n -L -P -s -d -E -a --arg-file --delimiter --max-args --max-procs "
        "--max-lines --max-chars --eof --replace --process-slot-var"
    ),
    "prlimit": _w("-p --pid -o --output", flags="--noheadings --raw --verbose"),
    "setpriv": _w(
        "--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps --ambient-caps "
        "--bounding-set --securebits --pdeathsig --selinux-label --apparmor-profile "
        "--landlock-access --landlock-rule --seccomp-filter"
    ),
    "setarch": Wrapper(_SETARCH.arg_options, positionals=1),
    **{alias: _SETARCH for alias in ("linux32", "linux64", "i386", "x86_64", "uname26")},
    "fakeroot": _w("-l --lib --faked -s -i -b"),
    "valgrind": _w(flags="-q -v --quiet --verbose"),
    "faketime": _w("-m -f", positionals=1),
}
"""How each wrapper's options are laid out."""

_LOADERS = re.compile(r"ld(?:-linux[\w.-]*)?\.so(?:\.\d+)*|ld-[\w.-]+\.so(?:\.\d+)*")


def wrapper_for(name: str) -> Wrapper | None:
    """The layout of a wrapper's options, or None when ``name`` is not one.

    The dynamic loader (``ld-linux-x86-64.so.2 /bin/rm``) is one too.
    """
    found = WRAPPERS.get(name)
    if found is None and _LOADERS.fullmatch(name):
        return _LOADER
    return found


def is_runner(name: str) -> bool:
    """Whether shell rules follow ``name`` as a program that runs a given command."""
    return (
        wrapper_for(name) is not None
        or name in SHELLS
        or name in OTHER_SHELLS
        or name in STRING_RUNNERS
        or name in ("watch", "find", "fd", "fdfind")
    )


def takes_value(arg: str, options: frozenset[str]) -> bool:
    """Whether an option word takes the next word as its value.

    A long option given by a unique prefix (``--chd`` for ``--chdir``) counts,
    as getopt_long accepts it.
    """
    if arg in options:
        return True
    if not arg.startswith("--") or "=" in arg or len(arg) < 3:
        return False
    return any(option.startswith(arg) for option in options if option.startswith("--"))
