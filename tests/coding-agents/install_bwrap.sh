#!/usr/bin/env bash
# Debian's bubblewrap (`bwrap`), for the tests that run a coding agent inside it (tests/sandbox.rs,
# tests/hostile_workspace.rs). It comes only from apt: as root this installs it when it is missing,
# otherwise it fails with the command to run. Idempotent, and instant when it is there. The tests
# run this on first use (tests/support/setup.rs), and so does tests/setup.sh.
set -euo pipefail
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/coding-agents/install_bwrap.sh: bwrap is missing and only apt installs it (as root);" \
         "run: sudo apt-get update && sudo apt-get install -y bubblewrap" >&2
    exit 1
  fi
  # A fresh machine has no package lists yet.
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 bubblewrap >/dev/null
fi
echo "$(bwrap --version) at $(command -v bwrap)"
