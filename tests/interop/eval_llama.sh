#!/usr/bin/env bash
# Regenerates the scorecard of `picogent eval` against llama.cpp's server with Gemma 3 270M that
# docs/llm.md shows: builds (or reuses) llama-server and the model with install_llama.sh, starts
# it on loopback with the tool-capable Qwen 2.5 chat template (one slot, greedy, seed 42), and
# runs `picogent eval` with the config below. Prints the scorecard; `--json` is passed through.
# Takes a few minutes on 2 cores (the model writes ~60 tokens a second).
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(bash tests/interop/install_llama.sh | grep '^LLAMA_')"
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA_SERVER" --jinja -m "$LLAMA_MODEL" --alias gemma3-270m --host 127.0.0.1 --port "$port" -c 4096 -np 1 --seed 42 --temp 0 \
  --no-webui --chat-template-file "$LLAMA_TEMPLATES/Qwen-Qwen2.5-7B-Instruct.jinja" >"$work/llama.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
cat >"$work/agent.json" <<JSON
{
  "slug": "picogent", "name": "Picogent",
  "tracker": {"url": "http://127.0.0.1:8700"},
  "llm": {"base_url": "http://127.0.0.1:$port/v1", "model": "gemma3-270m", "temperature": 0,
          "context_tokens": 4096, "max_output_tokens": 256, "stream": true, "idle_timeout_ms": 60000,
          "max_concurrent_requests": 1, "parallel_tool_calls": false},
  "limits": {"max_turns": 4, "run_timeout_ms": 120000},
  "state": {"path": "$work/picogent.db"},
  "prompts_dir": "$(pwd)/prompts"
}
JSON
cargo run --quiet --release -- eval --config "$work/agent.json" --timeout-secs 600 "$@"
