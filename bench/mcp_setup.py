#!/usr/bin/env python3
"""Sets up the MCP stdio comparison for bench/run.sh: starts a reference board with one task,
prints the BENCH_MCP_SERVERS list for benches/mcp_stdio.rs and writes DIR/board.json, the
BENCH_MCP_BOARD spec (the bare GET every `get_task` makes). `--stop DIR` stops that board.

The servers: picogent; @modelcontextprotocol/server-everything (the `tools/list` reference the
issue names; its `echo` call is reported for information); a peer on the same official Node SDK
with `get_task` (bench/peers/node_server.mjs); a FastMCP peer with `get_task`
(bench/peers/fastmcp_server.py) and the same peer's `echo`. Every `get_task` does one GET of the
same task with a bearer token against the same board.

Usage: mcp_setup.py PICOGENT_BINARY DIR   |   mcp_setup.py --stop DIR
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import ROOT, free_port, http, wait_for  # noqa: E402


def start(binary, work):
    port = free_port()
    board_url = f"http://127.0.0.1:{port}"
    log = open(work / "board.log", "w")
    board = subprocess.Popen([binary, "board", "--listen", f"127.0.0.1:{port}", "--db", str(work / "board.db"),
                              "--seed", str(ROOT / "fixtures" / "board-seed.json")], stdout=log, stderr=log)
    (work / "board.pid").write_text(str(board.pid))
    wait_for("the board", lambda: http(f"{board_url}/api/projects", token="tok-alice")[0] == 200, 30)
    status, text = http(f"{board_url}/api/tasks", "POST",
                        {"project_slug": "team", "title": "MCP bench task", "description": "- one\n- two"},
                        token="tok-alice")
    if status not in (200, 201):
        raise SystemExit(f"cannot create the task: {status} {text}")
    task_key = json.loads(text)["key"]
    config = {"slug": "picogent", "name": "picogent", "tracker": {"url": board_url},
              "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "none"},
              "state": {"path": str(work / "picogent.db")}, "prompts_dir": str(ROOT / "prompts")}
    (work / "agent.json").write_text(json.dumps(config))
    env = {"TEAMBOARD_TOKEN": "tok-picogent", "BOARD_URL": board_url, "RUST_LOG": "warn"}
    python = str(ROOT / "bench" / ".venv" / "bin" / "python")
    fastmcp = str(ROOT / "bench" / "peers" / "fastmcp_server.py")
    everything = str(ROOT / "bench" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist"
                     / "index.js")
    node_peer = str(ROOT / "bench" / "peers" / "node_server.mjs")
    servers = [
        {"name": "picogent", "command": [binary, "mcp", "--stdio", "--config", str(work / "agent.json")],
         "env": env, "tool": "get_task", "arguments": {"task_id": task_key}},
        {"name": "node-everything", "command": ["node", everything, "stdio"], "env": env,
         "tool": "echo", "arguments": {"message": "hello"}},
        {"name": "node-sdk", "command": ["node", node_peer], "env": env,
         "tool": "get_task", "arguments": {"task_id": task_key}},
        {"name": "python-fastmcp", "command": [python, fastmcp], "env": env,
         "tool": "get_task", "arguments": {"task_id": task_key}},
        {"name": "python-fastmcp-echo", "command": [python, fastmcp], "env": env,
         "tool": "echo", "arguments": {"message": "hello"}},
    ]
    board = {"url": board_url, "path": f"/api/tasks/{task_key}", "token": env["TEAMBOARD_TOKEN"]}
    (work / "board.json").write_text(json.dumps(board))
    print(json.dumps(servers))


def stop(work):
    pid_file = work / "board.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    if sys.argv[1] == "--stop":
        stop(Path(sys.argv[2]))
    else:
        start(sys.argv[1], Path(sys.argv[2]))
