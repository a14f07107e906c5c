#!/usr/bin/env python3
"""Whole-process memory figures for bench/run.sh.

Starts the reference board, the offline model endpoint (answering 2 s late) and `picogent run`
with `limits.max_concurrent_runs` 200, all as separate processes on loopback, then:

1. idle: once the agent is connected and caught up (`/readyz`), samples its resident set size
   (VmRSS) alternately with that of a bare Node.js process doing nothing;
2. load: assigns 200 tasks to the agent at once and samples its RSS while the runs are in flight
   (`picogent_active_runs` from `/metrics`).

The binary's pages are dropped from the page cache first (written out, then
`POSIX_FADV_DONTNEED`), so its resident text is what the processes read in from disk, as on a
machine where the binary was installed earlier, and not an artifact of the copy `bench/run.sh`
has just written: a file just written sits in the page cache in large folios, and a fault in an
idle agent's code then maps the whole folio around it (docs/performance.md, "Memory").

Usage: procs.py PICOGENT_BINARY OUT_JSON
"""

import concurrent.futures
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS_IN_FLIGHT = 200


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def http(url, method="GET", body=None, token=None, timeout=10):
    request = urllib.request.Request(url, method=method)
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return 0, str(error)


def wait_for(what, check, timeout):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def active_runs(metrics_url):
    status, text = http(metrics_url)
    if status != 200:
        return None
    for line in text.splitlines():
        if line.startswith("picogent_active_runs "):
            return int(float(line.split()[1]))
    return None


def summary(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "p25": q[0], "p75": q[2], "min": values[0], "max": values[-1],
            "n": len(values)}


def drop_from_page_cache(path):
    """Writes `path` out and asks the kernel to drop its cached pages (clean ones go at once)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    binary, out = sys.argv[1], sys.argv[2]
    drop_from_page_cache(binary)
    work = Path(tempfile.mkdtemp(prefix="picogent-bench-"))
    board_port, model_port, http_port = free_port(), free_port(), free_port()
    board_url = f"http://127.0.0.1:{board_port}"
    logs = open(work / "processes.log", "w")
    processes = []

    def spawn(args, env=None):
        process = subprocess.Popen(args, stdout=logs, stderr=logs, env=env, cwd=work)
        processes.append(process)
        return process

    try:
        spawn([binary, "board", "--listen", f"127.0.0.1:{board_port}", "--db", str(work / "board.db"),
               "--seed", str(ROOT / "fixtures" / "board-seed.json")])
        spawn([binary, "offline-model", "--listen", f"127.0.0.1:{model_port}", "--delay-ms", "2000"])
        wait_for("the board", lambda: http(f"{board_url}/api/projects", token="tok-alice")[0] == 200, 30)
        wait_for("the model", lambda: http(f"http://127.0.0.1:{model_port}/v1/models")[0] == 200, 30)
        config = {
            "slug": "picogent",
            "name": "picogent",
            "tracker": {"url": board_url, "timeout_ms": 30000},
            "llm": {"base_url": f"http://127.0.0.1:{model_port}/v1", "model": "offline-planner",
                    "timeout_ms": 120000},
            "state": {"path": str(work / "picogent.db")},
            "http": {"listen": f"127.0.0.1:{http_port}"},
            "prompts_dir": str(ROOT / "prompts"),
            "limits": {"max_concurrent_runs": RUNS_IN_FLIGHT, "run_timeout_ms": 600000,
                       "max_tokens_per_day": 1_000_000_000},
        }
        (work / "agent.json").write_text(json.dumps(config, indent=2))
        env = dict(os.environ, TEAMBOARD_TOKEN="tok-picogent", RUST_LOG="warn")
        agent = spawn([binary, "run", "--config", str(work / "agent.json")], env=env)
        agent_http = f"http://127.0.0.1:{http_port}"
        wait_for("the agent to be ready", lambda: http(f"{agent_http}/readyz")[0] == 200, 60)
        node = spawn(["node", "-e", "setInterval(() => {}, 1 << 30)"])
        # Idle means idle: give both a moment past start-up before sampling (a measurement
        # settle, not a synchronisation — readiness was polled above).
        time.sleep(2)
        agent_idle, node_idle = [], []
        for round_index in range(20):
            pair = [(agent, agent_idle), (node, node_idle)]
            if round_index % 2:
                pair.reverse()
            for process, samples in pair:
                samples.append(rss_kib(process.pid))
            time.sleep(0.1)

        # 200 runs in flight: the offline model answers every request 2 s late.
        def assign(i):
            body = {"project_slug": "team", "title": f"Load task {i}",
                    "description": "Bench load\n- first step\n- second step", "assignee_slug": "picogent"}
            status, text = http(f"{board_url}/api/tasks", "POST", body, token="tok-alice", timeout=60)
            if status not in (200, 201):
                raise SystemExit(f"cannot create a task: {status} {text}")

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(assign, range(RUNS_IN_FLIGHT)))
        created_in = time.monotonic() - started
        metrics_url = f"{agent_http}/metrics"
        loaded, peak_active, at_full = [], 0, 0
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            active = active_runs(metrics_url) or 0
            rss = rss_kib(agent.pid)
            peak_active = max(peak_active, active)
            if active >= RUNS_IN_FLIGHT:
                loaded.append(rss)
                at_full += 1
                if at_full >= 40:
                    break
            elif peak_active >= RUNS_IN_FLIGHT and active < RUNS_IN_FLIGHT:
                break
            time.sleep(0.1)
        if not loaded:
            raise SystemExit(f"the agent never had {RUNS_IN_FLIGHT} runs in flight (peak {peak_active})")
        result = {
            "agent_idle_kib": summary(agent_idle),
            "node_idle_kib": summary(node_idle),
            "agent_loaded_kib": summary(loaded),
            "peak_active_runs": peak_active,
            "tasks_created_s": created_in,
            "node_version": subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip(),
        }
        Path(out).write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2), file=sys.stderr)
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        logs.close()


if __name__ == "__main__":
    main()
