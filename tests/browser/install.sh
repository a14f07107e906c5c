#!/usr/bin/env bash
# Installs what the browser test (tests/browser.rs) drives: Debian's Chromium at /usr/bin/chromium
# (or the one $CHROMIUM names) and playwright-core, pinned in tests/browser/package-lock.json, into
# the git-ignored tests/browser/node_modules (npm ci). Playwright's own browser downloads are never
# used: the test hands it Debian's Chromium as executablePath. Idempotent, and quick when both are
# there. Chromium comes only from apt: as root this installs it, otherwise it fails with the
# command to run. The test runs this on first use (tests/support/setup.rs), and so does
# tests/setup.sh.
set -euo pipefail
cd "$(dirname "$0")"

chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  if [ -n "${CHROMIUM:-}" ]; then
    echo "tests/browser/install.sh: CHROMIUM=$CHROMIUM is not an executable; unset it to use Debian's chromium" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/browser/install.sh: Chromium is missing at /usr/bin/chromium and only apt installs it (as root);" \
         "run: sudo apt-get update && sudo apt-get install -y chromium (or set CHROMIUM to another Chromium)" >&2
    exit 1
  fi
  # A fresh machine has no package lists yet.
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 chromium >/dev/null
fi
"$chromium" --version 2>/dev/null || echo "chromium installed at $chromium"

if [ ! -f node_modules/playwright-core/package.json ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent
fi
node -e 'console.log("playwright-core", require("./node_modules/playwright-core/package.json").version)'
