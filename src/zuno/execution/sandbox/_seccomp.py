"""The seccomp filter every sandboxed command runs under.

Always, whatever the network setting, it refuses (EPERM) what would let a
command reach past its sandbox through the kernel rather than the file system:

- ``ptrace``, ``process_vm_readv`` and ``process_vm_writev``: a command cannot
  trace or read the memory of another process, its own children included;
- ``keyctl``, ``add_key`` and ``request_key``: the kernel keyring is not
  namespaced by a mount or PID namespace, and a session keyring inherited from
  a login links the user's keyring, so a command could read the user's keys
  (``keyctl search @s``, or ``@u`` where no user namespace is made);
- ``ioctl(TIOCSTI)`` and ``ioctl(TIOCLINUX)``: nothing can be typed into a
  terminal handed to the command (the one of ``exec_command`` included);
- system calls of another ABI (x32, i386), so that the checks cannot be
  bypassed through other syscall numbers.

With the network off, it also keeps the command away from host sockets. A
network namespace takes away every TCP, UDP and abstract UNIX socket of the
host, but not UNIX sockets bound to a path: any socket file the command can
see (a database's under ``/run``, a desktop bus, an agent under ``/tmp``)
stays reachable, and connecting needs no write access. Where a socket file
lives cannot be known in advance, so the filter takes away the means instead:

- ``socket(AF_UNIX, ...)`` fails with EPERM, so nothing can connect, send to or
  bind a path;
- ``socketpair(AF_UNIX, ...)`` works for stream and seqpacket pairs, which
  ignore addresses, and fails for datagram pairs, which could ``sendmsg`` to a
  path;
- ``io_uring_setup`` fails, since io_uring can open and connect sockets
  without the system calls above.

Everything else is allowed. The module uses the standard library only: the
Landlock exec helper loads it from its own folder.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import NamedTuple

__all__ = ["command_filter_bytes", "install_command_filter"]

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM

_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0 = 16  # the low 32 bits of args[0] on a little-endian machine
_OFF_ARG1 = 24

_AF_UNIX = 1
_SOCK_TYPE_MASK = 0xF
_SOCK_STREAM = 1
_SOCK_SEQPACKET = 5

_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C


class _Arch(NamedTuple):
    """The numbers the filter needs on one architecture."""

    audit: int
    socket: int
    socketpair: int
    io_uring_setup: int
    ioctl: int
    refused: tuple[int, ...]  # ptrace, process_vm_readv/writev, add_key, request_key, keyctl
    foreign: int | None  # the first number of a foreign ABI


_ARCHES: dict[str, _Arch] = {
    "x86_64": _Arch(0xC000003E, 41, 53, 425, 16, (101, 310, 311, 248, 249, 250), 0x40000000),
    "aarch64": _Arch(0xC00000B7, 198, 199, 425, 29, (117, 270, 271, 217, 218, 219), None),
}

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def _program(network: bool) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jump if true, jump if false, k) instructions."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp filter for the {machine} architecture")
    arch = _ARCHES[machine]
    # Labels are resolved below: a jump names the label it goes to.
    code: list[tuple[int, str | int, str | int, int] | str] = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 0, "deny", arch.audit),
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if arch.foreign is not None:
        code.append((_JGE_K, "deny", 0, arch.foreign))
    code += [(_JEQ_K, "deny", 0, nr) for nr in arch.refused]
    code.append((_JEQ_K, "ioctl", 0, arch.ioctl))
    if not network:
        code += [
            (_JEQ_K, "socket", 0, arch.socket),
            (_JEQ_K, "pair", 0, arch.socketpair),
            (_JEQ_K, "deny", 0, arch.io_uring_setup),
        ]
    code += [
        (_RET_K, 0, 0, _RET_ALLOW),
        "ioctl",
        # The request is an unsigned int: the kernel ignores the upper half.
        (_LD_W_ABS, 0, 0, _OFF_ARG1),
        (_JEQ_K, "deny", 0, _TIOCSTI),
        (_JEQ_K, "deny", "allow", _TIOCLINUX),
    ]
    if not network:
        code += [
            "socket",
            (_LD_W_ABS, 0, 0, _OFF_ARG0),
            (_JEQ_K, "deny", "allow", _AF_UNIX),
            "pair",
            (_LD_W_ABS, 0, 0, _OFF_ARG0),
            (_JEQ_K, 0, "allow", _AF_UNIX),
            (_LD_W_ABS, 0, 0, _OFF_ARG1),
            (_AND_K, 0, 0, _SOCK_TYPE_MASK),
            (_JEQ_K, "allow", 0, _SOCK_STREAM),
            (_JEQ_K, "allow", "deny", _SOCK_SEQPACKET),
        ]
    code += [
        "deny",
        (_RET_K, 0, 0, _RET_EPERM),
        "allow",
        (_RET_K, 0, 0, _RET_ALLOW),
    ]
    labels: dict[str, int] = {}
    index = 0
    for item in code:
        if isinstance(item, str):
            labels[item] = index
        else:
            index += 1
    program: list[tuple[int, int, int, int]] = []
    for item in code:
        if isinstance(item, str):
            continue
        op, jt, jf, k = item
        here = len(program)
        # A jump counts from the instruction after it.
        jt_n = labels[jt] - here - 1 if isinstance(jt, str) else jt
        jf_n = labels[jf] - here - 1 if isinstance(jf, str) else jf
        program.append((op, jt_n, jf_n, k))
    return program


def command_filter_bytes(network: bool) -> bytes:
    """The filter as an array of ``struct sock_filter`` (what ``bwrap --seccomp`` reads).

    Args:
        network: Whether the command may use the network (no socket rules then).
    """
    return b"".join(struct.pack("=HBBI", *ins) for ins in _program(network))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_command_filter(network: bool) -> None:
    """Apply the filter to this process and everything it starts (sets no_new_privs)."""
    raw = command_filter_bytes(network)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    prog = _SockFprog(len(raw) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong
    for args in (
        (_PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)),
        (_PR_SET_SECCOMP, ulong(_SECCOMP_MODE_FILTER), ctypes.byref(prog), ulong(0), ulong(0)),
    ):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot install the seccomp filter: {os.strerror(err)}")
