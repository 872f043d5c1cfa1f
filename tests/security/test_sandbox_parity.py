"""Landlock on a par with bubblewrap: keyrings, /tmp, ptrace and terminal injection.

Each attack runs as a real command through the real ``zuno call`` command line,
under real bubblewrap and real Landlock, with the user's own configuration
letting every call run (the sandbox is the only thing in the way). A small
probe script in the workspace makes the system calls with ctypes and prints
what came back; the test judges from outside.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

KINDS = ["bubblewrap", "landlock"]
ZUNO = str(Path(sys.executable).with_name("zuno"))

_PROBE = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": dict(keyctl=250, ptrace=101, vm_readv=310, ioctl=16),
      "aarch64": dict(keyctl=219, ptrace=117, vm_readv=270, ioctl=29)}[os.uname().machine]

def err():
    return os.strerror(ctypes.get_errno())

def keyring(description):
    for name, ring in (("user", -4), ("session", -3), ("user-session", -5)):
        found = libc.syscall(NR["keyctl"], ctypes.c_long(10), ctypes.c_long(ring), b"user",
                             description.encode(), ctypes.c_long(0))
        if found < 0:
            print(f"search {name}: {err()}")
            continue
        buf = ctypes.create_string_buffer(200)
        n = libc.syscall(NR["keyctl"], ctypes.c_long(11), ctypes.c_long(found), buf,
                         ctypes.c_long(200))
        print(f"read {name}: {buf.value.decode() if n > 0 else err()}")

def ptrace():
    secret = ctypes.create_string_buffer(b"in-the-childs-memory")
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        attached = libc.syscall(NR["ptrace"], ctypes.c_long(16), ctypes.c_long(child), None, None)
        print("PTRACE-ATTACHED" if attached == 0 else f"attach: {err()}")

        class Iov(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        mine = ctypes.create_string_buffer(64)
        local = Iov(ctypes.cast(mine, ctypes.c_void_p), 64)
        remote = Iov(ctypes.cast(secret, ctypes.c_void_p), 20)
        n = libc.syscall(NR["vm_readv"], ctypes.c_long(child), ctypes.byref(local),
                         ctypes.c_long(1), ctypes.byref(remote), ctypes.c_long(1),
                         ctypes.c_long(0))
        print(f"VM-READ {mine.value.decode()}" if n > 0 else f"process_vm_readv: {err()}")
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)

def tiocsti():
    import fcntl, termios
    print("on a terminal" if os.isatty(0) else "NOT A TERMINAL")
    try:
        fcntl.ioctl(0, termios.TIOCSTI, b"#")
        print("TIOCSTI-INJECTED")
    except OSError as exc:
        print(f"tiocsti: {exc.strerror}")
    # The kernel reads the request as 32 bits: the same request with high bits set.
    char = ctypes.c_char(b"#")
    high = libc.syscall(NR["ioctl"], ctypes.c_long(0), ctypes.c_ulong((1 << 32) | termios.TIOCSTI),
                        ctypes.byref(char))
    print("TIOCSTI-HIGH-INJECTED" if high == 0 else f"tiocsti high: {err()}")

globals()[sys.argv[1]](*sys.argv[2:])
print("probe done")
"""


def _zuno(
    tmp_path: Path, kind: str, tool: str, args: Mapping[str, object], *, before: Sequence[str] = ()
) -> dict[str, Any]:
    """The JSON result of ``zuno call TOOL ARGS`` in tmp_path/ws under sandbox kind.

    before: a command that starts zuno (the argv is appended to it).
    """
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    config = {
        "permission": {"mode": "permissive"},
        "sandbox": {"kind": kind},
        "tools": {"exec_command": True},
    }
    (home / "zuno.json").write_text(json.dumps(config))
    env = {**os.environ, "ZUNO_CONFIG_HOME": str(home), "ZUNO_DB": str(tmp_path / "z.db")}
    proc = subprocess.run(
        [*before, ZUNO, "call", tool, json.dumps(args), "--json"],
        cwd=tmp_path / "ws",
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "probe.py").write_text(_PROBE)
    return workspace


def _probe(*args: str) -> str:
    return " ".join([sys.executable, "probe.py", *args])


# --- The kernel keyring ------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_KEYCTL = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
_ADD_KEY = {"x86_64": 248, "aarch64": 217}[os.uname().machine]


@pytest.fixture
def secret_key() -> Iterator[tuple[str, str]]:
    """A key with a secret value in the user's keyring (removed afterwards)."""
    description = f"zuno-test-{uuid.uuid4().hex}"
    value = f"keyring-secret-{uuid.uuid4().hex}".encode()
    serial = _libc.syscall(
        _ADD_KEY, b"user", description.encode(), value, ctypes.c_size_t(len(value)), -4
    )
    if serial < 0:
        pytest.skip(f"cannot add a key here: {os.strerror(ctypes.get_errno())}")
    try:
        yield description, value.decode()
    finally:
        _libc.syscall(_KEYCTL, ctypes.c_long(3), ctypes.c_long(serial))  # KEYCTL_REVOKE
        _libc.syscall(_KEYCTL, ctypes.c_long(9), ctypes.c_long(serial), ctypes.c_long(-4))


# A login session (pam_keyinit) runs the user's programs with a session keyring
# that links the user keyring: zuno is started the same way here.
_WITH_SESSION_KEYRING = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall(int(sys.argv[1]), ctypes.c_long(1), None)\n"
    "libc.syscall(int(sys.argv[1]), ctypes.c_long(8), ctypes.c_long(-4), ctypes.c_long(-3))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@pytest.mark.parametrize("kind", KINDS)
def test_the_users_keyring_is_out_of_reach(
    tmp_path: Path, ws: Path, kind: str, secret_key: tuple[str, str]
) -> None:
    description, value = secret_key
    login = [sys.executable, "-c", _WITH_SESSION_KEYRING, str(_KEYCTL)]
    args = {"command": _probe("keyring", description)}
    result = _zuno(tmp_path, kind, "shell", args, before=login)
    output = str(result["result"])
    assert result["data"]["sandbox"] == kind, result
    assert "probe done" in output, output
    assert value not in json.dumps(result)
    assert "read " not in output, output


# --- A private, writable /tmp --------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_tmp_is_private_and_writable(tmp_path: Path, ws: Path, kind: str) -> None:
    host_marker = Path("/tmp") / f"zuno-host-{uuid.uuid4().hex}"
    host_marker.write_text("host\n")
    inside = f"zuno-inside-{uuid.uuid4().hex}"
    try:
        command = (
            f"echo written > /tmp/{inside} && cat /tmp/{inside}; "
            f"test -e {host_marker} && echo HOST-TMP-VISIBLE; "
            'echo "TMPDIR=$TMPDIR"; mktemp | grep -q . && echo mktemp-ok'
        )
        result = _zuno(tmp_path, kind, "shell", {"command": command})
    finally:
        host_marker.unlink()
    output = str(result["result"])
    assert result["data"]["sandbox"] == kind, result
    assert "written" in output, output
    assert "mktemp-ok" in output, output
    assert "TMPDIR=/tmp" in output, output
    assert "HOST-TMP-VISIBLE" not in output, output
    assert not (Path("/tmp") / inside).exists()


# --- ptrace and process_vm_readv/writev ----------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_command_cannot_ptrace_or_read_its_own_child(tmp_path: Path, ws: Path, kind: str) -> None:
    result = _zuno(tmp_path, kind, "shell", {"command": _probe("ptrace")})
    output = str(result["result"])
    assert "probe done" in output, output
    assert "PTRACE-ATTACHED" not in output, output
    assert "VM-READ" not in output, output
    assert "attach: Operation not permitted" in output, output
    assert "process_vm_readv: Operation not permitted" in output, output


# --- TIOCSTI on the terminal handed to the command -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_tiocsti_is_refused_on_the_commands_terminal(tmp_path: Path, ws: Path, kind: str) -> None:
    args = {"command": _probe("tiocsti"), "tty": True, "yield_ms": 20000}
    result = _zuno(tmp_path, kind, "exec_command", args)
    output = str(result["result"])
    assert "on a terminal" in output, output
    assert "probe done" in output, output
    assert "TIOCSTI-INJECTED" not in output, output
    assert "tiocsti: Operation not permitted" in output, output
    assert "tiocsti high: Operation not permitted" in output, output
