#!/usr/bin/env python3
"""Turns the JSON written by the benchmarks into bench/RESULTS.md and exits 1 when a target is
missed (2 when a figure is missing).

Usage: report.py RESULTS_DIR RESULTS_MD
RESULTS_DIR holds compare.json (benches/compare.rs), procs.json (bench/procs.py),
mcp.json (benches/mcp_stdio.rs), replicas.json (benches/replicas.rs), cost.json
(benches/cost.rs) and coding.json (benches/coding.rs). The demo's token figures are kept from run to run in the history table at the
end of RESULTS.md.
"""

import datetime
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

HISTORY_START = "<!-- history: one row per run, appended by bench/report.py -->"


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def us(value):
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
    return f"{value:.1f} µs"


def spread(s, fmt=us):
    return f"{fmt(s['median'])} (IQR {fmt(s['p25'])}–{fmt(s['p75'])}, p99 {fmt(s['p99'])}, n={s['n']})"


def mib(kib):
    return f"{kib / 1024:.1f} MiB"


def rss_spread(s):
    return f"{mib(s['median'])} (IQR {mib(s['p25'])}–{mib(s['p75'])}, max {mib(s['max'])}, n={s['n']})"


def listed(entry):
    """`23 tools, 22.1 KB` of a server's tools/list answer, when the driver recorded it."""
    if entry.get("tools_listed") is None:
        return ""
    return f" ({entry['tools_listed']} tools, {entry['list_answer_bytes'] / 1000:.1f} KB)"


# The floor servers of benches/mcp_stdio.rs: the board GET behind a stdio line and nothing else.
FLOORS = (
    ("floor-std", "std floor server",
     "the same board GET behind a stdio line: no MCP library, blocking std I/O"),
    ("floor-tokio", "tokio + reqwest floor server",
     "the same on picogent's runtime and HTTP client: tokio current-thread on the pipes, reqwest"),
)


def mcp_rows(mcp, notes):
    """The MCP stdio targets: `tools/list` against server-everything (Node, the server the issue
    names) and the FastMCP peer. Everything else measured over stdio goes to `notes`, without a
    target: `tools/call` of `get_task` against the Node SDK peer and the FastMCP peer (one GET of
    the same task from the same board on every side, so both wait on the board alike), the bare
    GET, the floor servers, and what has no like-for-like counterpart (the peers' `echo`, which
    does no I/O)."""
    rows = []
    ours = mcp["picogent"]
    list_peers = (("node-everything", "Node `@modelcontextprotocol/server-everything`", 3.0),
                  ("python-fastmcp", "Python FastMCP peer", 10.0))
    for peer, label, target in list_peers:
        what = f"MCP stdio `tools/list` round trip{listed(ours)} vs {label}"
        if peer not in mcp:
            rows.append((what, "peer not measured", "", "", f"≥ {target:g}× faster", None))
            continue
        ratio = mcp[peer]["tools_list_us"]["median"] / ours["tools_list_us"]["median"]
        rows.append((what + listed(mcp[peer]), spread(ours["tools_list_us"]), spread(mcp[peer]["tools_list_us"]),
                     f"{ratio:.1f}× faster (median)", f"≥ {target:g}× faster", ratio >= target))

    notes.append(("picogent `tools/call` `get_task` (one board GET)", spread(ours["tools_call_us"])))
    for peer, label in (("node-sdk", "Node peer on `@modelcontextprotocol/sdk`"),
                        ("python-fastmcp", "Python FastMCP peer")):
        what = f"{label} `tools/call` `get_task` (the same board GET)"
        if peer not in mcp or mcp[peer].get("tool") != "get_task":
            notes.append((what, "peer not measured"))
            continue
        theirs = mcp[peer]["tools_call_us"]
        ratio = theirs["median"] / ours["tools_call_us"]["median"]
        notes.append((what, f"{spread(theirs)}; picogent {ratio:.1f}× faster (median)"))
    board = mcp.get("board-get")
    if board:
        notes.append((f"bare HTTP GET `{board['path']}` of the board, one kept-alive connection, from the driver",
                      spread(board["get_us"])))
        notes.append(("picogent's own part of `get_task` (its call minus the bare GET, medians)",
                      us(ours["tools_call_us"]["median"] - board["get_us"]["median"])))
    for floor, floor_label, what in FLOORS:
        if floor in mcp:
            notes.append((f"{floor_label}: `tools/call` `get_task`, {what}", spread(mcp[floor]["tools_call_us"])))
    for peer, label in (("node-everything", "Node server-everything"), ("python-fastmcp-echo", "Python FastMCP peer"),
                        ("node-sdk", "Node SDK peer")):
        if peer not in mcp:
            continue
        if mcp[peer].get("tool") == "echo":
            notes.append((f"{label} `tools/call` `echo` (no I/O; picogent has no such tool)",
                          spread(mcp[peer]["tools_call_us"])))
        if peer == "node-sdk":
            notes.append((f"{label} `tools/list`{listed(mcp[peer])}", spread(mcp[peer]["tools_list_us"])))
    return rows


def cost_section(cost):
    """The cost of a task (benches/cost.rs): one row per task and API, each figure beside the
    last commit's (bench/cost.json in HEAD) when it had one."""
    last = {(r["task"], r["api"]): r for r in (cost.get("last_commit") or [])}
    apis = list(dict.fromkeys(r["api"] for r in cost["rows"]))  # in the rows' order
    dollars = lambda amount: f"${amount:.4f}"
    cached = lambda r: f"{r['cached_tokens']:,} ({r['cached_share'] * 100:.1f}%)"
    cached_then = lambda r: f"{r['cached_tokens']:,}, {r['cached_share'] * 100:.1f}%"
    # (column, the figure now, the same figure of the last commit, in brackets)
    columns = (("turns", lambda r: str(r["turns"]), None),
               ("prompt tokens", lambda r: f"{r['prompt_tokens']:,}", None),
               ("cached (% of prompt)", cached, cached_then),
               ("cache-written", lambda r: f"{r['cache_write_tokens']:,}", None),
               ("completion", lambda r: f"{r['completion_tokens']:,}", None),
               ("cost without caching", lambda r: dollars(r["cost_without_cache"]), None),
               ("cost with caching", lambda r: dollars(r["cost_with_cache"]), None))
    prices = "; ".join(f"`llm.api` {api} priced as {p['model']} (input ${p['per_million']['input_per_million']:.2f}"
                       + (f", cache read ${p['per_million']['cache_read_per_million']:.2f}"
                          if p["per_million"].get("cache_read_per_million") is not None else "")
                       + (f", cache write ${p['per_million']['cache_write_per_million']:.2f}"
                          if p["per_million"].get("cache_write_per_million") is not None else "")
                       + f", output ${p['per_million']['output_per_million']:.2f} per million)"
                       for api, p in ((api, cost["prices"][api]) for api in apis))
    out = ["## Cost of a task", "",
           "`benches/cost.rs`: the demo's task run and a 12-turn scripted task (11 tool calls with large results), "
           "each on both model APIs against the offline model endpoint and its prompt-cache simulation, as the run "
           f"records count them. Prices: {cost['prices_as_of']}: {prices}. Without caching: every prompt token at "
           "the input rate; with caching: cached and written tokens at their own rates.", ""]
    out.append("Beside each figure, the same figure in the last commit's `bench/cost.json`." if last
               else "No figures in the last commit (`bench/cost.json` is not in HEAD).")
    out += ["", "| task | `llm.api` | " + " | ".join(name for name, _, _ in columns) + " |",
            "|---|---|" + "---|" * len(columns)]
    for r in cost["rows"]:
        before = last.get((r["task"], r["api"]))
        cells = [f"{now(r)} (last commit {(then or now)(before)})" if before else now(r) for _, now, then in columns]
        label = r["task_label"] + (" (not in the last commit)" if last and not before else "")
        out.append(f"| {label} | {r['api']} | " + " | ".join(cells) + " |")
    if cost.get("run_to_run"):
        out += ["", f"Run to run: {cost['run_to_run']}."]
    turns = cost.get("long_task_turns") or {}
    if turns:
        out += ["", "Prompt tokens of each turn of the long task (rebuilt from the stored conversation): "
                + "; ".join(f"{api}: {', '.join(f'{t:,}' for t in turns[api])}" for api in apis if api in turns)
                + "."]
    out.append("")
    return out


def main():
    results_dir, results_md = Path(sys.argv[1]), Path(sys.argv[2])
    compare = load(results_dir / "compare.json")
    procs = load(results_dir / "procs.json")
    mcp = load(results_dir / "mcp.json")
    replicas = load(results_dir / "replicas.json")
    cost = load(results_dir / "cost.json")
    coding = load(results_dir / "coding.json")
    rows = []  # (what, ours, baseline, ratio/figure, target, met: True/False/None)

    if compare:
        d = compare["dispatch"]
        rows.append(("tool dispatch: `get_task` via the registry vs bare reqwest GET", spread(d["ours"]),
                     spread(d["baseline"]), f"{d['ratio_median']:.2f}× (median)", "≤ 1.15×",
                     d["ratio_median"] <= 1.15))
        t = compare["turn"]
        rows.append(("one loop turn vs bare async-openai request (same body)", spread(t["ours"]),
                     spread(t["baseline"]), f"{t['ratio_median']:.2f}× (median)", "≤ 1.10×",
                     t["ratio_median"] <= 1.10))
        e = compare["event"]
        late = e.get("observer_late_samples", 0)
        late_note = f"; {late} samples where the request beat the observer's stamp, counted as 0" if late else ""
        rows.append(("event → first model request vs loopback WebSocket echo" + late_note, spread(e["ours"]),
                     spread(e["baseline"]),
                     f"{e['ratio_p99']:.2f}× (p99); median {us(e['ours']['median'])}, {e['ratio_median']:.2f}× the echo's",
                     "p99 ≤ 15×", e["ratio_p99"] <= 15.0))
        f = compare["filter"]["ours"]
        rows.append(("parse + filter of `message.new` not for the agent (one core)",
                     f"{f['median']:,.0f}/s (IQR {f['p25']:,.0f}–{f['p75']:,.0f}, n={f['n']})", "—",
                     f"{f['median']:,.0f}/s", "≥ 50,000/s", f["median"] >= 50_000))
        k = compare["tokens"]
        rows.append(("tokens of tool definitions: task run", f"{k['task_run']['tokens']} ({k['task_run']['tools']} tools)",
                     f"all: {k['all']['tokens']} ({k['all']['tools']} tools)", str(k["task_run"]["tokens"]),
                     "≤ 1,500", k["task_run"]["tokens"] <= 1500))
        rows.append(("tokens of tool definitions: chat reply",
                     f"{k['chat_reply']['tokens']} ({k['chat_reply']['tools']} tools)",
                     f"all: {k['all']['tokens']}", str(k["chat_reply"]["tokens"]), "≤ 900",
                     k["chat_reply"]["tokens"] <= 900))
        rows.append(("tokens of all tool definitions", str(k["all"]["tokens"]), "—", str(k["all"]["tokens"]),
                     "≤ 2,000", k["all"]["tokens"] <= 2000))
    else:
        rows.append(("in-process comparisons (benches/compare.rs)", "not measured", "", "", "", None))

    if procs:
        a, n = procs["agent_idle_kib"], procs["node_idle_kib"]
        ratio = a["median"] / n["median"]
        rows.append(("RSS of `picogent run`, connected and idle, vs bare Node.js " + procs.get("node_version", ""),
                     rss_spread(a), rss_spread(n), f"{ratio:.2f}×", "≤ 0.8×", ratio <= 0.8))
        loaded = procs["agent_loaded_kib"]
        delta_mb = (loaded["max"] - a["median"]) * 1024 / 1e6
        rows.append((f"RSS with {procs['peak_active_runs']} runs in flight (model answering after 2 s) vs idle",
                     rss_spread(loaded), mib(a["median"]), f"+{delta_mb:.1f} MB (max − idle median)", "≤ +45 MB",
                     delta_mb <= 45 and procs["peak_active_runs"] >= 200))
    else:
        rows.append(("RSS figures (bench/procs.py)", "not measured", "", "", "", None))

    if replicas:
        t, k = replicas["throughput"], replicas["takeover"]
        per_s = lambda runs: ", ".join(f"{r:.2f}" for r in runs)
        rows.append((f"runs completed per second, 3 replicas vs 1 ({t['mentions']} mentions at once, model answering "
                     f"after {t['model_delay_ms'] / 1000:g} s, {t['slots_per_replica']} slots per replica)",
                     f"{t['three_median']:.2f}/s (rounds: {per_s(t['three'])})",
                     f"{t['one_median']:.2f}/s (rounds: {per_s(t['one'])})",
                     f"{t['ratio_median']:.2f}× (median)", "≥ 2.5×", t["ratio_median"] >= 2.5))
        samples = ", ".join(f"{s:.1f} s" for s in k["samples_s"])
        rows.append((f"stream takeover after SIGKILL of the holder (3 replicas, stream_lease_ms {k['stream_lease_ms']})",
                     f"median {k['median_s']:.1f} s, max {k['max_s']:.1f} s ({samples})", "—",
                     f"max {k['max_s']:.1f} s", "≤ 10 s", k["max_s"] <= 10.0))
    else:
        rows.append(("replicas on PostgreSQL (benches/replicas.rs)", "not measured", "", "", "≥ 2.5× / ≤ 10 s", None))

    if cost:
        t = cost["target"]
        demo = next(r for r in cost["rows"] if r["task"] == "demo" and r["api"] == "anthropic")
        rows.append(("cached share of the demo task's prompt tokens, `llm.api` anthropic (benches/cost.rs)",
                     f"{demo['cached_tokens']:,} of {demo['prompt_tokens']:,} cached", "—",
                     f"{t['cached_share'] * 100:.1f}%", f"> {t['above'] * 100:.0f}%", t["met"]))
    else:
        rows.append(("cost per task (benches/cost.rs)", "not measured", "", "", "", None))

    if coding:
        sandbox = coding.get("sandbox_start_ms")
        sandbox_words = f"sandbox start {sandbox:.0f} ms" if sandbox is not None else "no bwrap: sandbox not measured"
        rows.append((f"a coding run's boundary: sandbox start + push scan of {coding['scan_files']} files "
                     f"(benches/coding.rs)",
                     f"{coding['overhead_ms']:.0f} ms ({sandbox_words}, scan {coding['scan_ms']:.0f} ms)",
                     f"run without the sandbox {coding['run_plain_ms']:.0f} ms", f"{coding['overhead_ms']:.0f} ms",
                     "< 1 s per run", coding["met"]))
    else:
        rows.append(("a coding run's boundary (benches/coding.rs)", "not measured", "", "", "< 1 s per run", None))

    mcp_notes = []  # (what, figure): measured alongside, no target
    if mcp and "picogent" in mcp:
        rows += mcp_rows(mcp, mcp_notes)
    else:
        reason = (mcp or {}).get("skipped", "picogent has no `mcp --stdio` command in this build")
        rows.append(("MCP stdio round trips vs Node / Python peers", f"not measured: {reason}", "", "",
                     "≥ 3× / ≥ 10× faster", None))

    # ---- demo tokens, tracked from run to run ----
    history = []
    if results_md.exists():
        text = results_md.read_text()
        if HISTORY_START in text:
            for line in text.split(HISTORY_START, 1)[1].splitlines():
                if line.startswith("| 20"):
                    history.append(line)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    demo = compare["demo"] if compare else None
    if demo:
        history.append(f"| {now} | {commit} | {demo['task_run_turns']} | {demo['task_run_prompt_tokens']:,} | "
                       f"{demo['task_run_completion_tokens']:,} | {demo['model_requests']} | "
                       f"{demo['wire_tokens_all_requests']:,} |")

    machine = " ".join([
        subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip() + " cores",
        subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip(),
    ])
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (StopIteration, OSError):
        pass
    loadavg = open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else []

    missed = [r for r in rows if r[5] is False]
    unmeasured = [r for r in rows if r[5] is None]
    out = ["# Benchmark results", "",
           "Generated by `bench/run.sh` (do not edit by hand; notes belong in `docs/performance.md`).", "",
           f"- date: {now}, commit {commit}",
           f"- machine: {machine}; {cpu}; load average at the end {' '.join(loadavg)}",
           f"- rustc: {subprocess.run(['rustc', '--version'], capture_output=True, text=True).stdout.strip()}; "
           f"python {platform.python_version()}",
           "- figures: median, with the interquartile range (IQR), p99 and sample count; each comparison ran "
           "both sides alternately in the same run", "",
           "| what | picogent | measured against | figure | target | met |", "|---|---|---|---|---|---|"]
    for what, ours, baseline, figure, target, met in rows:
        mark = {True: "yes", False: "**MISSED**", None: "not measured"}[met]
        out.append(f"| {what} | {ours} | {baseline} | {figure} | {target} | {mark} |")
    out += ["", f"Targets met: {sum(1 for r in rows if r[5])} of {len(rows)}; missed: {len(missed)}; "
                f"not measured: {len(unmeasured)}.", ""]
    if mcp_notes:
        out += ["## MCP over stdio: measured alongside, no target", "",
                "Same run, same blocks as the rows above (`benches/mcp_stdio.rs`). `tools/call` `get_task` "
                "makes one GET of the same task from the same board on every side, so every server waits on "
                "the board alike: measured and printed, with no target.", "",
                "| what | figure |", "|---|---|"]
        out += [f"| {what} | {figure} |" for what, figure in mcp_notes]
        out.append("")
    if demo:
        out += ["## Tokens sent over the demo's task run", "",
                f"The demo (`picogent demo`: reference board, offline planner, agent) task run took "
                f"{demo['task_run_turns']} turns and sent {demo['task_run_prompt_tokens']:,} prompt tokens "
                f"({demo['task_run_completion_tokens']:,} completion tokens), as the run record counts them "
                f"(o200k). All {demo['model_requests']} model requests of the demo (task run and chat reply) "
                f"came to {demo['wire_tokens_all_requests']:,} o200k tokens of request JSON.", "",
                "| run | trigger | turns | tool calls | prompt tokens | completion tokens |",
                "|---|---|---|---|---|---|"]
        for i, run in enumerate(demo["runs"]):
            out.append(f"| {i + 1} | {run['trigger'].split(' ')[0]} | {run['turns']} | {run['tool_calls']} | "
                       f"{run['prompt_tokens']:,} | {run['completion_tokens']:,} |")
        out.append("")
    if cost:
        out += cost_section(cost)
    out += ["## Demo task run, from run to run", "", HISTORY_START, "",
            "| date | commit | turns | prompt tokens | completion tokens | model requests (demo) | "
            "request JSON tokens (demo) |", "|---|---|---|---|---|---|---|"]
    out += history
    out.append("")
    results_md.write_text("\n".join(out))
    print("\n".join(out))
    if missed:
        print(f"\n{len(missed)} target(s) missed:", file=sys.stderr)
        for r in missed:
            print(f"  - {r[0]}: {r[3]} (target {r[4]})", file=sys.stderr)
        return 1
    if unmeasured:
        print(f"\n{len(unmeasured)} figure(s) not measured", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
