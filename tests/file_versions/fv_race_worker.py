"""One Zuno worker process for the write-race tests (run as a script; imported for ``Worker``).

As a script it opens a real :class:`zuno.session.runtime.Runtime` on the store named
by ``--db`` (a SQLite file or a ``postgresql://`` URL), opens one session, and
obeys JSON commands read from stdin, one per line, answering each with one
JSON line on stdout::

    {"op": "read", "path": P}                 -> {"outcome": ..., "output": ...}
    {"op": "write", "path": P, "content": C}  -> {"outcome": ..., "output": ...}
    {"op": "hold", "path": P, "content": C}   -> {"held": true}, then waits for
        the line "go" and answers {"done": true}: the session's write of P taken
        through :class:`zuno.durability.file_versions.FileVersions` directly, holding the
        file's head between its check and its write for as long as the test likes
    {"op": "close"}                           -> exits

Imported, :class:`Worker` starts one and talks to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
REPLY_TIMEOUT = 120.0


class Worker:
    """A worker process, commanded over its stdin."""

    def __init__(self, db: str, ws: Path, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--db", db, "--ws", str(ws)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "ZUNO_WORKER_NAME": name},
        )
        self._session: str | None = None

    @property
    def session(self) -> str:
        """The worker's session id (waits for the worker to be ready)."""
        if self._session is None:
            self._session = str(self.reply()["session"])
        return self._session

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the test's timeout bounds a hung worker
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(f"worker {self.name} ended: {self.proc.stderr.read()[-3000:]}")
        answer: dict[str, Any] = json.loads(line)
        if "crashed" in answer:
            raise AssertionError(f"worker {self.name}: {answer['crashed']}")
        return answer

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.session
        self.send(**command)
        return self.reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send(op="close")
                self.proc.wait(timeout=REPLY_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


# --- the worker side ------------------------------------------------------------------


def _hold(rt: Any, session_id: str, path: Path, content: str) -> None:
    from zuno.durability.file_versions import FileVersions

    data = content.encode()
    versions = FileVersions(rt.store)
    with versions.claim(session_id, "call_held", [str(path)]) as claim:
        info = path.stat() if path.exists() else None
        claim.verify(path, info, path.read_bytes, path.name)
        print(json.dumps({"held": True}), flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("expected go")
        temp = path.with_name(path.name + ".held")
        temp.write_bytes(data)
        os.replace(temp, path)
        claim.wrote(path, data)
    print(json.dumps({"done": True}), flush=True)


async def _serve(db: str, ws: Path) -> None:
    import anyio.to_thread

    from zuno.config.loading import Config
    from zuno.durability.store import open_store
    from zuno.policy.approvals import ApproveAll
    from zuno.session.runtime import Runtime

    rt = Runtime(ws, config=Config(), store=open_store(db), approver=ApproveAll())
    async with rt:
        session = rt.open_session()
        print(json.dumps({"session": session.session_id}), flush=True)
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            command = json.loads(line)
            op = command["op"]
            try:
                if op == "close":
                    break
                if op == "hold":
                    await anyio.to_thread.run_sync(
                        _hold, rt, session.session_id, ws / command["path"], command["content"]
                    )
                    continue
                arguments = {k: v for k, v in command.items() if k != "op"}
                result = await rt.call(session, op, arguments)
                answer = {"outcome": result.outcome.value, "output": result.output}
            except Exception as exc:  # the test sees it instead of a hang
                answer = {"crashed": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    rt.close()


def main() -> None:
    import argparse

    import anyio

    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--ws", required=True, type=Path)
    args = parser.parse_args()
    anyio.run(_serve, args.db, args.ws)


if __name__ == "__main__":
    main()
