"""An SSH server for git, run by the egress tests in a network namespace of its own.

Usage: ``python egress_ssh_server.py ROOT`` (inside ``unshare -n``). Listens on
port 22 of every address of its namespace, lets anyone in without a password
(a test server on a private link), and runs only ``git-upload-pack`` on a
repository under ROOT. Prints ``ready`` once it listens.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
from pathlib import Path

import asyncssh


class _Open(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # no authentication needed


async def _serve(root: Path) -> None:
    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        words = shlex.split(process.command or "")
        repo = (root / words[-1].lstrip("/")).resolve() if len(words) == 2 else root
        if words[:1] != ["git-upload-pack"] or not repo.is_relative_to(root):
            process.stderr.write(b"only git-upload-pack of a repository here\n")
            process.exit(1)
            return
        git = await asyncio.create_subprocess_exec(
            "git-upload-pack",
            str(repo),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        await process.redirect(stdin=git.stdin, stdout=git.stdout, stderr=git.stderr)
        process.exit(await git.wait())

    key = asyncssh.generate_private_key("ssh-ed25519")
    await asyncssh.create_server(
        _Open, "", 22, server_host_keys=[key], process_factory=handle, encoding=None
    )
    print("ready", flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1]).resolve()))
