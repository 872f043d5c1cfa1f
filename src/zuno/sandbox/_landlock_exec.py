"""Apply a Landlock ruleset to this process, then exec a command.

This file is run as a script (``python -I -S _landlock_exec.py POLICY -- ARGV``)
by the Landlock sandbox, so that the restriction happens in a fresh process
rather than in a ``preexec_fn`` of the threaded runtime. It therefore imports
the standard library only. :func:`abi_version` is also used to probe the kernel.

The ruleset handles every write right Landlock knows at the running ABI and,
with the network off and ABI >= 4, TCP bind and connect with no port allowed.
Reading and executing stay unrestricted: ``read-only`` means no writes.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Sequence

__all__ = ["LandlockUnavailable", "abi_version", "main", "restrict_self"]

# The Landlock syscalls have the same numbers on every architecture (generic table).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_FS_WRITE_FILE = 1 << 1
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6


class LandlockUnavailable(OSError):
    """The kernel cannot enforce the requested Landlock ruleset."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def abi_version() -> int:
    """The Landlock ABI of the running kernel, or 0 when Landlock is unavailable."""
    try:
        return _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except OSError:
        return 0


def _write_rights(abi: int) -> int:
    rights = (
        _FS_WRITE_FILE
        | _FS_REMOVE_DIR
        | _FS_REMOVE_FILE
        | _FS_MAKE_CHAR
        | _FS_MAKE_DIR
        | _FS_MAKE_REG
        | _FS_MAKE_SOCK
        | _FS_MAKE_FIFO
        | _FS_MAKE_BLOCK
        | _FS_MAKE_SYM
    )
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    return rights


def restrict_self(write_dirs: Sequence[str], write_files: Sequence[str], network: bool) -> int:
    """Restrict this process and its future children; returns the ABI used.

    Args:
        write_dirs: Folders under which everything may be written.
        write_files: Single files (devices such as /dev/null) that may be written.
        network: Whether TCP bind and connect stay allowed.

    Raises:
        LandlockUnavailable: Landlock is missing, or too old to keep the network off.
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockUnavailable("Landlock is not available in this kernel")
    if not network and abi < 4:
        raise LandlockUnavailable(f"Landlock ABI {abi} cannot restrict TCP; ABI 4 is needed")
    fs_rights = _write_rights(abi)
    attr = _RulesetAttr(handled_access_fs=fs_rights)
    size = 8
    if abi >= 4:
        size = 16
        if not network:
            attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
    if abi >= 6:
        size = 24
        attr.scoped = _SCOPE_SIGNAL | (0 if network else _SCOPE_ABSTRACT_UNIX_SOCKET)
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        rules = [(d, fs_rights) for d in write_dirs] + [(f, file_rights) for f in write_files]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
                _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            finally:
                os.close(fd)
        # Landlock refuses an unprivileged restriction without no_new_privs.
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        _syscall(_SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    return abi


def main(argv: Sequence[str]) -> int:
    """``POLICY_JSON -- COMMAND...``: restrict, then exec COMMAND (returns only on failure)."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _landlock_exec.py POLICY_JSON -- COMMAND...", file=sys.stderr)
        return 126
    policy = json.loads(argv[0])
    try:
        restrict_self(policy["write_dirs"], policy["write_files"], bool(policy["network"]))
    except OSError as exc:
        print(f"zuno: cannot apply the Landlock sandbox: {exc}", file=sys.stderr)
        return 126
    command = list(argv[2:])
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        print(f"zuno: {command[0]}: command not found", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"zuno: cannot execute {command[0]}: {exc}", file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
