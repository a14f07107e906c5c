#!/usr/bin/env bash
# Whole benchmark run: builds picogent (release), installs the peers (Node's
# @modelcontextprotocol/server-everything and @modelcontextprotocol/sdk into bench/node_modules,
# FastMCP into bench/.venv),
# runs the in-process comparisons (benches/compare.rs), the whole-process memory figures
# (bench/procs.py), the MCP stdio round trips (benches/mcp_stdio.rs) and replicas on PostgreSQL
# (benches/replicas.rs: runs per second with one and three replicas, stream takeover after a
# SIGKILL; needs the PostgreSQL the tests use) and the cost per task (benches/cost.rs: the tokens
# of a task run on both model APIs, cached and not, at list prices) and the overhead of a coding
# run's boundary (benches/coding.rs: the sandbox's start, the push scan), then writes bench/RESULTS.md.
# Exits non-zero when a target is missed (1) or a figure could not be measured (2).
#
# BENCH_QUICK=1 shrinks the sample sizes for a smoke run (the figures are then not worth keeping).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT="$ROOT/target/bench-results"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT/picogent"
started=$(date +%s)
say() { echo "[bench $(($(date +%s) - started))s] $*" >&2; }

say "building the bench drivers and picogent (release profile)"
cargo bench --no-run --bench compare --bench mcp_stdio --bench replicas --bench cost --bench coding
# The processes measured are the binary people run: `cargo build --release`. The one `cargo bench`
# leaves in target/release is built with the dev-dependencies' features too (tokio's test-util,
# criterion's), so it is built again without them and copied aside, where a later `cargo bench`
# cannot replace it.
cargo build --release --bin picogent
BIN="$OUT/picogent"
cp "$ROOT/target/release/picogent" "$BIN"
test -x "$BIN"

say "installing the peers"
if [ ! -d bench/node_modules/@modelcontextprotocol/server-everything ] || [ ! -d bench/node_modules/@modelcontextprotocol/sdk ]; then
    (cd bench && npm install --no-audit --no-fund --loglevel=error)
fi
if [ ! -x bench/.venv/bin/python ] || ! bench/.venv/bin/python -c 'import fastmcp' 2>/dev/null; then
    python3 -m venv bench/.venv
    bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/peers/requirements.txt
fi

say "in-process comparisons"
BENCH_OUT="$OUT/compare.json" cargo bench --bench compare

say "whole-process memory"
python3 bench/procs.py "$BIN" "$OUT/procs.json"

say "MCP over stdio"
if "$BIN" mcp --help >/dev/null 2>&1; then
    MCP_DIR=$(mktemp -d)
    trap 'rm -rf "$MCP_DIR"' EXIT
    python3 bench/mcp_setup.py "$BIN" "$MCP_DIR" > "$MCP_DIR/servers.json"
    BENCH_MCP_SERVERS=$(cat "$MCP_DIR/servers.json") BENCH_MCP_BOARD=$(cat "$MCP_DIR/board.json") \
        BENCH_MCP_OUT="$OUT/mcp.json" cargo bench --bench mcp_stdio
    python3 bench/mcp_setup.py --stop "$MCP_DIR"
else
    echo '{"skipped": "this build of picogent has no `mcp` command"}' > "$OUT/mcp.json"
fi

say "replicas on PostgreSQL"
BENCH_BIN="$BIN" BENCH_REPLICAS_OUT="$OUT/replicas.json" cargo bench --bench replicas

say "cost per task"
# It exits non-zero when its target is missed, after writing cost.json, which report.py reads the
# miss from (exit 1); a crash leaves no cost.json, which report.py counts as not measured (exit 2).
BENCH_COST_OUT="$OUT/cost.json" cargo bench --bench cost || true

say "a coding run's boundary: the sandbox's start and the push scan"
BENCH_CODING_OUT="$OUT/coding.json" cargo bench --bench coding

say "writing bench/RESULTS.md"
status=0
python3 bench/report.py "$OUT" bench/RESULTS.md || status=$?
say "done (exit $status)"
exit $status
