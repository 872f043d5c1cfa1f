"""The seccomp filter that keeps a command with the network off away from host sockets.

A network namespace takes away every TCP, UDP and abstract UNIX socket of the
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
  without the system calls above;
- system calls of another ABI (x32, i386) fail, so that the checks cannot be
  bypassed through other syscall numbers.

Everything else is allowed. The module uses the standard library only: the
Landlock exec helper loads it from its own folder.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

__all__ = ["install_socket_filter", "socket_filter_bytes"]

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

# (audit arch, socket, socketpair, io_uring_setup, first number of a foreign ABI or None)
_ARCHES: dict[str, tuple[int, int, int, int, int | None]] = {
    "x86_64": (0xC000003E, 41, 53, 425, 0x40000000),
    "aarch64": (0xC00000B7, 198, 199, 425, None),
}

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def _program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jump if true, jump if false, k) instructions."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no socket filter for the {machine} architecture")
    arch, nr_socket, nr_pair, nr_uring, foreign = _ARCHES[machine]
    # Labels are resolved below: a jump names the label it goes to.
    code: list[tuple[int, str | int, str | int, int] | str] = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 0, "deny", arch),
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if foreign is not None:
        code.append((_JGE_K, "deny", 0, foreign))
    code += [
        (_JEQ_K, "socket", 0, nr_socket),
        (_JEQ_K, "pair", 0, nr_pair),
        (_JEQ_K, "deny", "allow", nr_uring),
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


def socket_filter_bytes() -> bytes:
    """The filter as an array of ``struct sock_filter`` (what ``bwrap --seccomp`` reads)."""
    return b"".join(struct.pack("=HBBI", *ins) for ins in _program())


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_socket_filter() -> None:
    """Apply the filter to this process and everything it starts (sets no_new_privs)."""
    raw = socket_filter_bytes()
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
            raise OSError(err, f"cannot install the socket filter: {os.strerror(err)}")
