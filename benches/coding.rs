//! The overhead of a coding run's boundary, for `bench/run.sh`: what the sandbox's start adds to
//! a run of a coding agent (the same trivial agent run with and without bubblewrap, picogent's
//! own relay inside), and how long the push scan takes on a commit of 200 files of 16 KiB (the
//! worktree's files before the commit, then every blob and message the push adds). The target: the
//! two together under one second per run.
//!
//! Writes one JSON document to `BENCH_CODING_OUT` (default `target/bench-results/coding.json`) for
//! `bench/report.py`. In process, loopback only, a local bare repository as the remote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../tests/support/git.rs"]
mod git_support;
use std::sync::Arc;
use std::time::Instant;

use picogent::workspace::config::{CodingAgentConfig, Repository, WorkspacesConfig};
use picogent::workspace::scan::PushScan;
use picogent::workspace::{Invocation, TaskKey, Workspaces, coding, sandbox};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 15;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let out = std::env::var("BENCH_CODING_OUT").unwrap_or_else(|_| "target/bench-results/coding.json".into());
    let bwrap = Command::new("bwrap").arg("--version").output().is_ok_and(|out| out.status.success());
    sandbox::set_relay_program(PathBuf::from(env!("CARGO_BIN_EXE_picogent")));
    let dir = tempfile::tempdir().unwrap();
    let model = picogent::offline_model::start(picogent::offline_model::OfflineModelOptions::planner()).await.unwrap();
    let config = WorkspacesConfig {
        root: dir.path().join("w"),
        repositories: BTreeMap::from([(
            "app".to_string(),
            Repository {
                url: git_support::remote(dir.path()).to_string_lossy().into_owned(),
                base: "main".into(),
                push: None,
                projects: vec!["team".into()],
                labels: vec![],
            },
        )]),
        ..WorkspacesConfig::default()
    };
    let workspaces = Workspaces::new(Arc::new(config), "picogent", "p@x");
    let (workspace, _) = workspaces.open("app", &TaskKey::new("TE-1").unwrap(), None).await.unwrap();
    let base_url = model.url();
    let script =
        r#"echo "one more line" >> src/date.py; printf '{"type":"result","subtype":"success","result":"ok"}\n'"#;
    let mut timings: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let modes: &[(&str, bool)] = if bwrap { &[("plain", false), ("sandboxed", true)] } else { &[("plain", false)] };
    for _ in 0..ROUNDS {
        for (mode, sandboxed) in modes {
            let entry = CodingAgentConfig {
                command: Some(vec!["sh".into(), "-c".into(), script.into()]),
                sandbox: Some(*sandboxed),
                ..CodingAgentConfig::default()
            };
            let agent = entry.resolve("bench").unwrap();
            let invocation = Invocation {
                agent: &agent,
                workspace: &workspace,
                instructions: "bench",
                model: "m",
                base_url: &base_url,
            };
            let started = Instant::now();
            let report = coding::run(&invocation, &|_| {}, &CancellationToken::new()).await;
            assert!(report.finished(), "{report:?}");
            timings.entry(mode).or_default().push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    // The push scan: 200 new files of 16 KiB, committed as picogent commits them.
    for n in 0..200 {
        let text = format!("line {n}\n").repeat(2048);
        std::fs::write(workspace.path.join(format!("file{n}.txt")), text).unwrap();
    }
    let pinned = workspaces.pinned(&workspace).unwrap();
    let scan = PushScan {
        secrets: vec![("the tracker's token (TEAMBOARD_TOKEN)".into(), "tok-bench-secret-0000".into())],
        max_file_bytes: 5 * 1024 * 1024,
    };
    let git_of = picogent::workspace::git::Git::new("picogent", "p@x");
    let mut before_commit = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let found = scan.worktree(&git_of, &pinned).await.unwrap();
        before_commit.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(found.is_empty(), "{found:?}");
    }
    git_of.in_worktree(&pinned, &["add", "--all"]).await.unwrap();
    git_of.in_worktree(&pinned, &["commit", "--quiet", "-m", "TE-1: bench"]).await.unwrap();
    let head = git_of.in_worktree(&pinned, &["rev-parse", "HEAD"]).await.unwrap();
    let base = git_of.in_worktree(&pinned, &["merge-base", "HEAD", "refs/remotes/origin/main"]).await.unwrap();
    let mut commits = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let found = scan.commits(&git_of, &workspace.mirror, &base, &head).await.unwrap();
        commits.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(found.is_empty(), "{found:?}");
    }
    let plain = median(timings["plain"].clone());
    let sandboxed = timings.get("sandboxed").map(|samples| median(samples.clone()));
    let sandbox_ms = sandboxed.map(|sandboxed| (sandboxed - plain).max(0.0));
    let scan_ms = median(before_commit) + median(commits);
    let total_ms = sandbox_ms.unwrap_or(0.0) + scan_ms;
    let result = json!({
        "rounds": ROUNDS,
        "bwrap": bwrap,
        "run_plain_ms": plain,
        "run_sandboxed_ms": sandboxed,
        "sandbox_start_ms": sandbox_ms,
        "scan_files": 200,
        "scan_file_bytes": 16 * 1024,
        "scan_ms": scan_ms,
        "overhead_ms": total_ms,
        "target_ms": 1000,
        "met": total_ms < 1000.0 && bwrap,
    });
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    if let Some(parent) = Path::new(&out).parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&result).unwrap()).unwrap();
    model.shutdown().await;
}
