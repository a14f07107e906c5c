#!/usr/bin/env bash
# Installs what the browser test (tests/browser.rs) drives: Debian's Chromium at /usr/bin/chromium
# (apt-get, when it is missing) and playwright-core, pinned in tests/browser/package-lock.json, into
# the git-ignored tests/browser/node_modules (npm ci). Playwright's own browser downloads are never
# used: the test hands it Debian's Chromium as executablePath. Idempotent.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null || echo "chromium installed at /usr/bin/chromium"

if [ ! -f node_modules/playwright-core/package.json ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent
fi
node -e 'console.log("playwright-core", require("./node_modules/playwright-core/package.json").version)'
