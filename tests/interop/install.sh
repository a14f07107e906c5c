#!/usr/bin/env bash
# Installs the MCP clients the interop tests (tests/mcp_server.rs) drive, into .interop/ (git-ignored):
#   .interop/venv                      the official Python MCP SDK, 2.x   (MCP_INTEROP_PYTHON)
#   .interop/node_modules/.bin/mcp-inspector  the MCP Inspector          (MCP_INTEROP_INSPECTOR)
# Idempotent: what is already there is kept. Needs python3 (with venv) and npm; reaches only PyPI and npm.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ ! -x .interop/venv/bin/python ] || ! .interop/venv/bin/python -c 'import mcp' 2>/dev/null; then
  python3 -m venv .interop/venv
  .interop/venv/bin/pip install --quiet 'mcp>=2,<3'
fi
.interop/venv/bin/python -c 'import importlib.metadata as m; print("python mcp", m.version("mcp"))'

if [ ! -x .interop/node_modules/.bin/mcp-inspector ]; then
  # On node 20 npm resolves the newest inspector that supports it (0.15.x); 2.x needs node >= 22.19.
  npm install --prefix .interop --no-audit --no-fund --silent @modelcontextprotocol/inspector
fi
node -e 'console.log("inspector", require("./.interop/node_modules/@modelcontextprotocol/inspector/package.json").version)'
