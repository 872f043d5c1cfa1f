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
echo "setup: done. Run the tests with: .venv/bin/python -m pytest"
