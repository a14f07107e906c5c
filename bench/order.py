#!/usr/bin/env python3
"""Writes bench/picogent.order, the order `build.rs` asks the linker to lay out the release
binary's functions in: first those `picogent run` executes while it starts, connects and waits;
then those it adds working a task (against the offline model endpoint); then those `picogent
board` executes serving it. Everything else follows, as the linker places it.

It profiles the given release binary under `valgrind --tool=callgrind` (every function executed,
by its linker name): a reference board and an agent connected to it, idle for a few seconds (the
profile is cut there with `callgrind_control --dump`), then one task assigned and worked, then
both stopped. Run it after a change of toolchain, dependencies or much of the code, then rebuild
(`cargo build --release`) and check idle memory with `bench/procs.py` or `bench/run.sh`. Names
that no longer exist in a later build are skipped by the linker, so a stale file only loses effect.

Usage: bench/order.py [BINARY]   (default target/release/picogent; needs valgrind and nm)
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import ROOT, free_port, http, wait_for  # noqa: E402

OUT = ROOT / "bench" / "picogent.order"
IDLE_SECONDS = 3
# Under valgrind a process starts some 50 times slower.
START_TIMEOUT = 600


def executed(profile, binary):
    """The functions of `binary` that ran, in the order callgrind first names them. A profile cut
    by a dump continues the names of the part before it, so `profile` is a list of parts."""
    objects, functions = {}, {}
    entry = re.compile(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$")
    parts = []
    for part in profile:
        names = {}
        read_part(part, binary, entry, objects, functions, names)
        parts.append(list(names))
    return parts


def read_part(profile, binary, entry, objects, functions, names):
    current = None
    for line in open(profile, errors="replace"):
        match = entry.match(line.rstrip("\n"))
        if not match:
            continue
        kind, index, name = match.groups()
        if kind in ("ob", "cob"):
            if name:
                objects[index] = name
            if kind == "ob":
                current = objects.get(index)
        else:
            if name:
                functions[index] = name
            if kind == "fn" and current and os.path.realpath(current) == os.path.realpath(binary):
                # `'2` marks a recursion level, not another symbol.
                names.setdefault(re.sub(r"'\d+$", "", functions[index]), None)


def defined_functions(binary):
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    return {parts[2] for parts in (line.split() for line in out.splitlines()) if len(parts) == 3
            and parts[1] in "tTwW"}


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target" / "release" / "picogent")
    work = Path(tempfile.mkdtemp(prefix="picogent-order-"))
    board_port, http_port, model_port = free_port(), free_port(), free_port()
    board_url = f"http://127.0.0.1:{board_port}"
    log = open(work / "processes.log", "w")

    def profiled(name, args, env=None):
        command = ["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={work / name}.cg",
                   binary, *args]
        return subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=work)

    board = profiled("board", ["board", "--listen", f"127.0.0.1:{board_port}", "--db", str(work / "board.db"),
                               "--seed", str(ROOT / "fixtures" / "board-seed.json")])
    model = subprocess.Popen([binary, "offline-model", "--listen", f"127.0.0.1:{model_port}"], stdout=log,
                             stderr=log)
    agent = None
    try:
        wait_for("the board", lambda: http(f"{board_url}/api/projects", token="tok-alice")[0] == 200,
                 START_TIMEOUT)
        config = {"slug": "picogent", "name": "picogent", "tracker": {"url": board_url},
                  "llm": {"base_url": f"http://127.0.0.1:{model_port}/v1", "model": "offline-planner",
                          "timeout_ms": 600000},
                  "limits": {"run_timeout_ms": 1800000},
                  "state": {"path": str(work / "picogent.db")}, "http": {"listen": f"127.0.0.1:{http_port}"},
                  "prompts_dir": str(ROOT / "prompts")}
        (work / "agent.json").write_text(json.dumps(config))
        env = dict(os.environ, TEAMBOARD_TOKEN="tok-picogent", RUST_LOG="warn")
        agent = profiled("run", ["run", "--config", str(work / "agent.json")], env=env)
        wait_for("the agent to be ready", lambda: http(f"http://127.0.0.1:{http_port}/readyz")[0] == 200,
                 START_TIMEOUT)
        time.sleep(IDLE_SECONDS)
        # The idle part ends here (written as run.cg.1; the rest goes to run.cg at exit).
        subprocess.run(["callgrind_control", "--dump=idle", str(agent.pid)], stdout=log, stderr=log, check=True)
        status, text = http(f"{board_url}/api/tasks", "POST",
                            {"project_slug": "team", "title": "Order profile task",
                             "description": "Profile\n- first step\n- second step", "assignee_slug": "picogent"},
                            token="tok-alice", timeout=120)
        if status not in (200, 201):
            raise SystemExit(f"cannot create the task: {status} {text}")

        def worked():
            status, text = http(f"http://127.0.0.1:{http_port}/metrics", timeout=120)
            return status == 200 and "picogent_runs_total{" in text

        wait_for("the agent to finish its run", worked, START_TIMEOUT)
    finally:
        # Both shut down cleanly on SIGTERM, and callgrind writes its profile at exit.
        for process in (agent, board, model):
            if process is not None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)

    known = defined_functions(binary)
    order, seen = [], set()
    idle, working = executed([work / "run.cg.1", work / "run.cg"], binary)
    (serving,) = executed([work / "board.cg"], binary)
    for part in (idle, working, serving):
        for name in part:
            if name in known and name not in seen:
                seen.add(name)
                order.append(name)
    if len(order) < 1000:
        raise SystemExit(f"only {len(order)} functions profiled; see {work / 'processes.log'}")
    OUT.write_text("\n".join(order) + "\n")
    print(f"wrote {OUT}: {len(order)} functions ({len(idle)} idle, then a task run, then the board)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
