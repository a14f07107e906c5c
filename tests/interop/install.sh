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

# MCP servers this project did not write, for the host side (tests/mcp_host.rs):
#   .venv-test                       mcp-server-time, mcp-server-git  (MCP_SERVER_TIME, MCP_SERVER_GIT)
#   tests/interop/node_modules       @modelcontextprotocol/server-everything (MCP_SERVER_EVERYTHING),
#                                    @modelcontextprotocol/server-filesystem (tests/mcp_official.rs)
if [ ! -x .venv-test/bin/mcp-server-time ] || [ ! -x .venv-test/bin/mcp-server-git ]; then
  python3 -m venv .venv-test
  .venv-test/bin/pip install --quiet -r tests/interop/requirements.txt
fi
if [ ! -d tests/interop/node_modules/@modelcontextprotocol/server-everything ] \
   || [ ! -d tests/interop/node_modules/@modelcontextprotocol/server-filesystem ]; then
  (cd tests/interop && npm ci --no-audit --no-fund --silent)
fi
echo "host-side servers installed"
