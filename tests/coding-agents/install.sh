#!/usr/bin/env bash
# Real coding agent CLIs for tests/coding_cli.rs, installed from the package registries into a
# cache outside the clone (~/.cache/picogent/cli, or $PICOGENT_CLI_CACHE). Runs in seconds once
# cached. The test fails, not skips, without them.
#
# Qwen Code 0.15.10 is the last release that runs on Node 20 (later ones need Node 22).
set -euo pipefail
QWEN_VERSION=0.15.10
cache="${PICOGENT_CLI_CACHE:-$HOME/.cache/picogent/cli}"
prefix="$cache/qwen-$QWEN_VERSION"
if [ ! -x "$prefix/node_modules/.bin/qwen" ]; then
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-fund --no-audit --loglevel=error "@qwen-code/qwen-code@$QWEN_VERSION"
fi
echo "qwen $("$prefix/node_modules/.bin/qwen" --version) at $prefix/node_modules/.bin/qwen"
