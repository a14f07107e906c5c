#!/usr/bin/env bash
# Debian's bubblewrap (`bwrap`), for tests/sandbox.rs: a coding agent entry with `sandbox: true`
# runs inside it. Installed with apt-get when it is missing; the test fails, not skips, without it.
set -euo pipefail
if ! command -v bwrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi
echo "$(bwrap --version) at $(command -v bwrap)"
