#![allow(dead_code, unreachable_pub)] // each test binary uses a different part; `pub` is for them
//! The outside programs the tests drive, installed on first use so that `cargo test` sets itself
//! up on a fresh machine. Each function runs one install script of the repository (idempotent,
//! and quick when everything is already there) at most once per test binary and keeps its outcome:
//! a failure fails every test that needs the program with the script's own first cause (its exit
//! status and the last lines it printed), never a skip and never "poisoned". `tests/setup.sh`,
//! which `.ci/run` runs, runs the same scripts.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// How many of the script's last lines a failure repeats.
const TAIL_LINES: usize = 30;

/// Debian's Chromium at `/usr/bin/chromium` (or `$CHROMIUM`) and playwright-core in
/// `tests/browser/node_modules`, for `tests/browser.rs`.
#[track_caller]
pub fn ensure_browser() {
    ensure("tests/browser/install.sh");
}

/// Debian's bubblewrap (`bwrap`), for the tests that run a coding agent in the sandbox
/// (`tests/sandbox.rs`, `tests/hostile_workspace.rs`).
#[track_caller]
pub fn ensure_bwrap() {
    ensure("tests/coding-agents/install_bwrap.sh");
}

/// Qwen Code, Claude Code, Gemini CLI, Codex, OpenCode and mini-swe-agent in `~/.cache/picogent/cli` (or
/// `$PICOGENT_CLI_CACHE`), for `tests/coding_cli.rs`.
#[track_caller]
pub fn ensure_coding_clis() {
    ensure("tests/coding-agents/install.sh");
}

/// Runs `script` (a path from the root of the clone) with bash from the root of the clone, once
/// per test binary, and returns what it printed on stdout. Every later call, from any test of the
/// binary, returns the first outcome: on failure it panics (at the caller's line) with the first
/// cause again. Callers that arrive while the script runs wait for it.
#[track_caller]
pub fn ensure(script: &'static str) -> String {
    static OUTCOMES: Mutex<BTreeMap<&'static str, Result<String, String>>> = Mutex::new(BTreeMap::new());
    // The lock is held while the script runs, so that concurrent tests wait for the first run
    // instead of starting a second one; nothing panics while it is held, and a poisoned lock
    // (which that rules out) would still hold only finished outcomes.
    let mut outcomes = OUTCOMES.lock().unwrap_or_else(PoisonError::into_inner);
    let outcome = outcomes.entry(script).or_insert_with(|| run(script)).clone();
    drop(outcomes);
    match outcome {
        Ok(stdout) => stdout,
        Err(cause) => panic!("{cause}"),
    }
}

/// One run of `script`: its stdout, or why it failed, with the end of what it printed.
fn run(script: &str) -> Result<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("bash")
        .arg(root.join(script))
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run `bash {script}`: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut cause = format!(
        "`bash {script}`, run once per test binary to install what its tests need, failed with {}; \
         run it by hand to see all it printed",
        output.status
    );
    for (stream, text) in [("stderr", tail(&stderr)), ("stdout", tail(&stdout))] {
        if !text.is_empty() {
            cause.push_str(&format!("\nthe end of its {stream}:\n{text}"));
        }
    }
    Err(cause)
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}
