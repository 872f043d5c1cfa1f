#!/usr/bin/env bash
# Set up everything Zuno's tests need on a fresh Debian machine:
# bubblewrap (the sandbox), a virtual environment with Zuno and its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: bubblewrap is missing; install it with: sudo apt-get install -y bubblewrap" >&2
  fi
fi

python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# ripgrep is pinned in pyproject: the newest wheel needs a newer glibc than Debian 12's.
.venv/bin/pip install -q --only-binary=ripgrep -e '.[dev,postgres]'
.venv/bin/rg --version | head -n 1
# An editable install is run from src/ and, with PYTHONDONTWRITEBYTECODE=1, never
# caches bytecode: every command would compile Zuno's modules again (~100 ms).
# Compile them once, as a regular install does (a stale file is recompiled in memory).
.venv/bin/python -m compileall -q src

# PostgreSQL for the store tests that need a server (they skip without one).
if [ "$(id -u)" = 0 ]; then
  if [ ! -d /etc/postgresql ]; then
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null || true
  fi
  # tmux: the live-view tests drive `zuno run` in a real terminal (tests/cli/tmux_pane.py).
  command -v tmux >/dev/null 2>&1 || apt-get install -y tmux >/dev/null || true
  # git over SSH through the egress proxy (tests/sandbox/test_egress_ssh.py): the ssh
  # client, and ip for the veth pair to the test server's network namespace.
  command -v ssh >/dev/null 2>&1 || apt-get install -y -qq openssh-client >/dev/null || true
  command -v ip >/dev/null 2>&1 || apt-get install -y -qq iproute2 >/dev/null || true
  if dsn=$(sh scripts/start_postgres.sh 2>/dev/null | tail -n 1) && [ -n "$dsn" ]; then
    echo "$dsn" > .venv/zuno-test-postgres
    echo "setup: PostgreSQL running for the store tests ($dsn)"
  else
    rm -f .venv/zuno-test-postgres
    echo "setup: PostgreSQL could not be started; its store tests will be skipped" >&2
  fi
fi
echo "setup: done. Run the tests with: .venv/bin/python -m pytest"
