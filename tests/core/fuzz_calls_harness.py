"""Hostile calls through the whole runtime: arbitrary Unicode, lone surrogates, raw junk.

Shared by ``tests/core/test_fuzz_unicode.py`` (a few hundred calls) and
``bench/fuzz_calls.py`` (5,000 and more). Calls reach every tool of the
default surface plus the ``edit`` and ``execute`` slots (``lsp`` is off:
pyright is slow), through :meth:`Runtime.dispatch` and through the ``zuno``
command in a subprocess. Tool names, argument names, argument values and raw
argument text are drawn from arbitrary Unicode, lone surrogates included.

What is counted, and what must be 0:

- unhandled exceptions: ``dispatch`` raised, or ``zuno`` printed a traceback
  or exited other than 0, 1 or 2;
- hangs: a step that did not settle within its bound;
- changes by blocked calls: the workspace (every path, size and content
  hash) differs after a step whose calls were all blocked;
- calls without a row: a settled call missing from the store;
- defects: a tool that failed inside Zuno (an exception in a tool);
- and at the end the store must still open and accept a call.

``shell`` and ``execute`` run for real, in the sandbox, with a 5 s timeout;
``task``, ``council_run``, ``webfetch`` and ``web_search`` (a model, the
network) are stopped by a before hook after validation and classification.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.durability.store import open_store
from zuno.policy.approvals import ApproveAll
from zuno.policy.hooks import HookCall, HookDecision
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

__all__ = ["Campaign", "Figures", "figures_table"]

STEP_TIMEOUT = 60.0
"""Seconds a step may take before it counts as a hang (a command's own timeout is 5 s)."""

CLI_TIMEOUT = 120.0

_STOPPED = {"task", "council_run", "webfetch", "web_search"}

_CONFIG: dict[str, Any] = {
    "tools": {"edit": True, "execute": True, "lsp": False},
    "memory": {"enabled": True},
    "council": {"members": ["explore", "build"]},
    "sandbox": {"timeout_default": 5, "timeout_max": 5, "job_timeout_default": 5},
}


def _stop_agents_and_network(call: HookCall) -> HookDecision | None:
    if call.tool in _STOPPED:
        return HookDecision(False, "not executed in the fuzz run")
    return None


# Strategies ---------------------------------------------------------------------

SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.characters(exclude_categories=())
NASTY = [
    "",
    ".",
    "..",
    "/",
    "~",
    "src",
    "src/a.py",
    "README.md",
    "*.py",
    "**",
    "**/*",
    "[",
    "(",
    "\\",
    "\x00",
    "\ud800",
    "a\udcff",
    "\udfff\ud800",
    "\ufeff",
    "\u202e",
    "\U0001f600",
    "../../etc/passwd",
    "/etc/passwd",
    "/dev/zero",
    "$(id)",
    "'",
    '"',
    "\n",
    "%s",
    "{}",
    "[]",
    "1e999",
    "-1",
    "NaN",
    "echo hi",
    "ls",
    "true",
    "false",
]


@st.composite
def _with_surrogate(draw: st.DrawFn, base: st.SearchStrategy[str]) -> str:
    text = draw(base)
    at = draw(st.integers(0, len(text)))
    return text[:at] + draw(SURROGATE) + text[at:]


TEXT = st.text(ANY_CHAR, max_size=40)
STRINGS = st.one_of(TEXT, st.sampled_from(NASTY), _with_surrogate(TEXT))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    STRINGS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(STRINGS, inner, max_size=3)
    ),
    max_leaves=6,
)


def _raw_text(draw: st.DrawFn, keys: list[str]) -> str:
    """Argument text that is not (only) a JSON object."""
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(STRINGS)
    value: Any = {k: draw(VALUES) for k in keys}
    if kind == 1:  # JSON with raw lone surrogates in it
        return json.dumps(value, ensure_ascii=False)
    if kind == 2:  # JSON whose escapes decode to lone surrogates
        return json.dumps(value).replace("a", "\\ud800", 1)
    if kind == 3:  # cut short
        text = json.dumps(value, ensure_ascii=False)
        return text[: draw(st.integers(0, len(text)))]
    if kind == 4:  # nested far too deep
        depth = draw(st.sampled_from([100, 1000, 100_000]))
        return "[" * depth + "]" * depth * draw(st.integers(0, 1))
    if kind == 5:  # valid JSON, not an object
        return json.dumps(draw(VALUES), ensure_ascii=False)
    return json.dumps(value)


PATHS = st.sampled_from(
    ["notes.txt", "README.md", "src", "src/a.py", "new.txt", "src/b.py", ".", "*", "**/*.py"]
)


def _typed(draw: st.DrawFn, prop: dict[str, Any]) -> Any:
    """A value of the property's declared type, its text hostile."""
    if "enum" in prop:
        return draw(st.sampled_from(prop["enum"]))
    kinds = [prop.get("type")] + [p.get("type") for p in prop.get("anyOf", [])]
    kind = next((k for k in kinds if k and k != "null"), "string")
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "integer":
        return draw(st.one_of(st.integers(0, 50), st.integers(-(2**40), 2**40)))
    if kind == "number":
        return draw(st.floats(0, 10))
    if kind == "array":
        items = prop.get("items") or {}
        return [_typed(draw, items) for _ in range(draw(st.integers(0, 2)))]
    if kind == "object":
        return draw(st.dictionaries(STRINGS, STRINGS, max_size=2))
    pick = draw(st.sampled_from(range(6)))
    if pick < 3:
        return draw(PATHS)
    if pick == 3:
        return draw(TEXT)
    if pick == 4:
        return draw(st.sampled_from(NASTY))
    return draw(_with_surrogate(PATHS))


def _templated(draw: st.DrawFn, name: str) -> Any:
    """Arguments shaped as the tool expects, hostile text where a model's text goes."""
    pick = draw(st.sampled_from(range(4)))
    text = draw([TEXT, TEXT, st.sampled_from(NASTY), _with_surrogate(TEXT)][pick])
    line = text.replace("\n", " ").replace("\r", " ")
    file = draw(st.sampled_from(["new.txt", "src/b.py", "ünï/cödé.txt", "notes.txt"]))
    templates: dict[str, Any] = {
        "read": {"path": draw(st.sampled_from([file, text]))},
        "glob": {"pattern": text or "*"},
        "grep": {"pattern": text or "a", "fixed_strings": draw(st.booleans())},
        "write": {"path": draw(st.sampled_from([file, text or "x"])), "content": text},
        "edit": {"path": "notes.txt", "old_string": "alpha", "new_string": text},
        "apply_patch": {
            "patch": draw(
                st.sampled_from(
                    [
                        f"*** Begin Patch\n*** Add File: {file}\n+{line}\n*** End Patch",
                        f"*** Begin Patch\n*** Update File: notes.txt\n@@\n-beta\n+{line}\n"
                        "*** End Patch",
                        f"*** Begin Patch\n*** Delete File: {line}\n*** End Patch",
                    ]
                )
            )
        },
        "shell": {
            "command": draw(
                st.sampled_from([f"echo {line}", f"printf '%s' {line!r}", "ls", line or "true"])
            )
        },
        "execute": {"argv": draw(st.sampled_from([["echo", text], ["ls", text], [text or "x"]]))},
        "bg": {"action": "list"},
        "job": {},
        "plan_get": {},
        "plan_update": {"plan": text},
        "todo_get": {},
        "todo_update": {"todos": [{"content": line or "x", "status": "pending"}]},
        "goal_get": {},
        "goal_update": {"objective": line or "x"},
        "memory_propose": {"text": line or "x"},
        "skill": {"name": line} if line else {},
        "question": {
            "questions": [
                {
                    "header": "h",
                    "question": line or "?",
                    "options": [{"label": line or "a"}, {"label": "b"}],
                }
            ]
        },
    }
    return templates.get(name, {"text": text})


@st.composite
def calls(draw: st.DrawFn, tools: dict[str, dict[str, Any]]) -> CallRequest:
    """One call: a tool name (often real, sometimes hostile) and hostile arguments."""
    names = sorted(tools)
    pick = draw(st.sampled_from(range(10)))
    if pick == 0:
        name = draw(_with_surrogate(st.sampled_from(names)))
    elif pick == 1:
        name = draw(STRINGS)
    else:
        name = draw(st.sampled_from(names))
    schema = tools.get(name, {})
    props: dict[str, Any] = schema.get("properties", {})
    keys = draw(
        st.lists(st.one_of(st.sampled_from([*props, "bogus"]), STRINGS), max_size=len(props) + 2)
    )
    shape = draw(st.sampled_from(range(10)))
    arguments: Any
    if shape < 3:  # shaped as the tool expects, hostile text: most of these run
        arguments = _templated(draw, name)
    elif shape < 5:  # well typed, hostile text
        wanted = set(schema.get("required", [])) | set(
            draw(st.lists(st.sampled_from(sorted(props) or [""]), max_size=3))
        )
        arguments = {k: _typed(draw, props[k]) for k in sorted(wanted) if k in props}
    elif shape < 7:
        arguments = {key: draw(VALUES) for key in keys}
    elif shape < 9:
        arguments = _raw_text(draw, keys)
    else:
        arguments = None
    return CallRequest(name, arguments)


def steps(tools: dict[str, dict[str, Any]]) -> st.SearchStrategy[list[CallRequest]]:
    """A model step: usually one call, sometimes a batch of two or three."""
    return st.lists(calls(tools), min_size=1, max_size=3).map(
        lambda cs: cs if len(cs) == 1 or cs[0].tool != cs[-1].tool else cs[:1]
    )


def has_surrogate(value: Any) -> bool:
    text = value if isinstance(value, str) else repr(value)
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


# The workspace -------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under ``root`` with its size and content hash (links by target)."""
    found: dict[str, tuple[int, str]] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            rel = os.fsencode(path.relative_to(root)).hex()
            try:
                if path.is_symlink():
                    found[rel] = (-1, os.readlink(path))
                elif path.is_file():
                    data = path.read_bytes()
                    found[rel] = (len(data), hashlib.sha256(data).hexdigest())
                else:
                    found[rel] = (-2, oct(path.stat().st_mode))
            except OSError as exc:
                found[rel] = (-3, type(exc).__name__)
    return found


# Figures -------------------------------------------------------------------------


@dataclass
class Figures:
    """What a fuzz campaign saw."""

    api_steps: int = 0
    api_calls: int = 0
    cli_runs: int = 0
    cli_calls: int = 0
    with_surrogates: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    block_kinds: Counter[str] = field(default_factory=Counter)
    ran: Counter[str] = field(default_factory=Counter)
    """Calls that were not blocked, by tool."""
    surface: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    blocked_changes: list[str] = field(default_factory=list)
    missing_rows: list[str] = field(default_factory=list)
    defects: list[str] = field(default_factory=list)
    cli_failures: list[str] = field(default_factory=list)
    store_reopened: bool = False
    call_after: str = ""
    seconds: float = 0.0

    @property
    def violations(self) -> list[str]:
        problems = [
            *self.exceptions,
            *self.hangs,
            *self.blocked_changes,
            *self.missing_rows,
            *self.defects,
            *self.cli_failures,
        ]
        if not self.store_reopened:
            problems.append("the store did not reopen")
        if self.call_after != "ok":
            problems.append(f"a call after the run ended {self.call_after or 'not at all'}")
        return problems


def figures_table(fig: Figures) -> list[tuple[str, str]]:
    """The figures as rows of (label, value)."""
    rows = [
        ("steps through Runtime.dispatch", str(fig.api_steps)),
        ("calls through Runtime.dispatch", str(fig.api_calls)),
        ("zuno call / zuno batch runs", str(fig.cli_runs)),
        ("calls through the CLI", str(fig.cli_calls)),
        ("calls holding a lone surrogate", str(fig.with_surrogates)),
        (
            "tools that ran (not blocked) through the API",
            f"{sum(1 for t in fig.surface if fig.ran[t])} of {len(fig.surface)}",
        ),
    ]
    for outcome in ("ok", "error", "uncertain", "blocked"):
        rows.append((f"outcome {outcome}", str(fig.outcomes.get(outcome, 0))))
    for kind, count in sorted(fig.block_kinds.items()):
        rows.append((f"  blocked: {kind}", str(count)))
    rows += [
        ("unhandled exceptions (must be 0)", str(len(fig.exceptions))),
        ("hangs (must be 0)", str(len(fig.hangs))),
        ("changes by blocked calls (must be 0)", str(len(fig.blocked_changes))),
        ("settled calls without a row (must be 0)", str(len(fig.missing_rows))),
        ("tools failing inside Zuno (must be 0)", str(len(fig.defects))),
        ("CLI tracebacks or bad exits (must be 0)", str(len(fig.cli_failures))),
        (
            "store reopened and took a call",
            "yes" if fig.store_reopened and fig.call_after == "ok" else "NO",
        ),
        ("time", f"{fig.seconds:.1f} s"),
    ]
    return rows


# The campaign --------------------------------------------------------------------


class Campaign:
    """One workspace, one store, one runtime; steps through the API and the CLI."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "ws"
        (self.workspace / "src").mkdir(parents=True)
        (self.workspace / "src" / "a.py").write_text("def f():\n    return 1\n")
        (self.workspace / "README.md").write_text("hello\n")
        (self.workspace / "notes.txt").write_text("alpha\nbeta\n")
        (self.workspace / "zuno.json").write_text(json.dumps(_CONFIG))
        self.db = root / "fuzz.db"
        self.config = Config.model_validate(_CONFIG)
        self.runtime = self._runtime()
        self.session = self.runtime.open_session()
        self.tools = {t.name: t.schema() for t in self.runtime.surface("build").tools}
        self.figures = Figures(surface=sorted(self.tools))
        self._cli_env = {
            **os.environ,
            "ZUNO_DB": str(self.db),
            "ZUNO_CONFIG_HOME": str(root / "config-home"),
        }

    def _runtime(self) -> Runtime:
        return Runtime(
            self.workspace,
            config=self.config,
            db_path=self.db,
            approver=ApproveAll(),
            tools=builtin_tools(self.config),
            before_hooks=[_stop_agents_and_network],
        )

    # Through the Python API ---------------------------------------------------

    def api_step(self, requests: list[CallRequest]) -> None:
        """Dispatch one step; count what came back and what changed."""
        fig = self.figures
        fig.api_steps += 1
        fig.api_calls += len(requests)
        fig.with_surrogates += sum(
            has_surrogate(r.tool) or has_surrogate(r.arguments) for r in requests
        )
        before = snapshot(self.workspace)
        label = _label(requests)

        async def go() -> list[Any] | None:
            async with self.runtime:
                with anyio.move_on_after(STEP_TIMEOUT):
                    return await self.runtime.dispatch(self.session, requests)
            return None

        try:
            results = anyio.run(go)
        except Exception:
            fig.exceptions.append(f"{label}: {traceback.format_exc(limit=-3)}")
            return
        if results is None:
            fig.hangs.append(label)
            return
        for result in results:
            fig.outcomes[result.outcome.value] += 1
            if result.block_kind is not None:
                fig.block_kinds[result.block_kind.value] += 1
            elif result.outcome is not Outcome.BLOCKED:
                fig.ran[result.tool] += 1
            if "failed inside Zuno" in result.output:
                fig.defects.append(f"{label}: {result.output[:300]!r}")
        if all(r.outcome is Outcome.BLOCKED for r in results):
            after = snapshot(self.workspace)
            if after != before:
                fig.blocked_changes.append(f"{label}: {_diff(before, after)}")
        try:
            rows = {c.call_id for c in self.runtime.store.calls(self.session.session_id)}
        except Exception:
            fig.exceptions.append(f"{label}, reading the store: {traceback.format_exc(limit=-3)}")
            return
        for result in results:
            if result.call_id not in rows:
                fig.missing_rows.append(f"{label}: {result.call_id}")

    def run_api(self, examples: int, *, seed: int | None = None) -> None:
        """``examples`` steps drawn by hypothesis (failures are counted, not raised)."""

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=seed is None,
            suppress_health_check=list(HealthCheck),
            phases=[__import__("hypothesis").Phase.generate],
        )
        @given(step=steps(self.tools))
        def one(step: list[CallRequest]) -> None:
            self.api_step(step)

        if seed is not None:
            from hypothesis import seed as with_seed

            one = with_seed(seed)(one)
        started = time.monotonic()
        one()
        self.figures.seconds += time.monotonic() - started

    # Through the zuno command ---------------------------------------------------

    def cli_run(self, requests: list[CallRequest], *, yes: bool, raw_file: bytes | None) -> None:
        """``zuno call`` (one call) or ``zuno batch`` (several), in a subprocess."""
        fig = self.figures
        fig.cli_runs += 1
        fig.cli_calls += len(requests)
        fig.with_surrogates += sum(
            has_surrogate(r.tool) or has_surrogate(r.arguments) for r in requests
        )
        label = "CLI " + _label(requests)
        common = ["--db", str(self.db), "--json", "--workspace", str(self.workspace)]
        if yes:
            common.append("--yes")
        if len(requests) == 1 and raw_file is None:
            request = requests[0]
            arguments = request.arguments
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
            argv: list[str | bytes] = [
                *sys_zuno(),
                "call",
                _argv(request.tool),
                _argv(text or "{}"),
                *common,
            ]
        else:
            batch = self.root / "batch.json"
            if raw_file is not None:
                batch.write_bytes(raw_file)
            else:
                items = [{"tool": r.tool, "args": r.arguments} for r in requests]
                batch.write_text(json.dumps(items, default=str))
            argv = [*sys_zuno(), "batch", str(batch), *common]
        before = snapshot(self.workspace)
        try:
            proc = subprocess.run(
                argv,
                cwd=self.root,
                env=self._cli_env,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=CLI_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            fig.hangs.append(label)
            return
        stderr = proc.stderr.decode("utf-8", "replace")
        if proc.returncode not in (0, 1, 2) or "Traceback" in stderr:
            fig.cli_failures.append(f"{label}: exit {proc.returncode}: {stderr[-600:]}")
            return
        if proc.returncode == 2:  # refused before dispatch (a batch that is not JSON, ...)
            if snapshot(self.workspace) != before:
                fig.blocked_changes.append(f"{label}: changed the workspace and exited 2")
            return
        try:
            body = json.loads(proc.stdout.decode("utf-8", "surrogateescape"))
        except ValueError:
            fig.cli_failures.append(f"{label}: stdout is not JSON: {proc.stdout[:300]!r}")
            return
        results = body if isinstance(body, list) else [body]
        for result in results:
            fig.outcomes[result["outcome"]] += 1
            if result.get("block_kind"):
                fig.block_kinds[result["block_kind"]] += 1
            if "failed inside Zuno" in (result.get("result") or ""):
                fig.defects.append(f"{label}: {result['result'][:300]!r}")
        if results and all(r["outcome"] == "blocked" for r in results):
            after = snapshot(self.workspace)
            if after != before:
                fig.blocked_changes.append(f"{label}: {_diff(before, after)}")

    def run_cli(self, examples: int, *, seed: int | None = None) -> None:
        """``examples`` runs of the zuno command, drawn by hypothesis."""

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=seed is None,
            suppress_health_check=list(HealthCheck),
            phases=[__import__("hypothesis").Phase.generate],
        )
        @given(
            step=steps(self.tools),
            yes=st.booleans(),
            raw=st.one_of(st.none(), st.none(), st.none(), st.binary(max_size=60)),
        )
        def one(step: list[CallRequest], yes: bool, raw: bytes | None) -> None:
            self.cli_run(step, yes=yes, raw_file=raw)

        if seed is not None:
            from hypothesis import seed as with_seed

            one = with_seed(seed)(one)
        started = time.monotonic()
        one()
        self.figures.seconds += time.monotonic() - started

    # Afterwards -----------------------------------------------------------------

    def check_store(self) -> None:
        """The store reopens (a fresh runtime, the same session) and accepts a call."""
        fig = self.figures
        try:
            self.runtime.close()
            store = open_store(self.db)
            store.close()
            fig.store_reopened = True
            runtime = self._runtime()
            session = runtime.open_session(self.session.session_id)

            async def go() -> str:
                result = await runtime.call(session, "read", {"path": "notes.txt"})
                return result.outcome.value

            fig.call_after = anyio.run(go)
            runtime.close()
            shown = subprocess.run(
                [*sys_zuno(), "show", self.session.session_id, "--db", str(self.db), "--json"],
                env=self._cli_env,
                capture_output=True,
                timeout=CLI_TIMEOUT,
            )
            if shown.returncode != 0:
                fig.cli_failures.append(f"zuno show after the run: {shown.stderr[-600:]!r}")
        except Exception:
            fig.exceptions.append(f"reopening the store: {traceback.format_exc(limit=-3)}")


def sys_zuno() -> list[str]:
    return [sys.executable, "-m", "zuno"]


def _argv(text: str) -> bytes:
    """Text as a command-line argument: lone surrogates as the bytes they stand for."""
    return text.replace("\x00", "\\0").encode("utf-8", "surrogatepass")


def _label(requests: list[CallRequest]) -> str:
    return "; ".join(f"{r.tool!r} {r.arguments!r}"[:160] for r in requests)


def _diff(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> str:
    added = sorted(bytes.fromhex(k).decode("utf-8", "replace") for k in after.keys() - before)
    gone = sorted(bytes.fromhex(k).decode("utf-8", "replace") for k in before.keys() - after)
    changed = sorted(
        bytes.fromhex(k).decode("utf-8", "replace")
        for k in before.keys() & after.keys()
        if before[k] != after[k]
    )
    return f"added {added[:5]}, removed {gone[:5]}, changed {changed[:5]}"
