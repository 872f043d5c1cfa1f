"""Isolate, apply a Landlock ruleset, then exec a command.

This file is run as a script (``python -I -S _landlock_exec.py POLICY -- ARGV``)
by the Landlock sandbox, so that the restriction happens in a fresh process
rather than in a ``preexec_fn`` of the threaded runtime. It therefore imports
the standard library only (and :mod:`_seccomp` from its own folder).
:func:`abi_version` is also used to probe the kernel.

What it does, in order:

1. ``unshare`` a PID, mount and IPC namespace, and a network namespace when
   the network is off (plus a user namespace when not run as root), then fork.
   The parent stays outside, waits, and exits the way the command did.
2. The child is PID 1 of the new namespace: it dies with the parent
   (``PR_SET_PDEATHSIG``), mounts a fresh ``/proc`` (only the command's own
   processes are visible), a private ``/dev/shm``, the command's private
   folder over ``/tmp`` (see :func:`_cover_tmp`), binds the policy's read-only
   paths (the workspace's control files) read-only over themselves, and forks
   the command.
   It reaps orphans, and when the command exits it exits too, so that the
   kernel kills everything the command left behind (``setsid``, ``nohup``,
   ``cmd &``), as under bubblewrap.
3. The command's process applies the ruleset, drops every capability (a root
   command could otherwise load kernel modules), joins a fresh session
   keyring, installs the seccomp filter
   of :mod:`_seccomp` (no ptrace, no keyring, no TIOCSTI; with the network
   off, no host socket), and execs.

The ruleset handles every write right Landlock knows at the running ABI and,
with the network off and ABI >= 4, TCP bind and connect with no port allowed.
Reading and executing stay unrestricted: ``read-only`` means no writes.
Landlock also keeps the command from ptrace-like access (``/proc/PID/environ``,
``/proc/PID/mem``) to any process outside its domain, Zuno included.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import platform
import signal
import sys
from collections.abc import Sequence

__all__ = ["LandlockUnavailable", "abi_version", "isolate", "main", "restrict_self"]

# The Landlock syscalls have the same numbers on every architecture (generic table).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_KEYCTL_JOIN_SESSION_KEYRING = 1
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine(), -1)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_NOATIME = 1024
_MS_NODIRATIME = 2048
_MS_RELATIME = 1 << 21
_SHM = "/dev/shm"
_TMP = "/tmp"

# Flags a remount inside a user namespace must keep (the kernel locks them).
_KEPT_FLAGS = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_NOATIME | _MS_NODIRATIME | _MS_RELATIME

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


_PrivateTmp = tuple[str, list[str], list[str]]
"""The private folder to mount over /tmp, the tops to show again, the writable folders."""


class LandlockUnavailable(OSError):
    """The kernel cannot enforce the requested Landlock ruleset."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _loopback_up() -> None:
    """Bring up ``lo`` in a fresh network namespace (for the egress proxy's port)."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # SIOCSIFFLAGS: IFF_UP


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_ulong = ctypes.c_ulong


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


def restrict_self(
    write_dirs: Sequence[str],
    write_files: Sequence[str],
    network: bool,
    ports: Sequence[int] = (),
) -> int:
    """Restrict this process and its future children; returns the ABI used.

    Args:
        write_dirs: Folders under which everything may be written.
        write_files: Single files (devices such as /dev/null) that may be written.
        network: Whether TCP bind and connect stay allowed.
        ports: With the network off, TCP ports that may still be bound and
            connected to (the egress proxy's, on the namespace's own loopback).

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
        for port in () if network else ports:
            net = _NetPortAttr(allowed_access=_NET_BIND_TCP | _NET_CONNECT_TCP, port=port)
            _syscall(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(net), 0)
        # Landlock refuses an unprivileged restriction without no_new_privs.
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        _syscall(_SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    return abi


def _prctl(option: int, arg: int, *rest: int) -> None:
    args = [_ulong(a) for a in (arg, *rest)]
    args += [_ulong(0)] * (4 - len(args))
    if _libc.prctl(option, *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(
        _libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            _ulong(flags),
            None,
        ),
        f"mount {target}",
    )


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _bind_read_only(path: str) -> None:
    """Bind path over itself read-only (a mount point cannot be renamed or removed)."""
    if os.path.islink(path) or not os.path.exists(path):
        return
    _mount(path, path, None, _MS_BIND | _MS_REC)
    _remount_read_only(path)


def _remount_read_only(path: str) -> None:
    kept = os.statvfs(path).f_flag & _KEPT_FLAGS
    _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | kept)


def _cover_tmp(private: str, tops: Sequence[str], writable: Sequence[str]) -> None:
    """Mount the private folder over /tmp, as bubblewrap does.

    What the command must still reach below the host's /tmp comes back: each of
    tops (the first-level folders holding the workspace or a writable root)
    read-only, so that nothing else in them can be written, then each writable
    folder under /tmp read-write. Their descriptors are opened before /tmp is
    covered, since their paths lead into the private folder afterwards.
    """
    held: list[tuple[int, str, bool]] = []
    try:
        for path, read_only in [(private, False), *((t, True) for t in tops)] + [
            (w, False) for w in writable if w.startswith(_TMP + "/")
        ]:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            held.append((fd, path, read_only))
        for fd, path, read_only in held:
            target = _TMP if path == private else path
            if read_only:
                os.makedirs(target, mode=0o700, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
            if read_only:
                _remount_read_only(target)
    finally:
        for fd, _, _ in held:
            os.close(fd)
    # A working folder under /tmp was reached through the covered mount: take it
    # again through the new ones, so that the read-only binds below apply to it.
    with contextlib.suppress(OSError):
        os.chdir(os.getcwd())


def isolate(
    network: bool,
    read_only: Sequence[str],
    tmp: _PrivateTmp | None = None,
    pinned: Sequence[str] = (),
    loopback: bool = False,
) -> int:
    """Move into new namespaces; return in PID 1 of the new PID namespace only.

    The calling process forks. The parent never returns: it waits for the
    child and exits with the command's status (re-raising its signal). The
    child returns, once its mounts are in place, the descriptor on which it
    must report how the command ended (see :func:`_reap_until`).

    Raises:
        OSError: The namespaces cannot be created here.
    """
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC | (0 if network else _CLONE_NEWNET)
    if uid != 0:
        flags |= _CLONE_NEWUSER
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
    if uid != 0:
        # Keep the same identity inside, with the namespace's capabilities for the mounts.
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    if loopback and not network:
        _loopback_up()
    status_read, status_write = os.pipe()
    child = os.fork()
    if child:
        os.close(status_write)
        _relay(child, status_read)  # never returns
    os.close(status_read)
    # A parent killed before this line still takes PID 1 along: the kill is
    # sent to the whole process group, which PID 1 has not left.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        _mount_private_views(read_only, tmp, pinned)
    except OSError as exc:
        print(f"zuno: cannot isolate the command (mounts): {exc}", file=sys.stderr)
        os.write(status_write, b"exit 126")
        os._exit(126)
    return status_write


def _mount_private_views(
    read_only: Sequence[str], tmp: _PrivateTmp | None, pinned: Sequence[str] = ()
) -> None:
    """In the new mount namespace: fresh /proc and /dev/shm, a private /tmp, read-only
    control files.

    Each pinned folder is bound over itself first (still writable): a mount
    point cannot be renamed or removed, so the way to a read-only folder stays.
    """
    # Private first, so that no mount below reaches the host's namespace.
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if os.path.isdir(_SHM):
        # A private, writable /dev/shm (POSIX semaphores, multiprocessing), as under bwrap.
        _check(
            _libc.mount(
                b"tmpfs", _SHM.encode(), b"tmpfs", _ulong(_MS_NOSUID | _MS_NODEV), b"mode=1777"
            ),
            f"mount {_SHM}",
        )
    if tmp is not None:
        _cover_tmp(*tmp)
    for path in pinned:
        if os.path.isdir(path) and not os.path.islink(path):
            _mount(path, path, None, _MS_BIND | _MS_REC)
    for path in read_only:
        _bind_read_only(path)


def _relay(child: int, status_read: int) -> None:
    """Outside the namespace: wait for PID 1 and end the way the command ended."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    report = b""
    while chunk := os.read(status_read, 64):
        report += chunk
    kind, _, number = report.decode(errors="replace").partition(" ")
    if kind == "signal" and number.isdigit():
        sig = int(number)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is to be ignored
    if kind == "exit" and number.isdigit():
        os._exit(int(number))
    # PID 1 was killed before the command ended (by SIGKILL from outside).
    if os.WIFSIGNALED(status):
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(125)


def _reap_until(command: int, status_fd: int) -> None:
    """As PID 1: reap every child; when command ends, report it and exit."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(125)
        if pid != command:
            continue
        if os.WIFSIGNALED(status):
            report = f"signal {os.WTERMSIG(status)}"
        else:
            report = f"exit {os.waitstatus_to_exitcode(status)}"
        os.write(status_fd, report.encode())
        # Exiting ends the namespace: the kernel kills whatever is left in it.
        os._exit(0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> None:
    """Empty the bounding, ambient, inheritable, permitted and effective sets.

    With the bounding set empty a root command gets no capability at exec either.
    """
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, _ulong(cap), _ulong(0), _ulong(0), _ulong(0)) != 0:
            err = ctypes.get_errno()
            if err not in (22, 1):  # EINVAL: no such capability; EPERM: not held
                raise OSError(err, f"cannot drop capability {cap}: {os.strerror(err)}")
    _libc.prctl(_PR_CAP_AMBIENT, _ulong(_PR_CAP_AMBIENT_CLEAR_ALL), _ulong(0), _ulong(0), _ulong(0))
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _join_fresh_session_keyring() -> None:
    """Leave the session keyring inherited from Zuno (a login's links the user's keys).

    The seccomp filter refuses every keyring call of the command; this also keeps
    lookups the kernel makes on its behalf (filesystem keys) off the user's keys.
    A second line only, so a refusal is not an error: a kernel without keyrings,
    a container whose own filter refuses keyctl, a user whose key quota is full.
    """
    _libc.syscall(_SYS_KEYCTL, _ulong(_KEYCTL_JOIN_SESSION_KEYRING), None)


def _load_seccomp(network: bool) -> None:
    # The helper runs isolated (-I): its sibling module is loaded by path.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_seccomp.py")
    spec = importlib.util.spec_from_file_location("_zuno_seccomp", path)
    if spec is None or spec.loader is None:
        raise OSError(2, f"cannot load the seccomp filter from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install_command_filter(network)


def _exec(command: list[str], policy: dict[str, object], network: bool) -> int:
    """Restrict this process and exec command; returns an exit status only on failure."""
    isolated = bool(policy.get("isolate", True))
    write_dirs = list(policy["write_dirs"])  # type: ignore[call-overload]
    if isolated and os.path.isdir(_SHM):
        write_dirs.append(_SHM)  # the private tmpfs mounted by isolate()
    try:
        port = policy.get("egress_port")
        ports = [port] if isinstance(port, int) else []
        restrict_self(write_dirs, policy["write_files"], network, ports)  # type: ignore[arg-type]
        if isolated:
            drop_capabilities()
            _join_fresh_session_keyring()
            _load_seccomp(network)
    except OSError as exc:
        print(f"zuno: cannot apply the Landlock sandbox: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        print(f"zuno: {command[0]}: command not found", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"zuno: cannot execute {command[0]}: {exc}", file=sys.stderr)
        return 126


def main(argv: Sequence[str]) -> int:
    """``POLICY_JSON -- COMMAND...``: isolate, restrict, then exec COMMAND.

    POLICY_JSON holds ``write_dirs``, ``write_files``, ``network``, and
    optionally ``read_only`` (paths bound read-only), ``pinned`` (folders
    bound over themselves, before those), ``private_tmp`` and
    ``tmp_tops`` (the folder mounted over /tmp, and the first-level folders of
    the host's /tmp shown again read-only), ``isolate`` (false:
    no namespaces, only the ruleset; the probe uses it to tell the two apart)
    and ``parent`` (the pid of the Zuno process: the command dies with it).
    """
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _landlock_exec.py POLICY_JSON -- COMMAND...", file=sys.stderr)
        return 126
    policy = json.loads(argv[0])
    network = bool(policy["network"])
    command = list(argv[2:])
    parent = policy.get("parent")
    if isinstance(parent, int):
        # Die with the Zuno process that started us, even when it is killed outright:
        # PID 1 below dies with us, and the kernel ends everything in its namespace.
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            return 137  # it died before the line above: as if killed with it
    if not policy.get("isolate", True):
        return _exec(command, policy, network)
    tmp: _PrivateTmp | None = None
    if isinstance(policy.get("private_tmp"), str):
        tmp = (policy["private_tmp"], policy.get("tmp_tops", []), policy["write_dirs"])
    try:
        status_fd = isolate(
            network,
            policy.get("read_only", []),
            tmp,
            policy.get("pinned", []),
            loopback=policy.get("egress_port") is not None,
        )
    except OSError as exc:
        print(f"zuno: cannot isolate the command (namespaces): {exc}", file=sys.stderr)
        return 126
    # PID 1 of the new namespace from here on.
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        os._exit(_exec(command, policy, network))
    _reap_until(pid, status_fd)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
