"""glob and grep against raw ``rg``, on generated trees of 9,000 and 50,000 files.

Run: ``.venv/bin/python bench/bench_search.py [--files 9000,50000] [--runs 7] [--keep DIR]``

Each tree is a git repository of source-like files (Python, TypeScript, C,
Markdown, JSON; 0.2 to 6 KiB each), plus what a real checkout has and a search
must leave out: an ignored ``node_modules/`` and ``build/`` and ignored
``*.log`` files, and a hidden ``.github/``. A rare literal sits in 12 files.
Trees are built in a temporary folder, or once in ``--keep DIR`` and reused.

Two searches, ``glob **/*.py`` and ``grep`` of the rare literal, each timed
four ways, round-robin so that load elsewhere on the machine touches all alike
(one warm-up round is not counted):

- raw: ``rg --files -g '**/*.py'`` / ``rg -n LITERAL`` as a whole process,
  its output read to the end from a pipe (what a person typing it pays);
- API: ``GlobTool.run`` / ``GrepTool.run`` in this process, from arguments to
  the bounded text a model sees (the event loop's creation not counted);
- served: ``zuno call glob|grep '{...}'`` as a whole process, answered by the
  command server (started before the rounds, in a private run folder);
- cold: the same command with ``ZUNO_SERVER=off`` (its own interpreter).

The table gives the median wall time of each, and each way's ratio to raw rg
as the median of the ratios taken round by round (robust to the machine
speeding up or slowing down between rounds). ``cpu`` is raw rg's and the
API's CPU time (rg's plus this process's); a served command's work is done in
the server's child, which this process cannot account for.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import Tool, ToolArgs, ToolContext
from zuno.execution.ripgrep._locate import find_ripgrep
from zuno.tools.search import GlobArgs, GlobTool, GrepArgs, GrepTool

__all__ = ["main"]

ZUNO = Path(sys.executable).parent / "zuno"
RARE = "zq_rare_marker_4711"
TARGETS = {"API": 1.15, "served": 1.5}
"""Issue 26/22 targets, as ratios to raw rg (served glob and grep; API glob)."""

_WORDS = [
    *("value", "result", "config", "handler", "request", "response", "session", "buffer"),
    *("index", "count", "path", "name", "data", "items", "error", "state", "token"),
    *("cache", "option", "parser", "reader", "writer"),
]
_KINDS = [(".py", 8), (".ts", 3), (".c", 2), (".h", 1), (".md", 2), (".json", 1), (".txt", 1)]


# ----------------------------------------------------------------------- the tree


def _line(rnd: random.Random, ext: str) -> str:
    a, b, c = rnd.choice(_WORDS), rnd.choice(_WORDS), rnd.choice(_WORDS)
    if ext == ".py":
        return f"    {a}_{b} = self.{c}({a}, {rnd.randint(0, 999)})  # {b}\n"
    if ext in (".ts", ".c", ".h"):
        return f"  const {a}{b.title()} = {c}({a}, {rnd.randint(0, 999)}); // {b}\n"
    return f"The {a} of the {b} goes to the {c} ({rnd.randint(0, 999)}).\n"


def build_tree(root: Path, files: int) -> None:
    """A deterministic source-like tree of ``files`` listed files (see the module doc)."""
    rnd = random.Random(files)
    kinds = [ext for ext, weight in _KINDS for _ in range(weight)]
    rare = set(rnd.sample(range(files), 12))
    folders: list[Path] = []
    made = 0
    while made < files:
        depth = rnd.randint(1, 6)
        parts = [rnd.choice(["src", "lib", "tests", "docs", "pkg"])]
        parts += [f"{rnd.choice(_WORDS)}{rnd.randint(0, 9)}" for _ in range(depth - 1)]
        folder = root.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        folders.append(folder)
        for _ in range(rnd.randint(5, 25)):
            if made >= files:
                break
            ext = rnd.choice(kinds)
            path = folder / f"{rnd.choice(_WORDS)}_{made}{ext}"
            lines = [_line(rnd, ext) for _ in range(rnd.randint(4, 120))]
            if made in rare:
                lines.insert(len(lines) // 2, f"# {RARE}\n")
            path.write_text("".join(lines))
            made += 1
    # What a search must leave out: ignored folders and files, and a hidden folder.
    for name, count in (("node_modules/dep", 400), ("build/out", 200)):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (root / name / f"m{i}.py").write_text(f"x = {i}  # {RARE}\n")
    for folder in folders[:50]:
        (folder / "debug.log").write_text(f"{RARE}\n")
    (root / ".github" / "workflows").mkdir(parents=True, exist_ok=True)
    (root / ".github" / "workflows" / "ci.py").write_text(f"# {RARE}\n")
    (root / ".gitignore").write_text("node_modules/\nbuild/\n*.log\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def tree(base: Path, files: int) -> Path:
    """The tree of ``files`` files under ``base``, built unless it is already there."""
    root = base / f"tree-{files}"
    done = root / ".git" / "zuno-bench-tree"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        build_tree(root, files)
        done.write_text(f"{files}\n")
        print(f"built {root} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return root


# ----------------------------------------------------------------------- the ways


@dataclass(frozen=True, slots=True)
class Case:
    """One search: raw rg arguments, the tool and its arguments."""

    label: str
    raw: list[str]
    tool: Tool[Any]
    args: ToolArgs

    def call(self) -> list[str]:
        """``zuno call`` arguments for the same search."""
        return ["call", self.tool.name, json.dumps(self.args.model_dump(exclude_defaults=True))]


def _cases() -> list[Case]:
    return [
        Case(
            "glob **/*.py",
            ["--files", "-g", "**/*.py"],
            GlobTool(),
            GlobArgs(pattern="**/*.py"),
        ),
        Case(f"grep {RARE} (rare)", ["-n", RARE], GrepTool(), GrepArgs(pattern=RARE)),
    ]


@dataclass(slots=True)
class Samples:
    """Wall and CPU seconds of one way of one case, round by round."""

    wall: list[float] = field(default_factory=list[float])
    cpu: list[float] = field(default_factory=list[float])


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one whole process, its output read to the end."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1) or (argv[0] == str(ZUNO) and done.returncode):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return wall, _children_cpu() - cpu


def _api(case: Case, ctx: ToolContext) -> tuple[float, float]:
    async def once() -> tuple[float, float]:
        cpu = _children_cpu() + time.process_time()
        start = time.perf_counter()
        result = await case.tool.run(case.args, ctx)
        wall = time.perf_counter() - start
        assert not result.is_error, result.output
        return wall, _children_cpu() + time.process_time() - cpu

    return anyio.run(once)


def _zuno_envs(scratch: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Environments of served and cold commands: a scratch store, no user configuration."""
    base = {
        **os.environ,
        "ZUNO_CONFIG_HOME": str(scratch / "config"),  # no user zuno.json: no MCP server
        "XDG_DATA_HOME": str(scratch / "data"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "ZUNO_DB": str(scratch / "zuno.db"),
    }
    run = scratch / "run"
    run.mkdir(mode=0o700)
    served = {**base, "ZUNO_SERVER": "on", "XDG_RUNTIME_DIR": str(run), "ZUNO_SERVER_IDLE": "3600"}
    return served, {**base, "ZUNO_SERVER": "off"}


@contextmanager
def _server(env: dict[str, str], cwd: Path) -> Generator[None]:
    """The command server for ``env`` in ``cwd``, started and answering, stopped at the end."""
    subprocess.run([str(ZUNO), "tools"], cwd=cwd, env=env, capture_output=True, check=True)
    try:
        for _ in range(600):  # the server imports everything once: seconds when loaded
            state = subprocess.run(
                [str(ZUNO), "server", "status", "--json"], cwd=cwd, env=env, capture_output=True
            )
            if b'"running": true' in state.stdout:
                break
            time.sleep(0.2)
        else:
            raise SystemExit("the command server did not start")
        yield
    finally:
        subprocess.run([str(ZUNO), "server", "stop"], cwd=cwd, env=env, capture_output=True)


def _measure(
    root: Path, runs: int, rg: str, served: dict[str, str], cold: dict[str, str]
) -> dict[str, dict[str, Samples]]:
    served, cold = {**served, "PWD": str(root)}, {**cold, "PWD": str(root)}
    ctx = ToolContext(
        workspace=root,
        session_id="bench",
        call_id="c",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(root.parent / f".artifacts-{root.name}"),
        config=None,  # type: ignore[arg-type]  # the search tools read no configuration
    )
    ways: dict[str, Callable[[Case], tuple[float, float]]] = {
        "raw rg": lambda case: _process([rg, "--no-config", *case.raw, "."], root, served),
        "API": lambda case: _api(case, ctx),
        "served": lambda case: _process([str(ZUNO), *case.call()], root, served),
        "cold": lambda case: _process([str(ZUNO), *case.call()], root, cold),
    }
    samples = {case.label: {way: Samples() for way in ways} for case in _cases()}
    with _server(served, root):
        _rounds(runs, ways, samples)
    return samples


def _rounds(
    runs: int,
    ways: dict[str, Callable[[Case], tuple[float, float]]],
    samples: dict[str, dict[str, Samples]],
) -> None:
    for round_ in range(runs + 1):
        for case in _cases():
            for way, run in ways.items():
                wall, cpu = run(case)
                if round_:  # the first round warms the page cache, the server and rg's probe
                    samples[case.label][way].wall.append(wall)
                    samples[case.label][way].cpu.append(cpu)


def _print(files: int, listed: int, samples: dict[str, dict[str, Samples]]) -> None:
    print(f"\n{files} files ({listed} listed by rg, ignored and hidden ones left out)")
    header = f"{'case':<32} {'way':<7} {'median':>9} {'ratio':>7} {'cpu':>8}  target"
    print(header)
    print("-" * len(header))
    for label, ways in samples.items():
        raw = ways["raw rg"].wall
        for way, s in ways.items():
            ratio = statistics.median(w / r for w, r in zip(s.wall, raw, strict=True))
            cpu = f"{statistics.median(s.cpu) * 1000:6.1f}ms" if way in ("raw rg", "API") else ""
            target = TARGETS.get(way)
            if way == "API" and not label.startswith("glob"):
                target = None
            goal = "" if target is None else f"<= {target:.2f}x"
            print(
                f"{label:<32} {way:<7} {statistics.median(s.wall) * 1000:7.1f}ms "
                f"{ratio:6.2f}x {cpu:>8}  {goal}"
            )


def main() -> None:
    """Build (or reuse) the trees, measure every case every way, print the tables."""
    parser = argparse.ArgumentParser(description="glob and grep against raw rg")
    parser.add_argument("--files", default="9000,50000", help="tree sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=7, help="counted rounds (default 7)")
    parser.add_argument("--keep", type=Path, help="build the trees here once and reuse them")
    options = parser.parse_args()
    sizes = [int(n) for n in options.files.split(",")]
    rg = find_ripgrep()
    print(
        f"python {sys.version.split()[0]}, rg {'.'.join(map(str, rg.version))}, "
        f"{options.runs} rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print("ratio: the median of round-by-round ratios to raw rg (wall time)")
    with tempfile.TemporaryDirectory(prefix="zuno-bench-search-") as tmp:
        scratch = Path(tmp)
        base = options.keep or scratch
        base.mkdir(parents=True, exist_ok=True)
        roots = {n: tree(base, n) for n in sizes}
        served, cold = _zuno_envs(scratch)
        for n, root in roots.items():
            listed = subprocess.run(
                [str(rg.path), "--no-config", "--files", "."], cwd=root, capture_output=True
            ).stdout.count(b"\n")
            _print(n, listed, _measure(root, options.runs, str(rg.path), served, cold))
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
