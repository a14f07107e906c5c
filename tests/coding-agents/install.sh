#!/usr/bin/env bash
# Real coding agent CLIs for tests/coding_cli.rs, installed from the package registries into a
# cache outside the clone (~/.cache/picogent/cli, or $PICOGENT_CLI_CACHE). Idempotent; runs in
# seconds once cached. The test runs this on first use (tests/support/setup.rs), and so does
# tests/setup.sh; the test fails, not skips, when it fails.
#
# Qwen Code 0.15.10 is the last release that runs on Node 20 (later ones need Node 22); Claude Code
# 2.1.197 and Codex 0.171.0 are native binaries their npm packages carry; Gemini CLI 0.61.0 runs on
# Node 20 (its engines field asks for >=20); OpenCode 1.18.33 is a native binary (Bun) its npm
# package carries, with the provider for chat completions inside it (nothing installed at its start).
# mini-swe-agent goes into a virtual environment of its own (it pulls in litellm).
set -euo pipefail
QWEN_VERSION=0.15.10
MSWEA_VERSION=2.4.6
CLAUDE_VERSION=2.1.197
GEMINI_VERSION=0.61.0
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
cache="${PICOGENT_CLI_CACHE:-$HOME/.cache/picogent/cli}"
# npm_cli FOLDER PACKAGE@VERSION PROGRAM: installs the package into $cache/FOLDER unless PROGRAM is
# there, then says its version and path. `--version` runs in a throwaway home (OpenCode makes its
# folders under the XDG ones even for that), never the operator's.
npm_cli() {
  local prefix="$cache/$1" program="$cache/$1/node_modules/.bin/$3"
  if [ ! -x "$program" ]; then
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-fund --no-audit --loglevel=error "$2"
  fi
  local scratch version
  scratch="$(mktemp -d "$cache/.home-XXXXXX")"
  version="$(HOME="$scratch" XDG_CONFIG_HOME="$scratch" XDG_DATA_HOME="$scratch" XDG_CACHE_HOME="$scratch" \
    XDG_STATE_HOME="$scratch" "$program" --version)"
  rm -rf "$scratch"
  echo "$3 $version at $program"
}

npm_cli "qwen-$QWEN_VERSION" "@qwen-code/qwen-code@$QWEN_VERSION" qwen
# Claude Code: its npm package brings a native binary for the platform (about 250 MB).
npm_cli "claude-code-$CLAUDE_VERSION" "@anthropic-ai/claude-code@$CLAUDE_VERSION" claude
# Gemini CLI: one bundled script and node-pty (about 100 MB).
npm_cli "gemini-cli-$GEMINI_VERSION" "@google/gemini-cli@$GEMINI_VERSION" gemini
# Codex CLI: its npm package brings the native binary for the platform as an optional dependency
# (about 420 MB installed).
npm_cli "codex-$CODEX_VERSION" "@openai/codex@$CODEX_VERSION" codex
# OpenCode: its npm package brings the native binary for the platform as an optional dependency,
# and its postinstall links it in place of the launcher (about 350 MB installed).
npm_cli "opencode-$OPENCODE_VERSION" "opencode-ai@$OPENCODE_VERSION" opencode

venv="$cache/mswea-$MSWEA_VERSION"
if [ ! -x "$venv/bin/mini" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mini-swe-agent==$MSWEA_VERSION"
fi
# (importlib.metadata, not `pip show`: the same answer in a tenth of the time.)
echo "mini-swe-agent $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mini-swe-agent"))') at $venv/bin/mini"
